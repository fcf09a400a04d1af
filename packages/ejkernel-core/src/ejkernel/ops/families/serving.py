"""Pieces the serving-attention ops (ragged decode, ragged paged attention, prefill over pages,
unified attention) share, in every backend's blocked XLA form, in their references and in their
bindings:

- :func:`num_seqs_scalar`, :func:`ragged_index_rules`, :func:`ragged_autotune_indices`: the
  bindings of packed query rows (``query_start_loc``, per-sequence lengths, block tables, a maybe
  traced ``num_seqs``): canonical ``num_seqs``, the index checks, stand-in indices for autotuning;
- :func:`packed_batch_case`: the index arrays of a conformance case's batch on a shuffled pool;
- :func:`ragged_query_rows`: each packed query row's sequence, position and key range;
- :func:`paged_scan`: the blocked online-softmax attention of packed rows over their sequences'
  pages, for any cache layout (the caller reads a block of pages); :func:`ragged_paged_scan`:
  the same with the packed query tokens grouped into blocks of one sequence's consecutive tokens
  (one gather and one matmul per block instead of per token), :func:`query_block_size` its size and :func:`query_slots` its rows;
  :func:`scan_pages` (:func:`ragged_scan_pages`): the pages per step, from the platform's
  :func:`scan_budget`;
- :func:`ragged_reference`: the references' per-sequence dense attention (and log-sum-exp);
- :func:`state_lse`: the log-sum-exp of a finished online softmax (to merge cascades);
- :func:`last_tokens_window`: a window of the last ``w`` tokens (vLLM's, JetStream's meaning);
- :func:`gather_pages`: a block of each row's pages, as one run of tokens, read from the cache
  in place (index-clamped, so a garbage entry in an unused table slot cannot fault);
- :func:`sinks_per_head`: ``softmax_aux`` as ``[num_heads, num_sinks]`` (a 1-D ``[num_heads]`` is
  one sink per head, any other length is shared by every head);
- :func:`masked_attention_reference`: the references' naive dense attention under an explicit
  mask (every logit at once, in the reference's dtype and precision);
- :class:`SoftmaxState`, :func:`masked_logits`, :func:`merge_block`, :func:`merge_sinks`,
  :func:`finish`: the online softmax over blocks of keys, so a kernel holds one block of logits
  at a time instead of the whole context. Rows that see no key finish as exact zeros;
  :func:`merge_splits`: the partial states of split-K decode kernels merged into one;
- :func:`paged_decode_rules`, :func:`paged_autotune_indices`: the index checks and autotuning
  stand-ins of one decode row per sequence over a paged cache (``context_lens``, ``block_tables``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..args import as_array, concrete, shape_str
from ..checks import ValueRule

__all__ = [
    "FEATURES",
    "MAX_QUERY_BLOCK",
    "SCAN_BUDGETS",
    "SCAN_BUDGET_ACCELERATOR",
    "ScanBudget",
    "SoftmaxState",
    "finish",
    "gather_pages",
    "last_tokens_window",
    "masked_attention_reference",
    "masked_logits",
    "merge_block",
    "merge_sinks",
    "merge_splits",
    "num_seqs_scalar",
    "packed_batch_case",
    "paged_autotune_indices",
    "paged_decode_rules",
    "paged_scan",
    "query_block_size",
    "query_slots",
    "ragged_autotune_indices",
    "ragged_index_rules",
    "ragged_paged_scan",
    "ragged_query_rows",
    "ragged_reference",
    "ragged_scan_configs",
    "ragged_scan_pages",
    "ragged_scan_tiles",
    "scan_budget",
    "scan_pages",
    "scan_pair_candidates",
    "sinks_per_head",
    "state_lse",
    "unique_drop_index",
]

#: The features of the decode and serving ops (``page_attention``, ``ragged_decode_attention``,
#: ``ragged_page_attention_v2``): an implementation declines by these names.
FEATURES: dict[str, tuple[str, Any]] = {
    "softmax_aux": ("attention sinks", lambda a: a.softmax_aux is not None),
    "sliding_window": ("attend only the last left + 1 tokens", lambda a: a.sliding_window is not None),
    "logits_soft_cap": ("cap · tanh(logits / cap)", lambda a: a.logits_soft_cap is not None),
    "gqa": ("fewer key/value heads than query heads", lambda a: a.num_heads != a.num_kv_heads),
    "value_head_dim": ("value head dim differs from the query's", lambda a: a.value_head_dim != a.head_dim),
    "float32_wide_heads": (
        "float32 inputs with a head dim above 128",
        lambda a: jnp.dtype(a.dtype) == jnp.float32 and max(a.head_dim, getattr(a, "value_head_dim", 0)) > 128,
    ),
}


F32 = jnp.float32
C = TypeVar("C")


def sinks_per_head(aux: Any, num_heads: int) -> Any:
    """``softmax_aux`` as ``[num_heads, num_sinks]``: a 1-D array of ``num_heads`` values is one sink
    per head; any other length is a set of sinks every head shares; 2-D passes unchanged."""
    if aux is None or aux.ndim != 1:
        return aux
    if aux.shape[0] == num_heads:
        return aux[:, None]
    return jnp.broadcast_to(aux[None, :], (num_heads, aux.shape[0]))


def gather_pages(cache: Any, pages: Any) -> jax.Array:
    """``cache[pages]`` for a page cache ``[num_pages, page_size, *rest]`` and page indices
    ``[*rows, n]``: ``[*rows, n * page_size, *rest]``, the rows' tokens in page order."""
    x = cache.at[pages].get(mode="clip")
    return x.reshape(*pages.shape[:-1], pages.shape[-1] * cache.shape[1], *cache.shape[2:])


