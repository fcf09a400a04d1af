"""Conformance cases of ``prefill_page_attention``: a chunk in the middle of a context and a chunk
that is the whole context, over pages in random order whose unused pages and slots are NaN (a
kernel that reads them fails) and whose unused table entries are out of range; odd sizes, GQA,
soft cap, windows."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "PrefillPageCase", "make_prefill_page_inputs"]


@dataclasses.dataclass(frozen=True)
class PrefillPageCase:
    """One case: the last ``chunk`` tokens of a ``context``; ``spare_pages`` more table entries
    than the context uses (out of range), ``extra_pages`` more pages in the cache than any table
    names (NaN)."""

    name: str
    chunk: int
    context: int
    h: int = 4
    hk: int = 2
    d: int = 32
    page_size: int = 8
    spare_pages: int = 2
    extra_pages: int = 3
    dtype: str = "float32"
    soft_cap: float | None = None
    window: int | None = None

    def with_dtype(self, dtype: str) -> PrefillPageCase:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        """The keyword arguments of a call (arrays and options)."""
        return make_prefill_page_inputs(self, seed)


_BASE = (
    PrefillPageCase("chunk-mid-context", chunk=12, context=45),
    PrefillPageCase("whole-context", chunk=20, context=20, page_size=4),
    PrefillPageCase("gqa-window-softcap", chunk=17, context=60, h=8, hk=2, window=9, soft_cap=5.0),
    PrefillPageCase("odd-sizes", chunk=7, context=23, h=3, hk=3, d=24, page_size=5, spare_pages=0),
    PrefillPageCase("mqa-one-token", chunk=1, context=30, h=4, hk=1),
    PrefillPageCase("softcap", chunk=9, context=33, soft_cap=3.0),
    PrefillPageCase("window-wider-than-context", chunk=10, context=26, window=64),
)
_DEFAULT = ("chunk-mid-context", "whole-context", "gqa-window-softcap", "odd-sizes")
CASES: tuple[PrefillPageCase, ...] = (*(c for c in _BASE if c.name in _DEFAULT), _BASE[0].with_dtype("bfloat16"))
FULL_CASES: tuple[PrefillPageCase, ...] = _BASE + tuple(
    c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE
)

# Prefill chunks: (chunk tokens, context, heads, kv heads, head dim, page size, dtype).
ARG_SPECS: dict[str, dict[str, Any]] = {
    "llama3-8b-chunk-512@8k": dict(chunk=512, context=8192, h=32, hk=8, d=128, page_size=16, dtype="bfloat16"),
    "llama3-8b-prefill-2048": dict(chunk=2048, context=2048, h=32, hk=8, d=128, page_size=16, dtype="bfloat16"),
    "llama3-70b-chunk-1024@32k": dict(chunk=1024, context=32768, h=64, hk=8, d=128, page_size=16, dtype="bfloat16"),
}


def make_prefill_page_inputs(case: PrefillPageCase, seed: int = 0) -> dict[str, Any]:
    """Keyword arguments of a ``prefill_page_attention`` call for ``case`` (NaN in every unused
    slot of the caches, out-of-range page numbers past the context's last page)."""
    rng = np.random.default_rng(seed)
    dtype = jnp.dtype(case.dtype)
    ps = case.page_size
    used = -(-case.context // ps)
    total = used + case.extra_pages
    pages = rng.permutation(total)[:used]
    table = np.concatenate([pages, total + np.arange(case.spare_pages)]).astype(np.int32)
    kc, vc = (rng.standard_normal((case.hk, total, ps, case.d)).astype(np.float32) for _ in range(2))
    live = np.zeros((total, ps), bool)
    for t in range(case.context):
        live[pages[t // ps], t % ps] = True
    kc[:, ~live] = np.nan
    vc[:, ~live] = np.nan
    return {
        "query": jnp.asarray(rng.standard_normal((case.chunk, case.h, case.d)), dtype),
        "key_cache": jnp.asarray(kc, dtype),
        "value_cache": jnp.asarray(vc, dtype),
        "context_len": jnp.array([case.context], jnp.int32),
        "page_indices": jnp.asarray(table),
        "attn_logits_soft_cap": case.soft_cap,
        "sliding_window": case.window,
    }
