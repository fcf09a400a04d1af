"""The inner-kernel log-sum-exp protocol (``AttentionImpl.supports_lse``) that ring attention uses.

For every ``flash_attention`` implementation that provides it and runs here (XLA everywhere,
Triton on NVIDIA GPUs once it does): the partial results of two key blocks from
``forward_lse`` merge by log-sum-exp into attention over all keys, ``lse`` is the log of each
row's softmax denominator, and ``backward_lse`` with the *global* output and ``lse`` gives
each block's share of the gradients. With a ``position_offset`` the blocks are causal and
windowed at their offsets (the ring's sliding-window steps); an implementation that cannot
honour the offset must decline it. Tolerances follow the conformance suite's rule.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.ops import Backend, device_for_arrays, kernel_registry
from ejkernel.ops.families.attention import AttentionArgs
from ejkernel.testing import attention_reference
from ejkernel.testing import conformance as C
from ejkernel.testing.references import HIGHEST

pytestmark = pytest.mark.distributed

B, SQ, SK, H, HK, D = 2, 24, 32, 4, 2, 16
SCALE = 0.25
WINDOW = (20, 0)


def lse_impl_names() -> list[str]:
    """The implementations with the protocol that target this machine's default device."""
    device = device_for_arrays([jnp.zeros(())])
    impls = kernel_registry.implementations("flash_attention")
    return [i.name for i in impls if i.supports_lse and i.backend in (Backend.ANY, device.platform)]


def test_the_xla_implementation_provides_the_protocol():
    assert "xla" in lse_impl_names()
    assert not kernel_registry.get("scaled_dot_product_attention", platform="xla").supports_lse
    names = [i.name for i in kernel_registry.implementations("flash_attention")]
    if "triton" in names:  # ring attention's inner kernel on NVIDIA GPUs (checked there)
        assert kernel_registry.get("flash_attention", platform="triton").supports_lse


def reference_lse(q, k, with_offset, precision):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, jnp.repeat(k, H // HK, axis=2), precision=precision) * SCALE
    if with_offset:
        i, j = jnp.arange(SQ)[:, None] + (SK - SQ), jnp.arange(SK)[None, :]
        s = jnp.where((j <= i) & (j >= i - WINDOW[0]), s, -jnp.inf)
    return jax.nn.logsumexp(s, axis=-1)


@pytest.mark.parametrize("with_offset", [False, True], ids=["plain", "offset"])
@pytest.mark.parametrize("impl_name", lse_impl_names())
def test_blocks_merge_into_the_whole(impl_name, with_offset):
    impl = kernel_registry.get("flash_attention", platform=impl_name)
    rng = np.random.default_rng(0)

    def randn(*shape):
        return jnp.asarray(rng.standard_normal(shape), jnp.float32)

    q, k, v, dout = randn(B, SQ, H, D), randn(B, SK, HK, D), randn(B, SK, HK, D), randn(B, SQ, H, D)
    opts = {"causal": with_offset, "sliding_window": WINDOW if with_offset else None}
    half = SK // 2

    def block(lo, hi):  # query i sits at key position SK - SQ + i (bottom-right alignment)
        pos = jnp.asarray(SK - SQ - lo, jnp.int32) if with_offset else None
        return AttentionArgs(
            query=q, key=k[:, lo:hi], value=v[:, lo:hi], softmax_scale=SCALE, position_offset=pos, **opts
        )

    blocks = [block(0, half), block(half, SK)]  # with the offset, some rows see no key of block 1
    device = device_for_arrays([q])
    reason = kernel_registry.check(impl, blocks[0], device)
    if reason is not None:
        assert with_offset, f"{impl_name} declines a plain block: {reason}"
        return
    cfg = impl.heuristic_cfg(blocks[0], device)
    parts = [impl.forward_lse(a, cfg) for a in blocks]
    lse = jnp.logaddexp(parts[0][1], parts[1][1])  # [b, h, sq]
    out = sum(o.astype(jnp.float32) * jnp.exp(part - lse).transpose(0, 2, 1)[..., None] for o, part in parts)

    def ref_fn(precision):
        return lambda q, k, v: attention_reference(q, k, v, softmax_scale=SCALE, precision=precision, **opts)

    ref, vjp = jax.vjp(ref_fn(HIGHEST), q, k, v)
    low, vjp_low = jax.vjp(ref_fn(C.LOW_PRECISION), q, k, v)
    C.assert_close("merged output", out, ref, low, "float32", C.ATOL)
    C.assert_close(
        "lse",
        lse,
        reference_lse(q, k, with_offset, HIGHEST),
        reference_lse(q, k, with_offset, C.LOW_PRECISION),
        "float32",
        C.ATOL,
    )
    grads = [impl.backward_lse(a, cfg, ref.astype(q.dtype), lse, dout) for a in blocks]
    assert grads[0][3] is None and grads[1][3] is None, "no bias: dbias is None"
    dq = grads[0][0].astype(jnp.float32) + grads[1][0].astype(jnp.float32)
    dk = jnp.concatenate([grads[0][1], grads[1][1]], axis=1)
    dv = jnp.concatenate([grads[0][2], grads[1][2]], axis=1)
    for name, g, r, lo in zip(("dq", "dk", "dv"), (dq, dk, dv), vjp(dout), vjp_low(dout), strict=True):
        C.assert_close(name, g, r, lo, "float32", C.GRAD_ATOL)


@pytest.mark.parametrize("impl_name", lse_impl_names())
def test_bias_gradient_of_a_block(impl_name):
    """``dbias`` of a broadcast bias ``[1, h, 1, sk]``: summed over its broadcast dims."""
    impl = kernel_registry.get("flash_attention", platform=impl_name)
    rng = np.random.default_rng(1)
    q = jnp.asarray(rng.standard_normal((B, SQ, H, D)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((B, SK, HK, D)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((B, SK, HK, D)), jnp.float32)
    bias = jnp.asarray(rng.standard_normal((1, H, 1, SK)) * 0.5, jnp.float32)
    dout = jnp.asarray(rng.standard_normal((B, SQ, H, D)), jnp.float32)
    args = AttentionArgs(query=q, key=k, value=v, bias=bias, softmax_scale=SCALE)
    device = device_for_arrays([q])
    reason = kernel_registry.check(impl, args, device)
    if reason is not None:
        pytest.fail(f"{impl_name} declines a bias [1, h, 1, sk]: {reason}")
    cfg = impl.heuristic_cfg(args, device)
    out, lse = impl.forward_lse(args, cfg)

    def ref_fn(precision):
        return lambda q, k, v, b: attention_reference(q, k, v, b, softmax_scale=SCALE, precision=precision)

    ref, vjp = jax.vjp(ref_fn(HIGHEST), q, k, v, bias)
    low, vjp_low = jax.vjp(ref_fn(C.LOW_PRECISION), q, k, v, bias)
    C.assert_close("output", out.astype(jnp.float32), ref, low, "float32", C.ATOL)
    dq, dk, dv, dbias = impl.backward_lse(args, cfg, out, lse, dout)
    assert dbias is not None and dbias.shape == bias.shape, None if dbias is None else dbias.shape
    for name, g, r, lo in zip(("dq", "dk", "dv", "dbias"), (dq, dk, dv, dbias), vjp(dout), vjp_low(dout), strict=True):
        C.assert_close(name, g, r, lo, "float32", C.GRAD_ATOL)