def masked_attention_reference(
    q: Any,
    k: Any,
    v: Any,
    valid: Any,
    *,
    scale: float,
    soft_cap: float | None,
    sinks: Any,
    dtype: Any,
    precision: Any,
    bias: Any = None,
    return_lse: bool = False,
) -> Any:
    """Naive attention for the references: ``q [..., rows, h, d]`` over ``k``/``v``
    ``[..., keys, hk, d]`` (query head ``i`` reads kv head ``i // (h // hk)``) where ``valid
    [..., rows, keys]``; ``sinks`` ``[h, num_sinks]`` or ``None``. Masked keys' values are zeroed
    first (they may be NaN); a row with no valid key is zero. ``bias`` (``[..., h, rows, keys]``)
    is added to the capped logits. ``return_lse``: also each row's log-sum-exp ``[..., rows, h]``
    (float32; ``-inf`` for a row with no valid key)."""
    h, hk = q.shape[-2], k.shape[-2]
    heads = jnp.arange(h) // (h // hk)
    k = jnp.where(valid.any(axis=-2)[..., None, None], k.astype(dtype), 0)[..., heads, :]
    v = jnp.where(valid.any(axis=-2)[..., None, None], v.astype(dtype), 0)[..., heads, :]
    logits = jnp.einsum("...qhd,...khd->...hqk", q.astype(dtype), k, precision=precision) * scale
    if soft_cap is not None:
        logits = soft_cap * jnp.tanh(logits / soft_cap)
    if bias is not None:
        logits = logits + jnp.asarray(bias, dtype)
    logits = jnp.where(valid[..., None, :, :], logits, -jnp.inf)
    n = logits.shape[-1]
    if sinks is not None:
        s = jnp.broadcast_to(sinks.astype(dtype)[:, None, :], (*logits.shape[:-1], sinks.shape[-1]))
        logits = jnp.concatenate([logits, s], axis=-1)
    m = jnp.max(logits, axis=-1, keepdims=True, initial=-jnp.inf)  # no key at all: an empty context
    e = jnp.exp(logits - jnp.where(jnp.isfinite(m), m, 0))
    denom = e.sum(axis=-1, keepdims=True)
    p = (e / jnp.where(denom > 0, denom, 1))[..., :n]
    out = jnp.einsum("...hqk,...khd->...qhd", p, v, precision=precision)
    if not return_lse:
        return out
    return out, jnp.swapaxes(jax.nn.logsumexp(logits.astype(F32), axis=-1), -1, -2)


class SoftmaxState(NamedTuple):
    """The running row max ``m``, row sum ``l`` and unnormalized output ``acc`` (float32)."""

    m: jax.Array
    l: jax.Array  # noqa: E741 - the usual name of the softmax denominator
    acc: jax.Array

    @classmethod
    def zeros(cls, rows: tuple[int, ...], value_dim: int) -> SoftmaxState:
        return cls(jnp.full(rows, -jnp.inf, F32), jnp.zeros(rows, F32), jnp.zeros((*rows, value_dim), F32))


def masked_logits(logits: Any, valid: Any, scale: float, soft_cap: float | None) -> jax.Array:
    """Scaled (and soft-capped) float32 logits, ``-inf`` where ``valid`` is false. ``where`` rather
    than arithmetic masking, so garbage (even NaN) in keys that are not attended never leaks."""
    x = logits.astype(F32) * scale
    if soft_cap is not None:
        x = soft_cap * jnp.tanh(x / soft_cap)
    return jnp.where(valid, x, -jnp.inf)


def merge_block(state: SoftmaxState, logits: Any, pv: Callable[[jax.Array], jax.Array]) -> SoftmaxState:
    """Fold one block of masked logits (``[*rows, block]``) into ``state``; ``pv(p)`` is the
    block's probabilities times its values (``[*rows, value_dim]``), whose values must be zero
    where the logits are masked (``0 · NaN`` is NaN)."""
    m_new = jnp.maximum(state.m, logits.max(axis=-1))
    # A row that has seen only masked keys keeps m = -inf: shift by 0 so exp gives 0, not NaN.
    m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)
    p = jnp.exp(logits - m_safe[..., None])
    alpha = jnp.exp(state.m - m_safe)
    return SoftmaxState(m_new, state.l * alpha + p.sum(axis=-1), state.acc * alpha[..., None] + pv(p))


def merge_sinks(state: SoftmaxState, sinks: Any) -> SoftmaxState:
    """Add attention-sink logits (``[*rows, num_sinks]``, broadcast to the rows): they join the
    denominator and contribute no value."""
    sinks = sinks.astype(F32)
    m_new = jnp.maximum(state.m, sinks.max(axis=-1))
    alpha = jnp.exp(state.m - m_new)
    l_new = state.l * alpha + jnp.exp(sinks - m_new[..., None]).sum(axis=-1)
    return SoftmaxState(m_new, l_new, state.acc * alpha[..., None])


