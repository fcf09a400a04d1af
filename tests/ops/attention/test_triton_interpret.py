"""The Triton kernels, with their host wrappers, in Triton's interpreter on the CPU.

Run by ``nox -s triton_interpret`` (``TRITON_INTERPRET=1``, PyTorch CPU tensors). On a GPU the
same kernels run through the shared conformance suite; here they go through the same suite
(``check_impl`` on a pretend Hopper GPU: declaration check, config filled from the heuristic and
validated, run, compared with the reference) on the same cases, with small 16x16 tiles so every
kernel visits several blocks and all three loop stages. The interpreter's ``tl.dot`` is wrong on
bfloat16 operands (NumPy has no bfloat16), so the low-precision cases run in float16 here.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.ops import BwdParams, DeviceInfo, FwdParams, kernel_registry, run_impl
from ejkernel.ops.families.attention import AttentionArgs
from ejkernel.ops.flash_attention import FlashAttentionConfig
from ejkernel.ops.flash_attention.cases import CASES as FLASH_ATTENTION_CASES
from ejkernel.ops.flash_attention.cases import AttentionCase
from ejkernel.testing import attention_reference
from ejkernel.testing import conformance as C

if os.environ.get("TRITON_INTERPRET") != "1":  # the kernels must be decorated in interpreter mode
    pytest.skip("run with TRITON_INTERPRET=1 (nox -s triton_interpret)", allow_module_level=True)

from ejkernel_triton._launch import interpreted
from ejkernel_triton.flash_attention import TritonFlashAttention

pytestmark = pytest.mark.interpret

OP = "flash_attention"
GPU = DeviceInfo(platform="gpu", kind="interpreter", compute_capability=(9, 0))
CONFIGS = {
    "16x16-bwd16x32": FlashAttentionConfig(
        fwd_params=FwdParams(16, 16, 4, 1),
        bwd_params=BwdParams(q_blocksize=16, kv_blocksize=32, num_warps=4, num_stages=1),
    ),
    "32x16-bwd32x16": FlashAttentionConfig(
        fwd_params=FwdParams(32, 16, 4, 1),
        bwd_params=BwdParams(q_blocksize=32, kv_blocksize=16, num_warps=4, num_stages=1),
    ),
}
CASES = [c.with_dtype("float16") if c.dtype == "bfloat16" else c for c in FLASH_ATTENTION_CASES]
IMPL = kernel_registry.get(OP, platform="triton")  # as the entry point registered it


def on_gpu(cfg: FlashAttentionConfig):
    """``fn(**kwargs)``: one call of the implementation alone on the pretend GPU, the executor's way."""
    return lambda **kw: run_impl(IMPL, C.bind(OP, **kw), cfg, device=GPU)


@pytest.fixture(autouse=True)
def _interpreted():
    with interpreted():
        yield


def test_the_registered_implementation():
    assert isinstance(IMPL, TritonFlashAttention)
    assert IMPL.available(GPU) is None  # inside interpreted(): jax-triton is not needed


