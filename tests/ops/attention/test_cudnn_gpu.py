"""The cuDNN implementations on an NVIDIA GPU: forward and gradients against the float32 reference
(jit and eager), the default dispatch choosing cuDNN where it accepts a call, the same result as
calling ``jax.nn.dot_product_attention`` directly, and cuDNN's own checks agreeing with the
declined head dims. ``test_cudnn.py`` covers the declines and the call's arguments on any machine;
the conformance suite runs the shared cases on cuDNN too."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.errors import UnsupportedError
from ejkernel.ops import record_dispatches
from ejkernel.ops.flash_attention.cases import AttentionCase
from ejkernel.testing import conformance as C

pytestmark = pytest.mark.gpu

OPS = ("flash_attention", "scaled_dot_product_attention")

CASES = [
    AttentionCase("plain", b=2, sq=256, sk=256, h=4, hk=4, d=128, dtype="bfloat16"),
    AttentionCase("causal-gqa", b=2, sq=200, sk=200, h=8, hk=2, d=128, causal=True, dtype="bfloat16"),
    AttentionCase("cross-mqa", b=1, sq=72, sk=136, h=4, hk=1, d=64, dtype="bfloat16"),
    AttentionCase("window-causal", b=1, sq=192, sk=192, h=4, hk=2, d=64, window=(40, 0), causal=True, dtype="float16"),
    AttentionCase("window-left", b=1, sq=160, sk=160, h=2, hk=2, d=64, window=(17, 0), dtype="bfloat16"),
    AttentionCase("d256-causal", b=1, sq=128, sk=128, h=2, hk=2, d=256, causal=True, dtype="bfloat16"),
    AttentionCase("d80-scale", b=2, sq=96, sk=96, h=2, hk=2, d=80, scale=0.2, dtype="float16"),
]

# The lengths cuDNN failed at on an H200 (see the seq_q/seq_k rule of the cuDNN declaration).
ODD = [
    AttentionCase("cross-odd", b=1, sq=77, sk=130, h=4, hk=1, d=64, dtype="bfloat16"),
    AttentionCase("odd17", b=2, sq=17, sk=17, h=4, hk=4, d=64, dtype="bfloat16"),
]


def _fn(op):
    function = getattr(ejkernel, op)

    def fn(**kw):
        return function(**kw, platform="cudnn")

    return fn


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_against_the_reference(op, case):
    C.check(_fn(op), case, op=op, modes=("jit", "eager"))


def _qkv(b=2, s=256, h=8, hk=2, d=128, dtype=jnp.bfloat16):
    rng = np.random.default_rng(0)
    shapes = ((b, s, h, d), (b, s, hk, d), (b, s, hk, d))
    return tuple(jnp.asarray(rng.standard_normal(shape), dtype) for shape in shapes)


@pytest.mark.parametrize("op", OPS)
def test_default_dispatch_is_cudnn_where_it_accepts(op):
    q, k, v = _qkv()
    function = getattr(ejkernel, op)
    with record_dispatches() as log:
        jax.jit(lambda q, k, v: function(q, k, v, causal=True))(q, k, v)
        function(q, k, v, logits_soft_cap=20.0)  # cuDNN declines: Triton or XLA serves it
        function(q.astype(jnp.float32), k.astype(jnp.float32), v.astype(jnp.float32))
    impls = [d.impl for d in log]
    assert impls[0] == "cudnn"
    assert impls[1] != "cudnn" and impls[2] != "cudnn"
    if op == "flash_attention":
        assert impls[1:] == ["triton", "triton"]
        with record_dispatches() as log:
            ejkernel.flash_attention(q, k, v, causal=True, platform="triton")
        assert log[0].impl == "triton"


@pytest.mark.parametrize("causal", [False, True])
def test_same_result_as_jax_nn_directly(causal):
    """``scaled_dot_product_attention`` on cuDNN is the call ``jax.nn.dot_product_attention``
    makes: bit for bit, forward and gradients."""
    q, k, v = _qkv()

    def ours(q, k, v):
        return ejkernel.scaled_dot_product_attention(q, k, v, causal=causal)

    def theirs(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation="cudnn")

    def loss(f):
        return jax.jit(jax.value_and_grad(lambda q, k, v: jnp.sum(f(q, k, v).astype(jnp.float32) ** 2), (0, 1, 2)))

    assert bool(jnp.array_equal(jax.jit(ours)(q, k, v), jax.jit(theirs)(q, k, v)))
    for a, b in zip(jax.tree.leaves(loss(ours)(q, k, v)), jax.tree.leaves(loss(theirs)(q, k, v)), strict=True):
        assert bool(jnp.array_equal(a, b))


@pytest.mark.parametrize("case", ODD, ids=lambda c: c.name)
def test_odd_lengths_are_served_elsewhere(case):
    """Lengths off a multiple of 8 are declined (cuDNN failed the reference there): the default
    dispatch serves them with another implementation, against the same reference."""
    for op in OPS:
        with record_dispatches() as log:
            C.check(getattr(ejkernel, op), case, op=op, modes=("jit",))
        assert log and all(d.impl != "cudnn" for d in log)


@pytest.mark.parametrize("d", [60, 264])
def test_declined_head_dims_are_what_cudnn_rejects(d):
    q, k, v = _qkv(b=1, s=64, h=2, hk=2, d=d)
    with pytest.raises(UnsupportedError, match=f"head_dim a multiple of 8 up to 256, got {d}"):
        ejkernel.flash_attention(q, k, v, platform="cudnn")
    with pytest.raises(NotImplementedError, match="head dim must be"):
        jax.nn.dot_product_attention(q, k, v, implementation="cudnn")
    # The default dispatch serves them elsewhere.
    with record_dispatches() as log:
        ejkernel.flash_attention(q, k, v)
    assert log[0].impl != "cudnn"