def finish(state: SoftmaxState) -> jax.Array:
    """The normalized output (float32); rows that attended nothing are exactly zero."""
    return state.acc / jnp.where(state.l > 0, state.l, 1.0)[..., None]


def merge_splits(m: Any, l: Any, acc: Any) -> SoftmaxState:  # noqa: E741 - the softmax denominator
    """One state from the partial states of disjoint key ranges (split-K decode): ``m`` and ``l``
    ``[*rows, splits]``, ``acc`` ``[*rows, splits, value_dim]``; a split that saw no key has
    ``m = -inf`` and weighs nothing."""
    m_all = m.max(axis=-1)
    w = jnp.exp(m - jnp.where(m_all == -jnp.inf, 0.0, m_all)[..., None])
    return SoftmaxState(m_all, (l * w).sum(axis=-1), (acc * w[..., None]).sum(axis=-2))


# ---------------------------------------------------------------------------------------------
# Packed query rows: bindings


def num_seqs_scalar(op: str, n: Any) -> jax.Array:
    """``num_seqs`` (an int, a 0-D or a ``[1]`` int array, maybe traced) as a 0-D int32 array."""
    if isinstance(n, bool):
        raise TypeError(f"{op}: num_seqs must be an int or an int array, got bool")
    n = jnp.asarray(n, jnp.int32) if isinstance(n, (int, np.integer)) else as_array(op, "num_seqs", n)
    if n.size != 1:
        raise ValueError(f"{op}: num_seqs must be an int, a 0-D or a [1] int array, got {shape_str(n)}")
    return jnp.asarray(n, jnp.int32).reshape(())


