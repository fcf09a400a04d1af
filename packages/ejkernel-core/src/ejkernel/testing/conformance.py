"""Conformance cases and checks, shared by every backend (third-party ones included).

A backend proves an implementation with the same cases the project uses::

    from ejkernel.testing import conformance as C

    @pytest.mark.parametrize("case", C.FLASH_ATTENTION_CASES, ids=lambda c: c.name)
    def test_mine(case):
        C.check_attention(lambda **kw: ejkernel.flash_attention(**kw, platform="mine"), case)

Inputs are random (never all zeros or ones), sizes are odd on purpose, and every check compares
against the float32 references of :mod:`ejkernel.testing.references`.

Tolerances follow FlashAttention's rule: a kernel's error against the float32 reference (HIGHEST
matmul precision) may be at most ``ERROR_RATIO`` times the error of the same reference computed in
low precision (the inputs' dtype at the default matmul precision, which for float32 on recent
GPUs is TF32), plus a small floor (``ATOL`` / ``GRAD_ATOL``, scaled by the reference's magnitude).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..ops.executor import CallOptions
from ..ops.kernel import get_op
from ..types.mask_info import MaskInfo
from .references import attention_reference, page_attention_reference

__all__ = [
    "ATOL",
    "ERROR_RATIO",
    "FLASH_ATTENTION_CASES",
    "GRAD_ATOL",
    "PAGE_ATTENTION_CASES",
    "AttentionCase",
    "PageAttentionCase",
    "assert_close",
    "bind",
    "check_attention",
    "check_page_attention",
    "make_attention_inputs",
    "make_page_inputs",
]

ERROR_RATIO = 2.0
LOW_PRECISION = jax.lax.Precision.DEFAULT
# Error floors, relative to max(1, max |reference|): float32 kernels differ from the reference
# only by summation order; low-precision floors cover the final rounding of the output.
ATOL = {"float32": 2e-5, "bfloat16": 4e-3, "float16": 1e-3}
GRAD_ATOL = {"float32": 1e-4, "bfloat16": 2e-2, "float16": 4e-3}


@dataclasses.dataclass(frozen=True)
class AttentionCase:
    """One dense-attention conformance case (see ``FLASH_ATTENTION_CASES``).

    ``segments``: ``"packed"`` (random contiguous segments with trailing padding),
    ``"padding"`` (a 2-D padding mask), ``"orphans"`` (some query rows whose segment no key has:
    fully masked rows). ``pairwise``: a random 4-D mask with some all-False rows. ``varlen``:
    per-sequence ``(q_len, k_len)`` packed in one row, plus ``varlen_pad`` padding tokens.
    ``bias``: the bias shape, with ``"b", "h", "q", "k"`` for full dims and ``1`` for broadcast.
    """

    name: str
    b: int = 1
    sq: int = 16
    sk: int = 16
    h: int = 2
    hk: int = 2
    d: int = 64
    dv: int | None = None
    dtype: str = "float32"
    causal: bool = False
    window: int | tuple[int, int] | None = None
    soft_cap: float | None = None
    bias: tuple[Any, ...] | None = None
    segments: str | None = None
    pairwise: bool = False
    varlen: tuple[tuple[int, int], ...] | None = None
    varlen_pad: int = 0
    sinks: int = 0
    dropout: float = 0.0
    scale: float | None = None

    def with_dtype(self, dtype: str) -> AttentionCase:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)


_BASE_CASES = (
    AttentionCase("basic", b=2, sq=17, sk=17, h=4, hk=4),
    AttentionCase("len1", b=1, sq=1, sk=1, h=2, hk=2),
    AttentionCase("odd200-d80", b=1, sq=200, sk=200, h=2, hk=2, d=80),
    AttentionCase("gqa-d128", b=2, sq=64, sk=64, h=8, hk=2, d=128),
    AttentionCase("mqa-cross", b=1, sq=33, sk=50, h=4, hk=1),
    AttentionCase("dv-differs", b=1, sq=40, sk=24, h=2, hk=1, d=64, dv=32),
    AttentionCase("causal", b=2, sq=70, sk=70, h=4, hk=2, causal=True),
    AttentionCase("causal-sq<sk", b=1, sq=17, sk=200, h=2, hk=2, causal=True),
    AttentionCase("causal-sq>sk", b=1, sq=200, sk=17, h=2, hk=1, causal=True),
    AttentionCase("window-sym", b=1, sq=128, sk=128, h=2, hk=2, window=16),
    AttentionCase("window-asym", b=1, sq=100, sk=120, h=2, hk=2, window=(32, 5)),
    AttentionCase("window-causal", b=1, sq=96, sk=96, h=4, hk=2, window=(20, 0), causal=True),
    AttentionCase("softcap", b=1, sq=48, sk=48, h=2, hk=2, soft_cap=5.0, scale=0.5),
    AttentionCase("bias-full", b=2, sq=33, sk=41, h=2, hk=2, bias=("b", "h", "q", "k")),
    AttentionCase("bias-heads1", b=2, sq=33, sk=41, h=4, hk=2, bias=("b", 1, "q", "k")),
    AttentionCase("bias-2d", b=2, sq=30, sk=30, h=2, hk=2, bias=("q", "k"), causal=True),
    AttentionCase("bias-keys", b=1, sq=25, sk=60, h=4, hk=4, bias=(1, "h", 1, "k")),
    AttentionCase("segments-packed", b=2, sq=90, sk=90, h=2, hk=1, segments="packed", causal=True),
    AttentionCase("segments-cross", b=2, sq=40, sk=70, h=2, hk=2, segments="packed"),
    AttentionCase("padding-mask", b=3, sq=37, sk=37, h=2, hk=2, segments="padding"),
    AttentionCase("pairwise", b=2, sq=29, sk=45, h=2, hk=2, pairwise=True),
    AttentionCase("orphan-rows", b=1, sq=50, sk=50, h=2, hk=2, segments="orphans"),
    AttentionCase(
        "varlen", sq=48, sk=48, h=2, hk=2, varlen=((5, 5), (12, 12), (23, 23), (1, 1)), varlen_pad=7, causal=True
    ),
    AttentionCase(
        "varlen-cross",
        sq=20,
        sk=47,
        h=4,
        hk=2,
        varlen=((3, 12), (7, 8), (8, 25)),
        varlen_pad=2,
        causal=True,
        window=(6, 2),
    ),
    AttentionCase("sinks", b=1, sq=33, sk=33, h=4, hk=2, sinks=1),
    AttentionCase("sinks2-orphans", b=1, sq=40, sk=40, h=2, hk=2, sinks=2, segments="orphans", causal=True),
    AttentionCase("dropout", b=2, sq=50, sk=60, h=2, hk=1, dropout=0.2),
    AttentionCase(
        "everything",
        b=2,
        sq=75,
        sk=75,
        h=4,
        hk=2,
        causal=True,
        window=(30, 0),
        soft_cap=8.0,
        bias=("b", 1, "q", "k"),
        segments="packed",
        sinks=1,
        dropout=0.1,
    ),
)
_LOW_PRECISION_CASES = ("basic", "gqa-d128", "causal", "softcap", "bias-full", "varlen", "sinks", "everything")

FLASH_ATTENTION_CASES: tuple[AttentionCase, ...] = _BASE_CASES + tuple(
    c.with_dtype("bfloat16") for c in _BASE_CASES if c.name in _LOW_PRECISION_CASES
)


def bind(op_name: str, **kwargs: Any) -> Any:
    """The canonical arguments record that op ``op_name`` makes of ``kwargs`` (e.g. to ask an
    implementation whether it would decline them)."""
    op = get_op(op_name)
    params = op.signature().bind(**kwargs)
    params.apply_defaults()
    p = dict(params.arguments)
    CallOptions.pop_from(p)
    return op.bind(p)


def _segments(rng: np.random.Generator, b: int, n: int, labels: int, pad: int) -> np.ndarray:
    """Contiguous non-decreasing segments 0..labels-1 over ``n - pad`` tokens, then ``-1``."""
    out = np.full((b, n), -1, np.int32)
    for r in range(b):
        valid = max(n - pad, 1)
        cuts = (
            np.sort(rng.choice(np.arange(1, valid), size=min(labels - 1, valid - 1), replace=False))
            if valid > 1
            else []
        )
        seg = np.zeros(valid, np.int32)
        for c in cuts:
            seg[c:] += 1
        out[r, :valid] = seg
    return out


def make_attention_inputs(case: AttentionCase, seed: int = 0) -> dict[str, Any]:
    """The keyword arguments of a call for ``case`` (``query``, ``key``, ``value`` and options)."""
    rng = np.random.default_rng(seed)
    dtype = jnp.dtype(case.dtype)
    dv = case.dv or case.d
    b = 1 if case.varlen else case.b

    def normal(*shape: int, std: float = 1.0) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape) * std, dtype)

    kw: dict[str, Any] = {
        "query": normal(b, case.sq, case.h, case.d),
        "key": normal(b, case.sk, case.hk, case.d),
        "value": normal(b, case.sk, case.hk, dv),
        "causal": case.causal,
        "sliding_window": case.window,
        "logits_soft_cap": case.soft_cap,
        "softmax_scale": case.scale,
    }
    if case.bias is not None:
        sizes = {"b": b, "h": case.h, "q": case.sq, "k": case.sk}
        kw["bias"] = normal(*(sizes.get(x, x) for x in case.bias), std=0.5)
    if case.segments == "packed":
        q_seg = _segments(rng, b, case.sq, 3, pad=case.sq // 8)
        kv_seg = q_seg if case.sq == case.sk else _segments(rng, b, case.sk, 3, pad=case.sk // 8)
        kw["mask_info"] = MaskInfo.from_segments(q_seg, kv_seg)
    elif case.segments == "padding":
        lens = rng.integers(1, case.sq + 1, size=b)
        lens[0] = case.sq
        kw["mask_info"] = MaskInfo.from_attention_mask(np.arange(case.sq)[None, :] < lens[:, None])
    elif case.segments == "orphans":
        q_seg = _segments(rng, b, case.sq, 2, pad=0)
        kv_seg = q_seg.copy()
        q_seg[:, case.sq // 3 : case.sq // 3 + 4] = 7  # no key has segment 7: fully masked rows
        kw["mask_info"] = MaskInfo.from_segments(q_seg, kv_seg)
    if case.pairwise:
        mask = rng.random((b, case.h, case.sq, case.sk)) < 0.7
        mask[:, :, case.sq // 2] = False  # a fully masked row
        kw["mask_info"] = MaskInfo.from_attention_mask(mask)
    if case.varlen:
        q_lens = [ql for ql, _ in case.varlen]
        k_lens = [kl for _, kl in case.varlen]
        assert sum(q_lens) + case.varlen_pad == case.sq and sum(k_lens) + case.varlen_pad <= case.sk
        kw["cum_seqlens_q"] = jnp.asarray(np.cumsum([0, *q_lens]), jnp.int32)
        if q_lens != k_lens or case.sq != case.sk:
            kw["cum_seqlens_k"] = jnp.asarray(np.cumsum([0, *k_lens]), jnp.int32)
    if case.sinks:
        kw["softmax_aux"] = normal(case.h, case.sinks) if case.sinks > 1 else normal(case.h)
    if case.dropout:
        kw["dropout_prob"] = case.dropout
        kw["dropout_seed"] = 1234 + seed
    return kw


def _err(x: Any, ref: Any) -> float:
    return float(jnp.max(jnp.abs(x.astype(jnp.float32) - ref.astype(jnp.float32)))) if ref.size else 0.0


def assert_close(name: str, x: Any, ref32: Any, ref_low: Any, dtype: str, atol: dict[str, float]) -> None:
    """FlashAttention's rule: ``err(x) <= ERROR_RATIO · err(ref_low) + floor``, no NaN."""
    x = jnp.asarray(x)
    if x.shape != ref32.shape:
        raise AssertionError(f"{name}: shape {x.shape} != reference {ref32.shape}")
    if not bool(jnp.all(jnp.isfinite(x.astype(jnp.float32)))):
        raise AssertionError(f"{name}: non-finite values")
    scale = max(1.0, float(jnp.max(jnp.abs(ref32)))) if ref32.size else 1.0
    err, err_low = _err(x, ref32), _err(ref_low, ref32)
    bound = ERROR_RATIO * err_low + atol[dtype] * scale
    if err > bound:
        raise AssertionError(
            f"{name}: max error {err:.3g} > {bound:.3g} (= {ERROR_RATIO} x reference-in-{dtype} error {err_low:.3g} "
            f"+ {atol[dtype]} x {scale:.3g})"
        )


