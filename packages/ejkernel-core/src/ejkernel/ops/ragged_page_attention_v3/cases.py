"""Conformance cases of ``ragged_page_attention_v3``: mixes of decodes and prefill chunks whose new
keys and values go into a shuffled, packed page pool. Every slot of the cache that no sequence
holds, and every slot this step writes, starts as NaN: a kernel that reads an unused slot, misses
a write or writes a padding row fails. Padded batches (``num_seqs`` below ``max_num_seqs``,
padding query rows), sequences with no query, odd sizes (head dims that are not a multiple of
128, so the cache's padding lanes matter), GQA, soft cap, windows, sinks."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..families.serving import packed_batch_case
from .kv_cache import pack_heads, ragged_page_attention_v3_cache_shape

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "RaggedPageV3Case", "make_ragged_page_v3_inputs"]


@dataclasses.dataclass(frozen=True)
class RaggedPageV3Case:
    """One case: ``seqs[i] = (q_len, kv_len)`` of each live sequence (``kv_len`` counts this step's
    ``q_len`` new tokens); ``max_num_seqs`` pads the batch, ``pad_tokens`` adds rows past the last
    sequence's. ``default_scale``: the op's default softmax_scale (1.0), else ``head_dim ** -0.5``."""

    name: str
    seqs: tuple[tuple[int, int], ...]
    max_num_seqs: int | None = None
    pad_tokens: int = 0
    h: int = 4
    hk: int = 2
    d: int = 32
    page_size: int = 8
    extra_pages: int = 3
    dtype: str = "float32"
    soft_cap: float | None = None
    window: int | tuple[int, int] | None = None
    sinks: int = 0
    default_scale: bool = False

    def with_dtype(self, dtype: str) -> RaggedPageV3Case:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        """The keyword arguments of a call (arrays and options)."""
        return make_ragged_page_v3_inputs(self, seed)


_MIX = ((1, 17), (5, 40), (1, 1), (12, 12), (1, 33))
_BASE = (
    RaggedPageV3Case("mixed", seqs=_MIX),
    RaggedPageV3Case("decode-only", seqs=((1, 9), (1, 64), (1, 2), (1, 31)), h=8, hk=1),
    RaggedPageV3Case("prefill-only", seqs=((20, 20), (7, 7)), page_size=4),
    RaggedPageV3Case("long-prefill-among-decodes", seqs=((1, 30), (24, 50), (1, 8), (1, 16))),
    RaggedPageV3Case("padded-batch", seqs=((3, 10), (0, 5), (2, 2)), max_num_seqs=6, pad_tokens=4),
    RaggedPageV3Case("odd-sizes", seqs=((3, 13), (1, 7)), h=3, hk=3, d=24, page_size=5),
    RaggedPageV3Case("head-dim-136", seqs=((2, 6), (1, 3)), h=2, hk=1, d=136, page_size=4),
    RaggedPageV3Case("scale-1", seqs=((4, 9), (1, 5)), default_scale=True),
    RaggedPageV3Case("softcap", seqs=_MIX, soft_cap=4.0),
    RaggedPageV3Case("window", seqs=((6, 40), (1, 25), (9, 9)), window=10),
    RaggedPageV3Case("sinks", seqs=((4, 20), (1, 11), (0, 6)), sinks=1, max_num_seqs=4, pad_tokens=2),
    RaggedPageV3Case("all-features", seqs=((5, 29), (1, 17), (8, 8)), h=6, hk=2, window=(12, 0), sinks=2, soft_cap=6.0),
)
# The default set leaves out what "all-features" also covers (soft cap, window), to stay quick.
CASES: tuple[RaggedPageV3Case, ...] = tuple(c for c in _BASE if c.name not in ("softcap", "window")) + tuple(
    c.with_dtype("bfloat16") for c in _BASE if c.name in ("mixed", "padded-batch")
)
FULL_CASES: tuple[RaggedPageV3Case, ...] = _BASE + tuple(
    c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE
)

# Serving steps: (decodes, decode context, prefill chunks, chunk tokens, prefill context, heads,
# kv heads, head dim, page size).
ARG_SPECS: dict[str, dict[str, Any]] = {
    "decode-64x8k": dict(
        decodes=64, decode_context=8192, chunks=0, chunk=0, chunk_context=0, h=32, hk=8, d=128, page_size=16
    ),
    "mixed-60x4k-4x512": dict(
        decodes=60, decode_context=4096, chunks=4, chunk=512, chunk_context=8192, h=32, hk=8, d=128, page_size=16
    ),
    "prefill-8x2048": dict(
        decodes=0, decode_context=0, chunks=8, chunk=2048, chunk_context=2048, h=32, hk=8, d=128, page_size=16
    ),
}


def make_ragged_page_v3_inputs(case: RaggedPageV3Case, seed: int = 0) -> dict[str, Any]:
    """Keyword arguments of a ``ragged_page_attention_v3`` call for ``case``: the cached tokens
    (those before each sequence's new ones) random, every other slot NaN; random keys, values and
    queries in every row, padding rows included. ``distribution`` marks a decode-only step as
    such (``decode_end == num_seqs``), any other as all mixed."""
    rng = np.random.default_rng(seed)
    dtype = jnp.dtype(case.dtype)
    n = len(case.seqs)
    ps = case.page_size
    q_lens, lens, tables, qsl, num_pages = packed_batch_case(case.seqs, case.max_num_seqs, ps, case.extra_pages, rng)
    k_old = rng.standard_normal((num_pages, ps, case.hk, case.d))
    v_old = rng.standard_normal((num_pages, ps, case.hk, case.d))
    cache = np.array(pack_heads(jnp.asarray(k_old, dtype), jnp.asarray(v_old, dtype), dtype))
    assert cache.shape == ragged_page_attention_v3_cache_shape(num_pages, ps, case.hk, case.d, dtype)
    cached = np.zeros((num_pages, ps), bool)
    for i in range(n):
        for t in range(int(lens[i] - q_lens[i])):
            cached[tables[i, t // ps], t % ps] = True
    cache[~cached] = np.nan
    total = max(int(qsl[n]) + case.pad_tokens, 1)
    decode_end = n if n and bool(np.all(q_lens == 1)) else 0
    kw: dict[str, Any] = {
        "queries": jnp.asarray(rng.standard_normal((total, case.h, case.d)), dtype),
        "keys": jnp.asarray(rng.standard_normal((total, case.hk, case.d)), dtype),
        "values": jnp.asarray(rng.standard_normal((total, case.hk, case.d)), dtype),
        "kv_cache": jnp.asarray(cache, dtype),
        "kv_lens": jnp.asarray(lens),
        "block_tables": jnp.asarray(tables.reshape(-1)),
        "query_start_loc": jnp.asarray(qsl),
        "distribution": jnp.asarray([decode_end, decode_end, n], jnp.int32),
        "logits_soft_cap": case.soft_cap,
        "sliding_window": case.window,
    }
    if not case.default_scale:
        kw["softmax_scale"] = case.d**-0.5
    if case.sinks:
        shape = (case.h,) if case.sinks == 1 else (case.h, case.sinks)
        kw["softmax_aux"] = jnp.asarray(rng.standard_normal(shape), dtype)
    return kw