def ragged_index_rules(
    *,
    max_num_seqs: int,
    total_tokens: int,
    pages_per_seq: int,
    page_size: int,
    num_pages: int,
    lens: str,
    tables: str,
    num_seqs: str | None = "num_seqs",
    query_start_loc: str = "query_start_loc",
    table_rows: Callable[[Any], Any] = lambda t: t,
) -> list[ValueRule]:
    """The index checks of packed query rows: ``num_seqs`` in ``[0, max_num_seqs]``;
    ``query_start_loc`` starting at 0, non-decreasing over the live sequences and ending within the
    tokens; each live sequence's length (``lens``) within its table's capacity and at least its
    query count (its queries are the last tokens of its context); every page it uses within the
    cache. ``num_seqs=None``: every sequence is live. ``table_rows`` reshapes the ``tables``
    argument to ``[max_num_seqs, pages_per_seq]`` (a flattened table)."""
    m, capacity = max_num_seqs, pages_per_seq * page_size
    n_names = (num_seqs,) if num_seqs is not None else ()

    def live(xp: Any, n: Any = None) -> Any:
        return xp.arange(m) < (m if n is None else n)

    def q_lens(xp: Any, qsl: Any) -> Any:
        return qsl[1:] - qsl[:-1]

    def bad_qsl(xp: Any, qsl: Any, n: Any = m) -> Any:
        starts = xp.concatenate([qsl[:1] != 0, live(xp, n) & (q_lens(xp, qsl) < 0)])
        return starts | (xp.arange(m + 1) == n) & (qsl > total_tokens)

    def bad_table(xp: Any, t: Any, ln: Any, n: Any = None) -> Any:
        rows = table_rows(t)
        used = xp.arange(rows.shape[1])[None, :] < -(-ln[:, None] // page_size)
        bad = used & live(xp, n)[:, None] & ((rows < 0) | (rows >= num_pages))
        return bad.reshape(t.shape)

    rules = []
    if num_seqs is not None:
        rules.append(ValueRule((num_seqs,), f"must be in [0, max_num_seqs = {m}]", lambda xp, n: (n < 0) | (n > m)))
    return [
        *rules,
        ValueRule(
            (query_start_loc, *n_names),
            f"must start at 0, not decrease over the first num_seqs + 1 entries and end within {total_tokens} tokens",
            bad_qsl,
        ),
        ValueRule(
            (lens, *n_names),
            f"must be in [0, pages_per_seq * page_size = {capacity}]",
            lambda xp, ln, n=None: live(xp, n) & ((ln < 0) | (ln > capacity)),
        ),
        ValueRule(
            (lens, query_start_loc, *n_names),
            "must be at least each sequence's query count (its queries are the last tokens of its context)",
            lambda xp, ln, qsl, n=None: live(xp, n) & (ln < q_lens(xp, qsl)),
        ),
        ValueRule(
            (tables, lens, *n_names),
            f"must index the cache's {num_pages} pages (in [0, {num_pages})) for every page a sequence uses",
            bad_table,
        ),
    ]


def ragged_autotune_indices(
    lens: Any,
    tables: Any,
    qsl: Any,
    n: Any,
    *,
    total_tokens: int,
    pages_per_seq: int,
    page_size: int,
    num_pages: int,
    seed: int = 0,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Concrete ``(lens, tables, query_start_loc, num_seqs)`` to autotune on: the call's own when
    concrete; for traced ones, the tokens spread evenly over every sequence, each at full length,
    and pages in random order. ``tables`` keeps its shape (flattened or not)."""
    rng = np.random.default_rng(seed)
    m = lens.shape[0]
    c_lens, c_tables, c_qsl, c_n = concrete(lens), concrete(tables), concrete(qsl), concrete(n)
    if c_lens is None or c_qsl is None or c_n is None:
        per = total_tokens // max(m, 1)
        c_qsl = np.arange(m + 1, dtype=np.int32) * per
        c_lens = np.full((m,), max(per, pages_per_seq * page_size), np.int32).clip(max=pages_per_seq * page_size)
        c_n = np.int32(m)
    if c_tables is None:
        c_tables = (rng.permutation(int(np.prod(tables.shape))) % num_pages).reshape(tables.shape)
    return (
        jnp.asarray(c_lens, jnp.int32),
        jnp.asarray(c_tables, jnp.int32),
        jnp.asarray(c_qsl, jnp.int32),
        jnp.asarray(c_n, jnp.int32).reshape(()),
    )


def paged_decode_rules(*, capacity: int, page_size: int, num_pages: int, unit: str = "block") -> list[ValueRule]:
    """The index checks of one decode row per sequence over a paged cache: ``context_lens`` in
    ``[0, capacity]`` (``capacity = max_pages * page_size``) and every ``block_tables`` entry a
    sequence uses (its first ``ceil(context_lens / page_size)``) in ``[0, num_pages)``. ``unit``:
    what the op calls a page in its axis names (``"block"``: ``max_blocks``, ``block_size``)."""

    def bad_table(xp: Any, tables: Any, lens: Any) -> Any:
        used = xp.arange(tables.shape[1])[None, :] < -(-lens[:, None] // page_size)
        return used & ((tables < 0) | (tables >= num_pages))

    return [
        ValueRule(
            ("context_lens",),
            f"must be in [0, max_{unit}s * {unit}_size = {capacity}]",
            lambda xp, lens: (lens < 0) | (lens > capacity),
        ),
        ValueRule(
            ("block_tables", "context_lens"),
            f"must index the cache's {num_pages} {unit}s (in [0, {num_pages})) for every page a sequence uses",
            bad_table,
        ),
    ]


def paged_autotune_indices(lens: Any, tables: Any, *, capacity: int, num_pages: int, seed: int = 0) -> tuple[Any, Any]:
    """Concrete ``(context_lens, block_tables)`` to autotune a paged decode on: the call's own when
    concrete; traced ones become every sequence at full length (the worst case) and pages in
    random order."""
    rng = np.random.default_rng(seed)
    c_lens, c_tables = concrete(lens), concrete(tables)
    if c_lens is None:
        c_lens = np.full(lens.shape, capacity, np.int32)
    if c_tables is None:
        c_tables = (rng.permutation(int(np.prod(tables.shape))) % num_pages).reshape(tables.shape)
    return jnp.asarray(c_lens, jnp.int32), jnp.asarray(c_tables, jnp.int32)


class PackedBatch(NamedTuple):
    """The index arrays of a test batch (numpy): see :func:`packed_batch_case`."""

    q_lens: np.ndarray
    lens: np.ndarray
    tables: np.ndarray
    query_start_loc: np.ndarray
    num_pages: int


def packed_batch_case(
    seqs: Any, max_num_seqs: int | None, page_size: int, extra_pages: int, rng: np.random.Generator
) -> PackedBatch:
    """The cases' batch of packed sequences ``seqs[i] = (q_len, kv_len)``, padded to
    ``max_num_seqs`` (padded sequences: no tokens, no rows): their lengths, block tables
    ``[max_num_seqs, pages_per_seq]`` drawn from a shuffled pool of ``extra_pages`` more pages than
    they can use (one ``rng`` draw), and ``query_start_loc``."""
    n = len(seqs)
    m = max_num_seqs or n
    q_lens = np.asarray([s[0] for s in seqs], np.int32)
    lens = np.zeros((m,), np.int32)
    lens[:n] = [s[1] for s in seqs]
    pages_per_seq = max(1, int(-(-lens.max() // page_size)))
    num_pages = m * pages_per_seq + extra_pages
    tables = rng.permutation(num_pages)[: m * pages_per_seq].reshape(m, pages_per_seq).astype(np.int32)
    qsl = np.zeros((m + 1,), np.int32)
    qsl[1 : n + 1] = np.cumsum(q_lens)
    qsl[n + 1 :] = qsl[n]  # padded sequences own no rows
    return PackedBatch(q_lens, lens, tables, qsl, num_pages)


# ---------------------------------------------------------------------------------------------
# Packed query rows: the blocked XLA form


def unique_drop_index(index: Any, keep: Any, end: int) -> jax.Array:
    """``index`` ([n] integers) where ``keep``, else a distinct position past ``end``
    (``end + i`` for entry ``i``): a scatter into ``end`` slots with ``mode="drop"`` writes nothing
    there, and the indices stay unique, so the scatter may say ``unique_indices=True`` (XLA's GPU
    scatter then writes the rows in parallel: 16384 rows of 4 KiB in 0.05 ms on an H200 against
    0.26 ms without it, ``benchmarks/results/h200/ragged_page_attention_v3.json``)."""
    return jnp.where(keep, index, end + jnp.arange(index.shape[0], dtype=index.dtype))


def ragged_query_rows(
    query_start_loc: Any,
    kv_lens: Any,
    num_seqs: Any,
    total_tokens: int,
    *,
    window: tuple[int, int] | None = None,
    causal: bool = True,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """``(seq, pos, lo, hi)`` of each of ``total_tokens`` packed query rows: its sequence, its
    position in that sequence's context (its queries are the last ``q_len`` of ``kv_lens[seq]``)
    and the half-open key range ``[lo, hi)`` it attends: up to its position when ``causal``, else
    the whole context; a ``window (left, right)`` keeps keys in ``[pos - left, pos + right]``.
    Rows of no live sequence (padding) get an empty range."""
    m = kv_lens.shape[0]
    tok = jnp.arange(total_tokens, dtype=jnp.int32)
    live = jnp.arange(m) < num_seqs
    seq = jnp.sum(live[None, :] & (query_start_loc[None, 1:] <= tok[:, None]), axis=1).astype(jnp.int32)
    in_batch = (tok >= query_start_loc[0]) & (tok < query_start_loc[num_seqs])
    seq = jnp.minimum(seq, m - 1)
    kv_len = kv_lens[seq]
    pos = kv_len - query_start_loc[seq + 1] + tok
    hi = jnp.minimum(pos + 1, kv_len) if causal else kv_len
    lo = jnp.zeros_like(hi)
    if window is not None:
        lo = jnp.maximum(pos - window[0], 0)
        hi = jnp.minimum(hi, pos + window[1] + 1)
    return seq, pos, jnp.where(in_batch, lo, 0), jnp.where(in_batch, hi, 0)


def paged_scan(
    q: Any,
    seq: Any,
    lo: Any,
    hi: Any,
    tables: Any,
    *,
    page_size: int,
    read_pages: Callable[[jax.Array], tuple[jax.Array, jax.Array]],
    pages_per_step: int,
    scale: float,
    soft_cap: float | None,
    value_dim: int,
    bias: Callable[[jax.Array], jax.Array] | None = None,
) -> SoftmaxState:
    """Attention of packed rows ``q [tokens, hk, g, d]`` over their sequences' pages with an
    online softmax, ``pages_per_step`` pages per step, so temporary memory is one block of pages
    per row (never ``[tokens, context]`` logits). Row ``t`` attends keys ``[lo[t], hi[t])`` of
    sequence ``seq[t]``, whose pages are ``tables[seq[t]]`` (``lo``/``hi`` ``[tokens, g]``: a range
    per query head of the row, e.g. several query tokens of one sequence as its heads); the scan covers only the steps some
    row's range reaches. ``read_pages(pages [tokens, n])`` returns the keys ``[tokens, n *
    page_size, hk, d]`` and values ``[..., hk, value_dim]`` of those pages in ``q``'s dtype (read
    in place from the caller's cache). ``bias(key_pos [tokens, block])`` adds ``[tokens, hk, g,
    block]`` to the capped logits (ALiBi, query-query bias). Keys outside a row's range are masked
    and their values zeroed, so garbage (even NaN) in unused slots never reaches the output."""
    pps = max(1, min(pages_per_step, tables.shape[1]))
    steps_total = -(-tables.shape[1] // pps)
    chunk = pps * page_size
    precision = lax.Precision.HIGHEST if q.dtype == F32 else None
    tables = jnp.pad(tables, ((0, 0), (0, steps_total * pps - tables.shape[1])))
    attends = hi > lo
    s_hi = (jnp.max(jnp.where(attends, hi, 0)) + chunk - 1) // chunk
    s_lo = jnp.minimum(jnp.min(jnp.where(attends, lo, steps_total * chunk)) // chunk, s_hi)
    # [tokens, 1] (one range per row) or [tokens, g] (one per query head of the row).
    lo_g, hi_g = (x if x.ndim == 2 else x[:, None] for x in (lo, hi))

    def step(s: Any, state: SoftmaxState) -> SoftmaxState:
        k_t, v_t = read_pages(lax.dynamic_slice_in_dim(tables, s * pps, pps, 1)[seq])  # [tokens, chunk, hk, *]
        pos = s * chunk + jnp.arange(chunk, dtype=jnp.int32)
        valid = (pos >= lo_g[..., None]) & (pos < hi_g[..., None])  # [tokens, 1 or g, chunk]
        v_t = jnp.where(valid.any(axis=1)[:, :, None, None], v_t, 0)
        logits = jnp.einsum("thgd,tchd->thgc", q, k_t, precision=precision, preferred_element_type=F32)
        logits = masked_logits(logits, valid[:, None], scale, soft_cap)
        if bias is not None:
            logits = logits + bias(jnp.broadcast_to(pos, (q.shape[0], chunk)))

        def pv(p: Any) -> Any:
            return jnp.einsum(
                "thgc,tchd->thgd", p.astype(q.dtype), v_t, precision=precision, preferred_element_type=F32
            )

        return merge_block(state, logits, pv)

    zeros = SoftmaxState.zeros(q.shape[:3], value_dim)
    if steps_total == 1:  # one step covers every range: no loop (a step over no key changes nothing)
        return step(0, zeros)
    return lax.fori_loop(s_lo.astype(jnp.int32), s_hi.astype(jnp.int32), step, zeros)


#: Query tokens per block of :func:`ragged_paged_scan` at most: one gather of each step's pages
#: serves this many tokens' (a matmul of ``block · groups`` rows); more only adds padded rows.
MAX_QUERY_BLOCK = 64


def query_block_size(total_tokens: int, max_seqs: int) -> int:
    """Query tokens per block of :func:`ragged_paged_scan` for ``total_tokens`` packed tokens of
    at most ``max_seqs`` sequences (static shapes only): ``1`` when every token may be a decode
    row of its own sequence (``total_tokens <= max_seqs``), else the mean tokens per sequence
    rounded up to a power of two, at most :data:`MAX_QUERY_BLOCK`. Each sequence pads its last
    block, so a larger block wastes rows on short sequences; a smaller one gathers more often."""
    if total_tokens <= max_seqs:
        return 1
    mean = -(-total_tokens // max(1, max_seqs))
    return min(MAX_QUERY_BLOCK, 1 << (mean - 1).bit_length())


class ScanBudget(NamedTuple):
    """What one step of :func:`paged_scan` holds at most: its step size in the XLA serving ops."""

    pairs: int  # (query slot, cached token) pairs of logits (per head)
    max_tokens: int  # cached tokens
    gather_bytes: int  # keys and values gathered for every row of the step


#: A CPU keeps a step's logits in its caches: steps of 2^16 pairs measured fastest there
#: (benchmarks/results/cpu/ragged_page_attention_v3.json). A GPU pays launches and a loop
#: iteration per step: on an H200, 8 prompts of 2048 tokens in such steps (128 of them) ran 7x
#: slower than dense attention over the same tokens (benchmarks/results/h200/
#: ragged_page_attention_v3.json), so accelerators take steps 64x larger, bounded by the bytes
#: each step gathers.
SCAN_BUDGETS: dict[str, ScanBudget] = {"cpu": ScanBudget(1 << 16, 2048, 1 << 30)}
SCAN_BUDGET_ACCELERATOR = ScanBudget(1 << 22, 1 << 14, 1 << 28)


def scan_budget(platform: str) -> ScanBudget:
    """The step budget of :func:`paged_scan` on ``platform`` (``"cpu"``, ``"gpu"``, ``"tpu"``)."""
    return SCAN_BUDGETS.get(platform, SCAN_BUDGET_ACCELERATOR)


def scan_pages(
    *, slots: int, rows: int, token_bytes: int, page_size: int, max_pages: int, platform: str, pairs: int | None = None
) -> int:
    """Pages per step of :func:`paged_scan` for ``slots`` query slots in ``rows`` rows, each row
    gathering ``token_bytes`` of keys and values per cached token: the budget's ``pairs`` (or
    ``pairs``) over the slots, at most its tokens and its gathered bytes, in whole pages, between
    one and ``max_pages``."""
    b = scan_budget(platform)
    tokens = min(b.max_tokens, (pairs or b.pairs) // max(1, slots), b.gather_bytes // max(1, rows * token_bytes))
    return max(1, min(max_pages, tokens // page_size))


def scan_pair_candidates(platform: str) -> tuple[int, ...]:
    """The pairs per step that autotuning tries on ``platform``: the budget's, halved twice and
    doubled twice."""
    p = scan_budget(platform).pairs
    return (p >> 2, p >> 1, p, p << 1, p << 2)


def ragged_scan_pages(
    *,
    total_tokens: int,
    max_seqs: int,
    block_q: int,
    token_bytes: int,
    page_size: int,
    max_pages: int,
    platform: str,
    pairs: int | None = None,
) -> int:
    """:func:`scan_pages` of :func:`ragged_paged_scan` over ``total_tokens`` packed tokens of at
    most ``max_seqs`` sequences in blocks of ``block_q`` (a row per block)."""
    slots = query_slots(total_tokens, max_seqs, block_q)
    return scan_pages(
        slots=slots, rows=-(-slots // max(1, block_q)), token_bytes=token_bytes, page_size=page_size,
        max_pages=max_pages, platform=platform, pairs=pairs,
    )  # fmt: skip


def ragged_scan_tiles(
    *, total_tokens: int, max_seqs: int, token_bytes: int, page_size: int, max_pages: int, platform: str
) -> tuple[tuple[int, int], list[tuple[int, int]]]:
    """The heuristic ``(pages per step, query block)`` of :func:`ragged_paged_scan` and the
    candidates of autotuning (query blocks of 1, the heuristic's and twice it, at most
    :data:`MAX_QUERY_BLOCK`; each with the pages of :func:`scan_pair_candidates`), shared by the
    XLA serving ops."""
    bq = query_block_size(total_tokens, max_seqs)
    kw = {
        "total_tokens": total_tokens, "max_seqs": max_seqs, "token_bytes": token_bytes, "page_size": page_size,
        "max_pages": max_pages, "platform": platform,
    }  # fmt: skip
    blocks = sorted({1, bq, min(2 * bq, MAX_QUERY_BLOCK)})
    pairs = scan_pair_candidates(platform)
    candidates = sorted({(ragged_scan_pages(block_q=b, pairs=p, **kw), b) for p in pairs for b in blocks})
    return (ragged_scan_pages(block_q=bq, **kw), bq), candidates


def ragged_scan_configs(
    args: Any, platform: str, config: Callable[[int, int], C], *, max_seqs: int, page_size: int, max_pages: int
) -> tuple[C, list[C]]:
    """:func:`ragged_scan_tiles` of a serving op's ``args`` (``total_tokens`` packed query tokens
    of ``num_kv_heads`` kv heads of ``head_dim``, in ``dtype``) as configs ``config(pages per
    step, query block)``: the heuristic's and the candidates'."""
    (pages, bq), tiles = ragged_scan_tiles(
        total_tokens=args.total_tokens, max_seqs=max_seqs,
        token_bytes=2 * args.num_kv_heads * args.head_dim * jnp.dtype(args.dtype).itemsize,
        page_size=page_size, max_pages=max_pages, platform=platform,
    )  # fmt: skip
    return config(pages, bq), [config(n, b) for n, b in tiles]


def query_slots(total_tokens: int, max_seqs: int, block_q: int) -> int:
    """Query rows :func:`ragged_paged_scan` computes for ``total_tokens`` packed tokens of at most
    ``max_seqs`` sequences in blocks of ``block_q`` (empty slots included): what one step's
    logits hold per gathered key."""
    return total_tokens if block_q <= 1 else (-(-total_tokens // block_q) + max_seqs) * block_q


def ragged_paged_scan(
    q: Any,
    query_start_loc: Any,
    num_seqs: Any,
    seq: Any,
    lo: Any,
    hi: Any,
    tables: Any,
    *,
    block_q: int,
    page_size: int,
    read_pages: Callable[[jax.Array], tuple[jax.Array, jax.Array]],
    pages_per_step: int,
    scale: float,
    soft_cap: float | None,
    value_dim: int,
    bias: Callable[[jax.Array, jax.Array], jax.Array] | None = None,
) -> SoftmaxState:
    """:func:`paged_scan` of packed query tokens ``q [tokens, hk, g, d]`` grouped into blocks of
    ``block_q`` consecutive tokens of one sequence (``query_start_loc [m + 1]``, the live
    ``num_seqs``; ``seq``, ``lo``, ``hi [tokens]`` from :func:`ragged_query_rows`): each block is
    one row of the scan whose ``block_q · g`` query heads share each gathered block of pages, so
    the logits are a matmul instead of one matrix-vector product per token. Returns the state of
    each token ``[tokens, hk, g]`` (tokens of no live sequence: nothing attended).

    ``bias(tokens [rows, block_q], key_pos [rows, block]) -> [rows, block_q, hk, g, block]`` adds
    to the capped logits; ``tokens`` holds each slot's query token, ``tokens`` for an empty slot
    (clip before indexing). ``block_q == 1`` is :func:`paged_scan` over the tokens themselves."""
    t_all, hk, g, _ = q.shape
    kw = {
        "page_size": page_size, "read_pages": read_pages, "pages_per_step": pages_per_step,
        "scale": scale, "soft_cap": soft_cap, "value_dim": value_dim,
    }  # fmt: skip
    if block_q <= 1:
        tok = jnp.arange(t_all, dtype=jnp.int32)[:, None]
        row_bias = None if bias is None else (lambda key_pos: bias(tok, key_pos)[:, 0])
        return paged_scan(q, seq, lo, hi, tables, bias=row_bias, **kw)
    m = query_start_loc.shape[0] - 1
    qsl = query_start_loc.astype(jnp.int32)
    live = jnp.arange(m) < num_seqs
    blocks = jnp.where(live, (jnp.maximum(qsl[1:] - qsl[:-1], 0) + block_q - 1) // block_q, 0)
    end = jnp.cumsum(blocks)  # block b belongs to the first sequence whose end exceeds b
    nb = -(-t_all // block_q) + m  # at least the blocks any live batch of t_all tokens needs
    b = jnp.arange(nb, dtype=jnp.int32)
    bseq = jnp.sum(end[None, :] <= b[:, None], axis=1).astype(jnp.int32)
    s = jnp.minimum(bseq, m - 1)
    first = qsl[s] + (b - (end[s] - blocks[s])) * block_q
    tok = first[:, None] + jnp.arange(block_q, dtype=jnp.int32)[None, :]
    used = (bseq < m)[:, None] & (tok < qsl[s + 1][:, None]) & (tok < t_all)
    tok = jnp.where(used, tok, t_all)  # [nb, block_q]; t_all: an empty slot
    tc = jnp.minimum(tok, t_all - 1)

    def per_head(x: Any) -> Any:  # [tokens] -> [nb, block_q * g], empty slots attend nothing
        return jnp.broadcast_to(jnp.where(used, x[tc], 0)[:, :, None], (nb, block_q, g)).reshape(nb, block_q * g)

    q_rows = jnp.where(used[:, :, None, None, None], q[tc], 0)  # [nb, block_q, hk, g, d]
    q_rows = jnp.moveaxis(q_rows, 1, 2).reshape(nb, hk, block_q * g, q.shape[-1])
    row_bias = None
    if bias is not None:

        def row_bias(key_pos: Any) -> Any:
            x = jnp.moveaxis(bias(tok, key_pos), 1, 2)  # [nb, hk, block_q, g, block]
            return x.reshape(nb, hk, block_q * g, x.shape[-1])

    state = paged_scan(q_rows, s, per_head(lo), per_head(hi), tables, bias=row_bias, **kw)

    def to_tokens(x: Any, fill: Any) -> Any:  # [nb, hk, block_q * g, *r] -> [tokens, hk, g, *r]
        r = x.shape[3:]
        x = jnp.moveaxis(x.reshape(nb, hk, block_q, g, *r), 2, 1).reshape(nb * block_q, hk, g, *r)
        out = jnp.full((t_all, hk, g, *r), fill, x.dtype)
        # Each token fills one slot; the empty slots are dropped.
        idx = unique_drop_index(tok.reshape(-1), used.reshape(-1), t_all)
        return out.at[idx].set(x, mode="drop", unique_indices=True)

    return SoftmaxState(to_tokens(state.m, -jnp.inf), to_tokens(state.l, 0.0), to_tokens(state.acc, 0.0))


# ---------------------------------------------------------------------------------------------
# Packed query rows: the references


def ragged_reference(
    queries: Any,
    read_sequence: Callable[[int, int], tuple[Any, Any]],
    kv_lens: Any,
    query_start_loc: Any,
    num_seqs: Any,
    *,
    value_dim: int,
    scale: float | None,
    soft_cap: float | None,
    sinks: Any,
    window: int | tuple[int, int] | None,
    causal: bool = True,
    bias: Callable[[int, Any, Any], Any] | None = None,
    dtype: Any,
    precision: Any,
    return_lse: bool = False,
) -> Any:
    """Naive attention of packed query rows, sequence by sequence (the index arrays must be
    concrete): sequence ``i < num_seqs`` owns rows ``query_start_loc[i] .. [i + 1] - 1``, the last
    of its ``kv_lens[i]`` tokens; ``read_sequence(i, kv_len)`` returns its keys and values ``[kv_len,
    hk, *]``. ``bias(i, pos [q, 1], key [1, kv_len])`` returns ``[h, q, kv_len]`` added to the
    capped logits. Rows of no live sequence are zero. ``return_lse``: also each row's log-sum-exp
    ``[tokens, h]`` (float32, sinks included; ``-inf`` for rows of no live sequence)."""
    t_all, h = queries.shape[:2]
    lens, qsl = np.asarray(kv_lens), np.asarray(query_start_loc)
    n = int(np.asarray(num_seqs).reshape(()))
    if window is not None and isinstance(window, int):
        window = (window, 0 if causal else window)
    scale = scale if scale is not None else queries.shape[2] ** -0.5
    rows = [jnp.zeros((int(qsl[0]), h, value_dim), dtype)]
    lses = [jnp.full((int(qsl[0]), h), -jnp.inf, F32)]
    for i in range(n):
        lo, hi, kv_len = int(qsl[i]), int(qsl[i + 1]), int(lens[i])
        if hi == lo:
            continue
        k, v = read_sequence(i, kv_len)
        pos = kv_len - (hi - lo) + np.arange(hi - lo)[:, None]  # each query's position
        t = np.arange(kv_len)[None, :]
        valid = t <= pos if causal else np.ones((hi - lo, kv_len), bool)
        if window is not None:
            valid = valid & (t >= pos - window[0]) & (t <= pos + window[1])
        out, lse = masked_attention_reference(
            queries[lo:hi],
            k,
            v,
            jnp.asarray(valid),
            scale=scale,
            soft_cap=soft_cap,
            sinks=sinks,
            bias=None if bias is None else bias(i, pos, t),
            dtype=dtype,
            precision=precision,
            return_lse=True,
        )
        rows.append(out)
        lses.append(lse)
    rows.append(jnp.zeros((t_all - int(qsl[n]), h, value_dim), dtype))
    lses.append(jnp.full((t_all - int(qsl[n]), h), -jnp.inf, F32))
    out = jnp.concatenate(rows).astype(dtype)
    return (out, jnp.concatenate(lses)) if return_lse else out


# ---------------------------------------------------------------------------------------------
# Log-sum-exp (to merge the outputs of attention over disjoint key sets)


def state_lse(state: SoftmaxState) -> jax.Array:
    """Each row's log-sum-exp: the natural log of its softmax denominator, in the logits' domain
    (scaled, capped, biased; sinks included once merged); ``-inf`` for a row that saw nothing."""
    return jnp.where(state.l > 0, state.m + jnp.log(jnp.where(state.l > 0, state.l, 1.0)), -jnp.inf)


def last_tokens_window(op: str, name: str, w: Any) -> tuple[int, int] | None:
    """A sliding window of ``w`` tokens, the query's own and the ``w - 1`` before it (vLLM's and
    JetStream's meaning), as ``(left, right)``; ``None`` stays ``None``."""
    from ..args import static_int

    w = static_int(op, name, w, minimum=1)
    return None if w is None else (w - 1, 0)