@pytest.mark.parametrize("cfg_id", list(CONFIGS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_conformance(case, cfg_id):
    """Each case matches the reference, or (pairwise masks) raises the declared reason."""
    outcome = C.check_impl(IMPL, case, CONFIGS[cfg_id], device=GPU)
    assert outcome == ("declined" if case.pairwise else "ok")


TMA_CASES = [
    *(
        c.with_dtype("float16")
        for c in FLASH_ATTENTION_CASES
        if c.name in ("basic", "len1", "gqa-d128", "mqa-cross", "causal", "causal-sq<sk", "causal-sq>sk")
    ),
    AttentionCase(name="aligned-gqa", b=2, sq=64, sk=48, h=4, hk=2, d=64, dtype="float16"),
]
TMA_CONFIGS = {
    "16x16x4": FlashAttentionConfig(fwd_params=FwdParams(16, 16, 4, 1), bwd_params=BwdParams(16, 32, 4, 1)),
    "32x16x8": FlashAttentionConfig(fwd_params=FwdParams(32, 16, 8, 1), bwd_params=BwdParams(16, 32, 4, 1)),
}


@pytest.mark.parametrize("cfg_id", list(TMA_CONFIGS))
@pytest.mark.parametrize("case", TMA_CASES, ids=lambda c: c.name)
def test_tma_forward(case, cfg_id):
    """16-bit inputs without bias, segments, soft cap, window, sinks, dropout or varlen take the
    Hopper TMA forward (``_fwd.flash_fwd_tma_kernel``): odd lengths, GQA/MQA, causal with rows that
    see no key, and (``aligned-gqa`` with 4 warps) the warp-specialized kernel."""
    from ejkernel_triton.flash_attention import _spec

    cfg = TMA_CONFIGS[cfg_id]
    args = C.bind(OP, **case.inputs())
    assert _spec.make_spec(args, cfg.fwd_params, cfg.bwd_params).tma
    assert C.check_impl(IMPL, case, cfg, device=GPU) == "ok"


ALIGNED_CASES = [
    # (case, HEAD_MASKED / TAIL_MASKED of the dK/dV kernel, of the dQ kernel) with 16x32 backward tiles
    (AttentionCase(name="aligned", b=2, sq=64, sk=96, h=4, hk=2, d=32), (False, False), (False, False)),
    (
        AttentionCase(name="aligned-causal", b=1, sq=64, sk=96, h=2, hk=1, d=32, causal=True),
        (True, False),
        (False, True),
    ),
    # sq > sk: the first 32 rows see no key
    (
        AttentionCase(name="aligned-causal-empty-rows", b=1, sq=96, sk=64, h=2, hk=2, d=32, causal=True),
        (True, False),
        (False, True),
    ),
    (AttentionCase(name="ragged-keys", b=1, sq=64, sk=80, h=2, hk=2, d=32), (False, True), (False, False)),
    (
        AttentionCase(name="aligned-window", b=1, sq=64, sk=64, h=2, hk=2, d=32, window=(20, 3)),
        (True, True),
        (True, True),
    ),
    (
        AttentionCase(name="aligned-bias", b=1, sq=32, sk=64, h=2, hk=2, d=32, bias=(1, "h", "q", "k")),
        (False, False),
        (False, False),
    ),
]


@pytest.mark.parametrize(("case", "dkdv", "dq"), ALIGNED_CASES, ids=[c.name for c, _, _ in ALIGNED_CASES])
def test_backward_compiles_only_the_loops_some_program_runs(case, dkdv, dq):
    """The backward kernels leave out a masked loop that no program runs (tile-aligned lengths
    without a window or varlen): the flags are as expected and gradients still match the
    reference (float32, so the dQ kernel runs beside dK/dV)."""
    from ejkernel_triton.flash_attention import _call, _spec

    cfg = CONFIGS["16x16-bwd16x32"]
    spec = _spec.make_spec(C.bind(OP, **case.inputs()), cfg.fwd_params, cfg.bwd_params)
    block_m, block_n = cfg.bwd_params.q_blocksize, cfg.bwd_params.kv_blocksize
    flags = lambda f: (f["HEAD_MASKED"], f["TAIL_MASKED"])  # noqa: E731
    assert flags(_call.masked_stages(spec, block_m, block_n, keys_resident=True)) == dkdv
    assert flags(_call.masked_stages(spec, block_n, block_m, keys_resident=False)) == dq
    assert C.check_impl(IMPL, case, cfg, device=GPU) == "ok"


def test_vmap_folds_into_the_batch_and_maps_otherwise():
    fn = on_gpu(CONFIGS["16x16-bwd16x32"])
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.standard_normal((3, 2, 40, 4, 32)), jnp.float32)
    k, v = (jnp.asarray(rng.standard_normal((3, 2, 40, 2, 32)), jnp.float32) for _ in range(2))
    bias = jnp.asarray(rng.standard_normal((1, 4, 40, 40)), jnp.float32)
    aux = jnp.asarray(rng.standard_normal((3, 4)), jnp.float32)

    def ours(q, k, v, b):
        return jnp.sum(fn(query=q, key=k, value=v, bias=b, causal=True) ** 2)

    def ref(q, k, v, b):
        return jnp.sum(attention_reference(q, k, v, b, causal=True) ** 2)

    grads = jax.vmap(jax.grad(ours, argnums=(0, 3)), in_axes=(0, 0, 0, None))(q, k, v, bias)
    expect = jax.vmap(jax.grad(ref, argnums=(0, 3)), in_axes=(0, 0, 0, None))(q, k, v, bias)
    for g, e in zip(grads, expect, strict=True):  # a shared bias gets one gradient per example
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), atol=1e-4, rtol=1e-4)

    # Per-example sinks cannot fold into the batch: the rule maps over the axis instead.
    out = jax.vmap(lambda q, k, v, a: fn(query=q, key=k, value=v, softmax_aux=a))(q, k, v, aux)
    want = jax.vmap(lambda q, k, v, a: attention_reference(q, k, v, softmax_aux=a))(q, k, v, aux)
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_lse_protocol_matches_the_xla_blocks(causal):
    """``forward_lse``/``backward_lse`` (ring attention's per-block calls) agree with the XLA
    implementation's on a GQA block with segment ids and a broadcast bias: float32 output, the
    natural-log ``lse`` (-inf for a row that sees no key), and each block's float32 gradients
    given a *global* output and ``lse`` (here: another block's, so rows are not normalized)."""
    rng = np.random.default_rng(3)
    b, sq, sk, h, hk, d = 2, 40, 24, 4, 2, 32

    def randn(*shape, s=1.0):
        return jnp.asarray(rng.standard_normal(shape) * s, jnp.float32)

    q, k, v = randn(b, sq, h, d), randn(b, sk, hk, d), randn(b, sk, hk, d)
    bias = randn(1, h, 1, sk, s=0.5)
    q_seg = jnp.asarray(np.repeat([[0, 1, 2, 3]], b, 0).repeat(10, 1), jnp.int32)
    kv_seg = jnp.asarray(np.repeat([[1, 2, 3]], b, 0).repeat(8, 1), jnp.int32)  # segment 0 sees no key
    args = AttentionArgs(
        query=q, key=k, value=v, bias=bias, q_segment_ids=q_seg, kv_segment_ids=kv_seg, causal=causal, softmax_scale=0.3
    )
    cfg = CONFIGS["16x16-bwd16x32"]
    xla = kernel_registry.get("flash_attention", platform="xla")
    out, lse = IMPL.forward_lse(args, cfg)
    want_out, want_lse = xla.forward_lse(args, xla.heuristic_cfg(args, GPU))
    assert out.dtype == jnp.float32 and lse.shape == (b, h, sq)
    assert bool(jnp.all(jnp.isneginf(lse[:, :, :10]))) and bool(jnp.all(out[:, :10] == 0))
    np.testing.assert_allclose(np.asarray(out), np.asarray(want_out), atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(np.asarray(lse), np.asarray(want_lse), atol=2e-5, rtol=2e-5)

    glob_out, dout = randn(b, sq, h, d), randn(b, sq, h, d)
    glob_lse = jnp.where(jnp.isneginf(lse), lse, lse + jnp.asarray(rng.uniform(0.1, 1.0, lse.shape), jnp.float32))
    got = IMPL.backward_lse(args, cfg, glob_out, glob_lse, dout)
    want = xla.backward_lse(args, xla.heuristic_cfg(args, GPU), glob_out, glob_lse, dout)
    for name, g, w in zip(("dq", "dk", "dv", "dbias"), got, want, strict=True):
        assert g.shape == w.shape and g.dtype == jnp.float32, (name, g.shape, g.dtype)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-4, rtol=1e-4, err_msg=name)