_DIFF_ARGS = ("query", "key", "value", "bias", "softmax_aux")


def check_attention(fn: Callable[..., Any], case: AttentionCase, *, seed: int = 0, grads: bool = True) -> None:
    """Check ``fn(**inputs)`` (e.g. a lambda around ``ejkernel.flash_attention``) on ``case``:
    output and gradients of query, key, value, bias and sinks against the references; fully masked
    rows exactly zero; nothing non-finite. Everything runs under ``jax.jit``."""
    kw = make_attention_inputs(case, seed)
    low = jnp.dtype(case.dtype) if case.dtype != "float32" else jnp.float32
    names = [n for n in _DIFF_ARGS if kw.get(n) is not None]
    diff = {n: kw[n] for n in names}

    def call(f: Callable[..., Any], **extra: Any) -> Callable[[dict[str, Any]], Any]:
        return lambda d: f(**{**kw, **d}, **extra)

    out = jax.jit(call(fn))(diff)
    ref32 = jax.jit(call(attention_reference))(diff)
    ref_low = jax.jit(call(attention_reference, dtype=low, precision=LOW_PRECISION))(diff).astype(kw["query"].dtype)
    assert_close(f"{case.name}: output", out, ref32, ref_low, case.dtype, ATOL)
    zero_rows = jnp.all(ref32 == 0, axis=-1)
    if bool(zero_rows.any()) and not bool(jnp.all(jnp.where(zero_rows[..., None], out, 0) == 0)):
        raise AssertionError(f"{case.name}: rows that attend nothing are not exactly zero")
    if not grads:
        return

    cot = jnp.asarray(np.random.default_rng(seed + 1).standard_normal(out.shape), jnp.float32)

    def grads_of(f: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
        return jax.jit(jax.grad(lambda d: jnp.sum(f(d).astype(jnp.float32) * cot)))(diff)

    g = grads_of(call(fn))
    g32 = grads_of(call(attention_reference))
    g_low = grads_of(call(attention_reference, dtype=low, precision=LOW_PRECISION))
    for n in names:
        assert_close(f"{case.name}: d{n}", g[n], g32[n], g_low[n].astype(kw[n].dtype), case.dtype, GRAD_ATOL)


# -- page attention ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PageAttentionCase:
    """One paged-decode case: ragged ``context_lens`` over a shuffled page pool whose unused
    pages and slots are NaN (a kernel that reads them fails)."""

    name: str
    context_lens: tuple[int, ...]
    h: int = 4
    hk: int = 4
    d: int = 64
    dv: int | None = None
    block_size: int = 16
    extra_blocks: int = 5
    dtype: str = "float32"
    soft_cap: float | None = None
    window: int | tuple[int, int] | None = None
    sinks: int = 0
    query_4d: bool = False

    def with_dtype(self, dtype: str) -> PageAttentionCase:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)


