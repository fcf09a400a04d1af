"""Conformance cases of ``ragged_page_attention_v2``: mixes of decodes and prefill chunks over a
shuffled page pool whose unused pages and slots are NaN (a kernel that reads them fails), padded
batches (``num_seqs`` below ``max_num_seqs``, padding query rows), sequences with no query, odd
sizes, GQA, soft cap, windows, sinks."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..families.serving import packed_batch_case

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "RaggedPageCase", "make_ragged_page_inputs"]


@dataclasses.dataclass(frozen=True)
class RaggedPageCase:
    """One case: ``seqs[i] = (q_len, context_len)`` of each live sequence; ``max_num_seqs`` pads
    the batch, ``pad_tokens`` adds query rows past the last sequence's."""

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
    num_seqs_shape: tuple[int, ...] = ()

    def with_dtype(self, dtype: str) -> RaggedPageCase:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        """The keyword arguments of a call (arrays and options)."""
        return make_ragged_page_inputs(self, seed)


_MIX = ((1, 17), (5, 40), (1, 1), (12, 12), (1, 33))
_BASE = (
    RaggedPageCase("mixed", seqs=_MIX),
    RaggedPageCase("decode-only", seqs=((1, 9), (1, 64), (1, 2), (1, 31)), h=8, hk=1),
    RaggedPageCase("prefill-only", seqs=((20, 20), (7, 7)), page_size=4),
    RaggedPageCase("long-prefill-among-decodes", seqs=((1, 30), (24, 50), (1, 8), (1, 16))),
    RaggedPageCase("padded-batch", seqs=((3, 10), (0, 5), (2, 2)), max_num_seqs=6, pad_tokens=4, num_seqs_shape=(1,)),
    RaggedPageCase("odd-sizes", seqs=((3, 13), (1, 7)), h=3, hk=3, d=24, page_size=5),
    RaggedPageCase("softcap", seqs=_MIX, soft_cap=4.0),
    RaggedPageCase("window", seqs=((6, 40), (1, 25), (9, 9)), window=10),
    RaggedPageCase("sinks", seqs=((4, 20), (1, 11), (0, 6)), sinks=2, max_num_seqs=4, pad_tokens=2),
    RaggedPageCase("all-features", seqs=((5, 29), (1, 17), (8, 8)), h=6, hk=2, window=(12, 0), sinks=1, soft_cap=6.0),
)
CASES: tuple[RaggedPageCase, ...] = _BASE + tuple(
    c.with_dtype("bfloat16") for c in _BASE if c.name in ("mixed", "padded-batch", "sinks")
)
FULL_CASES: tuple[RaggedPageCase, ...] = _BASE + tuple(
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


def make_ragged_page_inputs(case: RaggedPageCase, seed: int = 0) -> dict[str, Any]:
    """Keyword arguments of a ``ragged_page_attention_v2`` call for ``case`` (NaN in every unused
    slot of the cache; random values in padding query rows)."""
    rng = np.random.default_rng(seed)
    dtype = jnp.dtype(case.dtype)
    n = len(case.seqs)
    ps = case.page_size
    _, lens, tables, qsl, num_pages = packed_batch_case(case.seqs, case.max_num_seqs, ps, case.extra_pages, rng)
    kv = rng.standard_normal((num_pages, ps, 2 * case.hk, case.d)).astype(np.float32)
    used = np.zeros((num_pages, ps), bool)
    for i in range(n):
        for t in range(int(lens[i])):
            used[tables[i, t // ps], t % ps] = True
    kv[~used] = np.nan
    total = int(qsl[n]) + case.pad_tokens
    kw: dict[str, Any] = {
        "queries": jnp.asarray(rng.standard_normal((max(total, 1), case.h, case.d)), dtype),
        "kv_pages": jnp.asarray(kv, dtype),
        "context_lens": jnp.asarray(lens),
        "block_tables": jnp.asarray(tables),
        "query_start_loc": jnp.asarray(qsl),
        "num_seqs": jnp.full(case.num_seqs_shape, n, jnp.int32),
        "logits_soft_cap": case.soft_cap,
        "sliding_window": case.window,
    }
    if case.sinks:
        kw["softmax_aux"] = jnp.asarray(rng.standard_normal((case.h, case.sinks)), dtype)
    return kw
