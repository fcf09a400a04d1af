"""Host side of the Triton paged attention: the launch (strides of whichever cache layout) and the
combine of the decode splits, shared by the paged ops (``ragged_page_attention_v2``/``v3``, ``page_attention``,
``unified_attention``, ``prefill_page_attention``).

The kernel (``_kernel.paged_attention_kernel``) writes prefill rows straight into the output and
each decode split's partial softmax state into scratch arrays; :func:`combine` merges the splits
(with the sinks) and scatters the decode rows into the output. Rows no program writes (padding
past ``query_start_loc[num_seqs]``) stay zero: the output is zeroed before the launch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ejkernel.ops.families.serving import finish, merge_sinks, merge_splits, unique_drop_index

from .._launch import dot_precision, launch
from ._kernel import paged_attention_kernel
from .heuristics import DECODE_WARPS, Tiles, _pow2

F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class CacheView:
    """Where keys and values live: element strides ``(page, slot, head)`` and a constant element
    offset, for keys and values (the K/V-interleaved cache passes the same array twice: keys at
    even heads, values one head further)."""

    k_strides: tuple[int, int, int]
    k_offset: int
    v_strides: tuple[int, int, int]
    v_offset: int
    page_size: int
    head_dim: int
    value_head_dim: int


def _strides(shape: tuple[int, ...]) -> list[int]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= int(n)
    return out[::-1]


def interleaved_view(kv_pages: Any, head_dim: int | None = None) -> CacheView:
    """``[num_pages, page_size, 2 * hkv, d]``: key head ``h`` is head ``2h``, its value ``2h + 1``.
    ``head_dim``: the lanes attended when fewer than ``d`` (a cache padded past the head dim, as
    ``ragged_page_attention_v3``'s): the kernel loads only those."""
    sp, ss, sh, _ = _strides(kv_pages.shape)
    d = int(kv_pages.shape[3]) if head_dim is None else head_dim
    return CacheView((sp, ss, 2 * sh), 0, (sp, ss, 2 * sh), sh, int(kv_pages.shape[1]), d, d)


def separate_view(key_cache: Any, value_cache: Any, axes: tuple[int, int, int] = (0, 1, 2)) -> CacheView:
    """Separate key and value caches of one layout, ``axes`` naming its (page, slot, head) axes
    (the head dim last): ``(0, 1, 2)`` for ``[blocks, block_size, hkv, d]``, ``(0, 2, 1)`` for
    ``[blocks, hkv, block_size, d]``, ``(1, 2, 0)`` for ``[hkv, blocks, block_size, d]``."""

    def psh(cache: Any) -> tuple[int, int, int]:
        st = _strides(cache.shape)
        return (st[axes[0]], st[axes[1]], st[axes[2]])

    page_size = int(key_cache.shape[axes[1]])
    return CacheView(
        psh(key_cache), 0, psh(value_cache), 0, page_size, int(key_cache.shape[3]), int(value_cache.shape[3])
    )


def paged_attention(
    q: Any,
    k_cache: Any,
    v_cache: Any,
    view: CacheView,
    context_lens: Any,
    block_tables: Any,
    query_start_loc: Any,
    num_seqs: Any,
    sinks: Any,
    *,
    num_kv_heads: int,
    scale: float,
    soft_cap: float | None,
    window_left: int | None,
    tiles: Tiles,
    prefill: bool,
) -> jax.Array:
    """Attention of packed queries ``q [tokens, h, d]`` over a paged cache (see the module
    docstring); ``prefill=False`` when no sequence can have more than ``tiles.decode_q`` queries
    (``page_attention``: no prefill programs are launched). ``sinks``: ``[h, num_sinks]`` or None."""
    t_all, h, d = (int(n) for n in q.shape)
    dv = view.value_head_dim
    m = int(block_tables.shape[0])
    g = h // num_kv_heads
    dv_pad = _pow2(dv)
    block_m_dec = _pow2(tiles.decode_q * g)
    block_q = tiles.block_q
    num_prefill = t_all // block_q + m if prefill else 0
    splits = tiles.num_splits
    lens = context_lens.astype(jnp.int32)
    tables = block_tables.astype(jnp.int32)
    qsl = query_start_loc.astype(jnp.int32)
    n = jnp.asarray(num_seqs, jnp.int32).reshape(1)
    aux = sinks.astype(F32) if sinks is not None else jnp.zeros((1,), F32)
    part_rows = (m, splits, num_kv_heads, block_m_dec)
    out_shape = [
        jax.ShapeDtypeStruct((t_all, h, dv), q.dtype),
        jax.ShapeDtypeStruct(part_rows, F32),
        jax.ShapeDtypeStruct(part_rows, F32),
        jax.ShapeDtypeStruct((*part_rows, dv_pad), F32),
    ]
    constexprs = dict(
        stride_qt=h * d, stride_qh=d,
        stride_kp=view.k_strides[0], stride_ks=view.k_strides[1], stride_kh=view.k_strides[2], K_OFFSET=view.k_offset,
        stride_vp=view.v_strides[0], stride_vs=view.v_strides[1], stride_vh=view.v_strides[2], V_OFFSET=view.v_offset,
        stride_bt=int(tables.shape[1]), stride_ot=h * dv, stride_oh=dv,
        NUM_KV_HEADS=num_kv_heads, GROUPS=g, PAGE_SIZE=view.page_size,
        HEAD_DIM=d, HEAD_DIM_PAD=_pow2(d), HEAD_DIM_V=dv, HEAD_DIM_V_PAD=dv_pad,
        NUM_SPLITS=splits, DECODE_Q=tiles.decode_q, BLOCK_M_DEC=block_m_dec,
        BLOCK_Q=block_q, BLOCK_M=_pow2(block_q * g), BLOCK_N=tiles.block_n,
        HAS_WINDOW=window_left is not None, HAS_SOFTCAP=soft_cap is not None,
        NUM_SINKS=0 if sinks is None else int(sinks.shape[1]),
        # float32 inputs: three TF32 products per dot keep float32 accuracy on the tensor cores.
        DOT_PRECISION=dot_precision(q.dtype),
    )  # fmt: skip
    args = (q, k_cache, v_cache, tables, lens, qsl, n, aux, np.float32(scale), np.float32(soft_cap or 1.0),
            int(window_left or 0))  # fmt: skip

    def run(outs: list[jax.ShapeDtypeStruct], programs: int, warps: int, kind: bool, zeroed: tuple[int, ...]) -> Any:
        return launch(
            paged_attention_kernel, *args, out_shape=outs, grid=(programs * num_kv_heads,), num_warps=warps,
            num_stages=tiles.num_stages, zeroed_outputs=zeroed, name="ejkernel_paged_attention",
            PREFILL=kind, **constexprs,
        )  # fmt: skip

    if num_prefill:
        # Two launches, each kind of program compiled alone (the kernel's docstring says why): the
        # prefill tiles write the output (the partials, never touched, as one element each), then
        # the decode splits, at their own warp count, their partials (with a one-element output).
        one = jax.ShapeDtypeStruct((1,) * 4, F32)
        out = run([out_shape[0], one, one, one], num_prefill, tiles.num_warps, True, (0,))[0]
        tiny = jax.ShapeDtypeStruct((1, 1, 1), q.dtype)
        _, pm, pl, pacc = run([tiny, *out_shape[1:]], m * splits, DECODE_WARPS, False, ())
    else:  # decode splits alone (page_attention)
        out, pm, pl, pacc = run(out_shape, m * splits, tiles.num_warps, False, (0,))
    return combine(out, pm, pl, pacc, qsl, n[0], sinks, decode_q=tiles.decode_q, groups=g)


def combine(
    out: jax.Array,
    pm: jax.Array,
    pl: jax.Array,
    pacc: jax.Array,
    qsl: jax.Array,
    num_seqs: jax.Array,
    sinks: Any,
    *,
    decode_q: int,
    groups: int,
) -> jax.Array:
    """Merge each decode sequence's splits (partials ``[seqs, splits, hkv, rows(, dv_pad)]``, row
    ``r`` = query ``r // groups`` of head ``r % groups``), add the sinks, normalize and write the
    rows into ``out``; other sequences' partials (never written) are dropped unread."""
    t_all, h, dv = out.shape
    m, _, hk, _ = pm.shape
    rows = decode_q * groups
    shape = (m, -1, hk, decode_q, groups)
    # [seqs, decode_q, hkv, groups, splits(, dv)]: the split axis after the rows, reduced like a row.
    pm = pm[..., :rows].reshape(shape).transpose(0, 3, 2, 4, 1)
    pl = pl[..., :rows].reshape(shape).transpose(0, 3, 2, 4, 1)
    pacc = pacc[..., :rows, :dv].reshape(*shape, dv).transpose(0, 3, 2, 4, 1, 5)
    state = merge_splits(pm, pl, pacc)
    if sinks is not None:
        state = merge_sinks(state, sinks.reshape(1, 1, hk, groups, -1))
    vals = finish(state).reshape(m * decode_q, h, dv).astype(out.dtype)
    q_lens = qsl[1:] - qsl[:-1]
    j = jnp.arange(decode_q, dtype=jnp.int32)
    decode = (jnp.arange(m) < num_seqs) & (q_lens > 0) & (q_lens <= decode_q)
    keep = decode[:, None] & (j[None, :] < q_lens[:, None])
    target = unique_drop_index((qsl[:-1, None] + j[None, :]).reshape(-1), keep.reshape(-1), t_all)
    return out.at[target].set(vals, mode="drop", unique_indices=True)
