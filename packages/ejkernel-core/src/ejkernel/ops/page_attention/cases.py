"""Conformance cases of ``page_attention``: ragged ``context_lens`` over a shuffled page pool whose
unused pages and slots are NaN (a kernel that reads them fails), GQA, soft cap, windows, sinks,
value head dims, 4-D queries, empty contexts."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "PageAttentionCase", "cache_sized_writes", "make_page_inputs"]


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
    cache_layout: str = "blocks_tokens_heads"

    def with_dtype(self, dtype: str) -> PageAttentionCase:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        """The keyword arguments of a call (arrays and options)."""
        return make_page_inputs(self, seed)


_PAGE_BASE = (
    PageAttentionCase("ragged", context_lens=(1, 7, 16, 17, 53, 0)),
    PageAttentionCase("gqa4", context_lens=(33, 64, 5), h=8, hk=2, block_size=8),
    PageAttentionCase("gqa8-d128", context_lens=(100, 1, 129), h=8, hk=1, d=128, block_size=32),
    PageAttentionCase("softcap-4d", context_lens=(20, 45), soft_cap=4.0, query_4d=True),
    PageAttentionCase("window", context_lens=(70, 9, 40), window=12, block_size=8),
    PageAttentionCase("sinks", context_lens=(31, 0, 64), sinks=2, h=4, hk=2),
    PageAttentionCase("dv-differs", context_lens=(19, 40), d=64, dv=32, block_size=4),
    # Earlier releases' layout [num_blocks, num_kv_heads, block_size, dim], read in place.
    PageAttentionCase(
        "heads-major", context_lens=(25, 8, 64), h=8, hk=2, block_size=8, cache_layout="blocks_heads_tokens"
    ),
    PageAttentionCase(
        "heads-major-features",
        context_lens=(70, 0, 9, 33),
        h=6,
        hk=2,
        block_size=8,
        window=20,
        sinks=2,
        soft_cap=5.0,
        query_4d=True,
        cache_layout="blocks_heads_tokens",
    ),
    PageAttentionCase(
        "heads-major-dv", context_lens=(19, 40), d=64, dv=32, block_size=4, cache_layout="blocks_heads_tokens"
    ),
)
CASES: tuple[PageAttentionCase, ...] = _PAGE_BASE + tuple(
    c.with_dtype("bfloat16") for c in _PAGE_BASE if c.name in ("ragged", "gqa4", "sinks", "heads-major")
)
FULL_CASES: tuple[PageAttentionCase, ...] = _PAGE_BASE + tuple(
    c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _PAGE_BASE
)

# Realistic decode shapes: (batch, heads, kv heads, head dim, context, block size).
ARG_SPECS: dict[str, dict[str, Any]] = {
    "llama3-8b-decode-8k": dict(b=32, h=32, hk=8, d=128, context=8192, block_size=16),
    "llama3-70b-decode-32k": dict(b=8, h=64, hk=8, d=128, context=32768, block_size=16),
    "mistral-7b-decode-1k": dict(b=64, h=32, hk=8, d=128, context=1024, block_size=16),
}


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
        "cache_layout": case.cache_layout,
    }
    if case.cache_layout == "blocks_heads_tokens":  # earlier releases' layout
        kw["key_cache"], kw["value_cache"] = (jnp.swapaxes(kw[n], 1, 2) for n in ("key_cache", "value_cache"))
    if case.sinks:
        kw["softmax_aux"] = jnp.asarray(rng.standard_normal((case.h, case.sinks)), dtype)
    return kw


def cache_sized_writes(hlo: str, cache_shape: tuple[int, ...]) -> list[str]:
    """Instructions of a compiled module's text (``jit(f).lower(...).compile().as_text()``) that
    write a new array at least as large as a cache of ``cache_shape``: anything but parameters
    and views of them (bitcasts, tuple elements). With a cache much larger than the pages a call
    reads, each one is a copy or transpose of the cache."""
    size = int(np.prod(cache_shape))
    out = []
    for line in hlo.splitlines():
        m = re.match(r"\s*(?:ROOT )?%\S+ = \w+\[([\d,]*)\]\S* ([\w-]+)\(", line)
        if m is None or m.group(2) in ("parameter", "bitcast", "get-tuple-element"):
            continue
        dims = [int(n) for n in m.group(1).split(",") if n]
        if dims and int(np.prod(dims)) >= size:
            out.append(line.strip())
    return out
