"""Conformance cases of ``unified_attention``: mixes of decodes and prefill chunks over shuffled
blocks whose unused blocks and slots are NaN (a kernel that reads them fails) and whose unused
table entries are out of range, padding query rows, sequences with no query, odd sizes, GQA, soft
cap, windows, sinks, ALiBi, a query-query bias (with ``-inf`` entries, as a speculative-decoding
tree mask has), the log-sum-exp."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "UnifiedCase", "make_unified_inputs"]


@dataclasses.dataclass(frozen=True)
class UnifiedCase:
    """One case: ``seqs[i] = (q_len, kv_len)`` of each sequence; ``pad_tokens`` adds query rows
    past the last sequence's; ``qq_rows`` more ``qq_bias`` rows than the longest query."""

    name: str
    seqs: tuple[tuple[int, int], ...]
    pad_tokens: int = 0
    h: int = 4
    hk: int = 2
    d: int = 32
    block_size: int = 8
    extra_blocks: int = 3
    dtype: str = "float32"
    soft_cap: float | None = None
    window: int | None = None
    sinks: bool = False
    alibi: bool = False
    qq_bias: bool = False
    qq_rows: int = 0
    return_lse: bool = False

    def with_dtype(self, dtype: str) -> UnifiedCase:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        """The keyword arguments of a call (arrays and options)."""
        return make_unified_inputs(self, seed)


_MIX = ((1, 17), (5, 40), (1, 1), (12, 12), (0, 6), (1, 33))
_BASE = (
    UnifiedCase("mixed", seqs=_MIX, pad_tokens=3),
    UnifiedCase("decode-only", seqs=((1, 9), (1, 64), (1, 2), (1, 31)), h=8, hk=1),
    UnifiedCase("prefill-only", seqs=((20, 20), (7, 7)), block_size=4),
    UnifiedCase("long-prefill-among-decodes", seqs=((1, 30), (24, 50), (1, 8), (1, 16)), window=13),
    UnifiedCase("odd-sizes", seqs=((3, 13), (1, 7)), h=3, hk=3, d=24, block_size=5, pad_tokens=1),
    UnifiedCase("softcap", seqs=_MIX, soft_cap=4.0),
    UnifiedCase("window", seqs=((6, 40), (1, 25), (9, 9)), window=10),
    UnifiedCase("sinks", seqs=((4, 20), (1, 11), (0, 6)), sinks=True, pad_tokens=2),
    UnifiedCase("alibi", seqs=((4, 21), (1, 11), (6, 6)), h=6, hk=2, alibi=True),
    UnifiedCase("qq-bias", seqs=((4, 21), (1, 11), (6, 6), (3, 3)), qq_bias=True, qq_rows=2, pad_tokens=2),
    UnifiedCase("lse", seqs=((5, 29), (1, 17), (8, 8)), sinks=True, return_lse=True),
    UnifiedCase(
        "all-features",
        seqs=((5, 29), (1, 17), (8, 8)),
        h=6,
        hk=2,
        window=12,
        sinks=True,
        soft_cap=6.0,
        alibi=True,
        qq_bias=True,
        return_lse=True,
    ),
)
_DEFAULT = ("mixed", "decode-only", "long-prefill-among-decodes", "odd-sizes", "all-features")
CASES: tuple[UnifiedCase, ...] = (*(c for c in _BASE if c.name in _DEFAULT), _BASE[0].with_dtype("bfloat16"))
FULL_CASES: tuple[UnifiedCase, ...] = _BASE + tuple(c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE)

# Serving steps (vLLM's shapes): (decodes, decode context, prefill chunks, chunk tokens, prefill
# context, heads, kv heads, head dim, block size, dtype).
ARG_SPECS: dict[str, dict[str, Any]] = {
    "decode-64x8k": dict(
        decodes=64, decode_context=8192, chunks=0, chunk=0, chunk_context=0, h=32, hk=8, d=128, page_size=16,
        dtype="bfloat16",
    ),
    "mixed-60x4k-4x512": dict(
        decodes=60, decode_context=4096, chunks=4, chunk=512, chunk_context=8192, h=32, hk=8, d=128, page_size=16,
        dtype="bfloat16",
    ),
    "prefill-8x2048": dict(
        decodes=0, decode_context=0, chunks=8, chunk=2048, chunk_context=2048, h=32, hk=8, d=128, page_size=16,
        dtype="bfloat16",
    ),
}  # fmt: skip


def make_unified_inputs(case: UnifiedCase, seed: int = 0) -> dict[str, Any]:
    """Keyword arguments of a ``unified_attention`` call for ``case`` (NaN in every unused slot of
    the caches, out-of-range block numbers past each sequence's last block, random values in
    padding query rows)."""
    rng = np.random.default_rng(seed)
    dtype = jnp.dtype(case.dtype)
    bs = case.block_size
    q_lens = np.asarray([s[0] for s in case.seqs], np.int32)
    lens = np.asarray([s[1] for s in case.seqs], np.int32)
    n = len(lens)
    used = -(-lens // bs)
    max_blocks = max(1, int(used.max()))
    num_blocks = int(used.sum()) + case.extra_blocks
    order = rng.permutation(num_blocks)
    tables = np.full((n, max_blocks), num_blocks + 7, np.int32)
    live = np.zeros((num_blocks, bs), bool)
    start = 0
    for i in range(n):
        tables[i, : used[i]] = order[start : start + used[i]]
        start += used[i]
        for t in range(int(lens[i])):
            live[tables[i, t // bs], t % bs] = True
    kc, vc = (rng.standard_normal((num_blocks, bs, case.hk, case.d)).astype(np.float32) for _ in range(2))
    kc[~live] = np.nan
    vc[~live] = np.nan
    qsl = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    total = int(qsl[-1]) + case.pad_tokens
    kw: dict[str, Any] = {
        "queries": jnp.asarray(rng.standard_normal((max(total, 1), case.h, case.d)), dtype),
        "key_cache": jnp.asarray(kc, dtype),
        "value_cache": jnp.asarray(vc, dtype),
        "kv_lens": jnp.asarray(lens),
        "block_tables": jnp.asarray(tables),
        "query_start_loc": jnp.asarray(qsl),
        "logits_soft_cap": case.soft_cap,
        "sliding_window": case.window,
        "return_lse": case.return_lse,
    }
    if case.sinks:
        kw["softmax_aux"] = jnp.asarray(rng.standard_normal((case.h,)), dtype)
    if case.alibi:  # the usual geometric slopes 2^(-8 i / h), large enough to matter over the context
        kw["alibi_slopes"] = jnp.asarray(2.0 ** (-8.0 * np.arange(1, case.h + 1) / case.h), jnp.float32)
    if case.qq_bias:
        m = int(q_lens.max()) + case.qq_rows
        bias = rng.standard_normal((m, m)).astype(np.float32)
        bias[rng.random((m, m)) < 0.25] = -np.inf  # masked pairs (never the diagonal: a row keeps itself)
        np.fill_diagonal(bias, 0.0)
        kw["qq_bias"] = jnp.asarray(bias)
    return kw
