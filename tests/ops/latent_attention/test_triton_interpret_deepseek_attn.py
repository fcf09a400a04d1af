"""The Triton ``deepseek_attn`` (its sparse-attention kernel with the host wrapper and the JAX
backward) in Triton's interpreter (CPU).

Run by ``nox -s triton_interpret`` (``TRITON_INTERPRET=1``). The conformance cases (top-k below
and above the context, the three rope forms, GQA and MQA, odd sizes, non-causal, decode and a
chunk against a longer cache) and rows that see no key (causal, more queries than keys) go
through ``check_impl`` on a pretend Hopper GPU, output and gradients against the float32
reference, with the test config (16 heads a program, 16 keys a step) and on two cases the
heuristic's; float32 and float16 (the interpreter's ``tl.dot`` is wrong on bfloat16). The
kernel's own masking of slots the selection never produces (out of range, after the token's
position) is checked directly against the JAX attention it is the forward of.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.ops import DeviceInfo, kernel_registry
from ejkernel.ops.deepseek_attn.cases import FULL_CASES, DSACase
from ejkernel.ops.families.latent_attention import gathered_latent_attention
from ejkernel.testing import conformance as C

if os.environ.get("TRITON_INTERPRET") != "1":  # the kernels must be decorated in interpreter mode
    pytest.skip("run with TRITON_INTERPRET=1 (nox -s triton_interpret)", allow_module_level=True)

from ejkernel_triton._launch import interpreted
from ejkernel_triton.deepseek_attn import TritonDeepSeekAttn
from ejkernel_triton.deepseek_attn._call import Spec, _sparse
from ejkernel_triton.deepseek_attn.heuristics import Tiles

pytestmark = pytest.mark.interpret

OP = "deepseek_attn"
GPU = DeviceInfo(platform="gpu", kind="interpreter", compute_capability=(9, 0))
IMPL = kernel_registry.get(OP, platform="triton")
TEST_CFG = "h16-k16"
EXTRA = (
    # Causal with more queries than keys: the first 4 queries see no key (zeros, no gradient).
    DSACase("empty-rows", sq=9, sk=5, h=4, hk=2, causal=True, topk=3),
    # 20 heads: two head blocks of 16, the second partial; 5 queries, top-k 17 of 23 keys (two steps).
    DSACase("odd-gqa-two-head-blocks", b=1, sq=5, sk=23, h=20, hk=5, r=24, dn=12, dr=6, dv=10, causal=True, topk=17),
)
CASES = [c for c in FULL_CASES if c.dtype == "float32"] + [
    c for c in FULL_CASES if c.dtype == "float16" and c.name.startswith(("topk6-causal", "decode-mqa"))
]
HEURISTIC_CASES = ("decode-mqa", "empty-rows")


@pytest.fixture(autouse=True)
def _interpreted():
    with interpreted():
        yield


def test_the_registered_implementation():
    assert isinstance(IMPL, TritonDeepSeekAttn)
    assert IMPL.available(GPU) is None
    assert TEST_CFG in IMPL.test_configs


def _params():
    for case in (*CASES, *EXTRA):
        yield pytest.param(case, TEST_CFG, id=f"{TEST_CFG}-{case.name}")
        if case.name in HEURISTIC_CASES:
            yield pytest.param(case, "heuristic", id=f"heuristic-{case.name}")


@pytest.mark.parametrize(("case", "cfg_id"), list(_params()))
def test_conformance(case, cfg_id):
    cfg = IMPL.test_configs.get(cfg_id)
    assert C.check_impl(IMPL, case, cfg, device=GPU) == "ok"


@pytest.mark.parametrize("causal", [True, False])
def test_kernel_skips_slots_the_selection_never_holds(causal):
    """Slots out of range (``-5``, ``seq_k``, ``seq_k + 7``) and, when causal, after the token's
    own position get no weight; a token whose slots are all unusable writes zeros."""
    b, sq, sk, h, r, rope, n = 2, 5, 11, 16, 16, 16, 19
    rng = np.random.default_rng(1)
    q = jnp.asarray(rng.standard_normal((b, sq, h, r + rope)), jnp.float32)
    kv = jnp.asarray(rng.standard_normal((b, sk, r + rope)), jnp.float32)
    sel = rng.integers(-1, sk, (b, sq, n))
    sel[:, :, :3] = (-5, sk, sk + 7)
    sel[1, 2] = -1  # no key at all
    sel[0, 0, 3] = sk - 1  # after query 0's own position (6) when causal
    sel = jnp.asarray(sel, jnp.int32)
    spec = Spec(lora=r, scale=0.3, causal=causal, tiles=Tiles(16, 16, 1, 4, 1))
    got = np.asarray(_sparse(spec, q, kv, sel))
    want = np.asarray(gathered_latent_attention(q, kv, sel, lora=r, scale=0.3, causal=causal, chunk=2))
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    assert not np.any(got[1, 2])
    # the JAX attention itself: one query by hand, from its usable slots only
    i, pos = 0, 0 + sk - sq
    ok = [t for t in np.asarray(sel[0, i]) if 0 <= t < sk and (not causal or t <= pos)]
    s = np.asarray(q[0, i]) @ np.asarray(kv[0, ok]).T * 0.3
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(want[0, i], (p / p.sum(-1, keepdims=True)) @ np.asarray(kv[0, ok, :r]), atol=1e-5)


def test_gradients_are_the_jax_attentions():
    """The custom VJP's backward is the VJP of the gathered JAX attention."""
    b, sq, sk, h, r, n = 1, 4, 9, 16, 16, 5
    rng = np.random.default_rng(2)
    q = jnp.asarray(rng.standard_normal((b, sq, h, r)), jnp.float32)
    kv = jnp.asarray(rng.standard_normal((b, sk, r)), jnp.float32)
    sel = jnp.asarray(rng.integers(-1, sk, (b, sq, n)), jnp.int32)
    spec = Spec(lora=r, scale=0.25, causal=True, tiles=Tiles(16, 16, 1, 4, 1))

    def loss(f):
        return lambda q, kv: jnp.sum(jnp.sin(f(q, kv)))

    got = jax.grad(loss(lambda q, kv: _sparse(spec, q, kv, sel)), argnums=(0, 1))(q, kv)
    jax_fn = lambda q, kv: gathered_latent_attention(q, kv, sel, lora=r, scale=0.25, causal=True, chunk=3)  # noqa: E731
    want = jax.grad(loss(jax_fn), argnums=(0, 1))(q, kv)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5)