_PAGE_BASE = (
    PageAttentionCase("ragged", context_lens=(1, 7, 16, 17, 53, 0)),
    PageAttentionCase("gqa4", context_lens=(33, 64, 5), h=8, hk=2, block_size=8),
    PageAttentionCase("gqa8-d128", context_lens=(100, 1, 129), h=8, hk=1, d=128, block_size=32),
    PageAttentionCase("softcap-4d", context_lens=(20, 45), soft_cap=4.0, query_4d=True),
    PageAttentionCase("window", context_lens=(70, 9, 40), window=12, block_size=8),
    PageAttentionCase("sinks", context_lens=(31, 0, 64), sinks=2, h=4, hk=2),
    PageAttentionCase("dv-differs", context_lens=(19, 40), d=64, dv=32, block_size=4),
)
PAGE_ATTENTION_CASES: tuple[PageAttentionCase, ...] = _PAGE_BASE + tuple(
    c.with_dtype("bfloat16") for c in _PAGE_BASE if c.name in ("ragged", "gqa4", "sinks")
)


def make_page_inputs(case: PageAttentionCase, seed: int = 0) -> dict[str, Any]:
    """Keyword arguments of a ``page_attention`` call for ``case`` (NaN in every unused slot)."""
    rng = np.random.default_rng(seed)
    dtype = jnp.dtype(case.dtype)
    dv = case.dv or case.d
    bs = case.block_size
    lens = np.asarray(case.context_lens, np.int32)
    b = len(lens)
    max_blocks = max(1, int(-(-lens.max() // bs)))
    num_blocks = b * max_blocks + case.extra_blocks
    tables = rng.permutation(num_blocks)[: b * max_blocks].reshape(b, max_blocks).astype(np.int32)
    kc = rng.standard_normal((num_blocks, bs, case.hk, case.d)).astype(np.float32)
    vc = rng.standard_normal((num_blocks, bs, case.hk, dv)).astype(np.float32)
    used = np.zeros((num_blocks, bs), bool)
    for r in range(b):
        for t in range(int(lens[r])):
            used[tables[r, t // bs], t % bs] = True
    kc[~used] = np.nan
    vc[~used] = np.nan
    q_shape = (b, 1, case.h, case.d) if case.query_4d else (b, case.h, case.d)
    kw: dict[str, Any] = {
        "query": jnp.asarray(rng.standard_normal(q_shape), dtype),
        "key_cache": jnp.asarray(kc, dtype),
        "value_cache": jnp.asarray(vc, dtype),
        "context_lens": jnp.asarray(lens),
        "block_tables": jnp.asarray(tables),
        "logits_soft_cap": case.soft_cap,
        "sliding_window": case.window,
    }
    if case.sinks:
        kw["softmax_aux"] = jnp.asarray(rng.standard_normal((case.h, case.sinks)), dtype)
    return kw


def check_page_attention(fn: Callable[..., Any], case: PageAttentionCase, *, seed: int = 0) -> None:
    """Check ``fn(**inputs)`` against :func:`page_attention_reference` on ``case``."""
    kw = make_page_inputs(case, seed)
    out = fn(**kw)
    ref32 = page_attention_reference(**kw)
    low = jnp.dtype(case.dtype) if case.dtype != "float32" else jnp.float32
    ref_low = page_attention_reference(**kw, dtype=low, precision=LOW_PRECISION).astype(kw["query"].dtype)
    assert_close(f"{case.name}: output", out, ref32, ref_low, case.dtype, ATOL)
    empty = np.asarray(case.context_lens) == 0
    if empty.any() and not bool(jnp.all(jnp.asarray(out)[empty] == 0)):
        raise AssertionError(f"{case.name}: sequences with no context must return zeros")
