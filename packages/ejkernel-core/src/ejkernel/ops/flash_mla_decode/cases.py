"""Conformance cases of ``flash_mla_decode``: ragged contexts (empty, one row, page boundaries,
odd lengths) over a shuffled page pool whose unused pages and slots are NaN (a kernel that reads
them fails), several query tokens (causal and not), odd head counts and widths, no rope lanes,
the log-sum-exp."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..families.serving import packed_batch_case

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "MLADecodeCase", "make_mla_decode_inputs"]


@dataclasses.dataclass(frozen=True)
class MLADecodeCase:
    """One paged latent decode case: sequence ``b`` has ``context_lens[b]`` latent rows of
    ``r + dr`` lanes (``kv_lora_rank = r``) and ``sq`` query tokens of ``h`` heads."""

    name: str
    context_lens: tuple[int, ...]
    sq: int = 1
    h: int = 8
    r: int = 64
    dr: int = 16
    page_size: int = 16
    extra_pages: int = 5
    dtype: str = "float32"
    causal: bool = True
    return_lse: bool = False
    scale: float | None = None

    def with_dtype(self, dtype: str) -> MLADecodeCase:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        """The keyword arguments of a call (arrays and options)."""
        return make_mla_decode_inputs(self, seed)


def make_mla_decode_inputs(case: MLADecodeCase, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    dt = jnp.dtype(case.dtype)
    d = case.r + case.dr
    seqs = [(case.sq, n) for n in case.context_lens]
    batch = packed_batch_case(seqs, None, case.page_size, case.extra_pages, rng)
    cache = rng.standard_normal((batch.num_pages, case.page_size, d)).astype(np.float32)
    used = np.zeros((batch.num_pages, case.page_size), bool)
    for i, n in enumerate(batch.lens):
        t = np.arange(int(n))
        used[batch.tables[i, t // case.page_size], t % case.page_size] = True
    cache[~used] = np.nan
    kw: dict[str, Any] = dict(
        query=jnp.asarray(rng.standard_normal((len(seqs), case.sq, case.h, d)), dt),
        latent_cache=jnp.asarray(cache, dt),
        context_lens=jnp.asarray(batch.lens),
        block_tables=jnp.asarray(batch.tables),
        kv_lora_rank=case.r,
        causal=case.causal,
        return_lse=case.return_lse,
    )
    if case.scale is not None:
        kw["softmax_scale"] = case.scale
    return kw


_BASE = (
    # Empty, one row, a page exactly, a page and one, odd lengths.
    MLADecodeCase("ragged", context_lens=(0, 1, 16, 17, 53, 100)),
    MLADecodeCase("mtp2-causal", context_lens=(2, 31, 64, 65), sq=2, h=4),
    MLADecodeCase("mtp3-short-contexts", context_lens=(0, 1, 2, 40), sq=3, h=4, page_size=8),
    MLADecodeCase("mtp4-not-causal", context_lens=(5, 33, 80), sq=4, h=2, causal=False),
    MLADecodeCase("odd-heads-widths", context_lens=(9, 70, 1), h=5, r=40, dr=24, page_size=4),
    MLADecodeCase("no-rope", context_lens=(37, 64, 12), h=16, r=32, dr=0, scale=0.2),
    MLADecodeCase("lse", context_lens=(3, 90, 48), sq=2, h=8, return_lse=True, page_size=32),
    MLADecodeCase("many-heads", context_lens=(129, 7), h=48, r=64, dr=32, page_size=64),
)
CASES: tuple[MLADecodeCase, ...] = _BASE + tuple(
    c.with_dtype("bfloat16") for c in _BASE if c.name in ("ragged", "mtp2-causal", "lse")
)
FULL_CASES: tuple[MLADecodeCase, ...] = _BASE + tuple(c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE)

# Realistic shapes: DeepSeek-V3 (128 heads, latent 512 + rope 64, 64-token pages) and V2-Lite.
ARG_SPECS: dict[str, dict[str, Any]] = {
    "deepseek-v3-decode-8k": dict(b=64, sq=1, h=128, r=512, dr=64, context=8192, page_size=64),
    "deepseek-v3-mtp2-4k": dict(b=32, sq=2, h=128, r=512, dr=64, context=4096, page_size=64),
    "deepseek-v2-lite-decode-4k": dict(b=32, sq=1, h=16, r=512, dr=64, context=4096, page_size=64),
}
