"""Conformance cases of ``mean_pooling``: dense, masked (fully masked rows, one-token rows, the
positional mask form), packed with empty and one-token sequences and trailing padding, one
``[seq, hidden]`` sequence; odd hidden sizes. Tokens that do not count are NaN (a kernel that
reads them fails)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "MeanPoolingCase"]


@dataclasses.dataclass(frozen=True)
class MeanPoolingCase:
    """One case. ``lengths``: packed sequence lengths (``cu_seqlens`` form) followed by ``pad``
    padding rows; otherwise dense ``[batch, seq, hidden]`` (``batch=0``: one ``[seq, hidden]``
    sequence), masked when ``mask`` is set (``"positional"``: passed as the second argument)."""

    name: str
    batch: int = 2
    seq: int = 16
    hidden: int = 64
    lengths: tuple[int, ...] | None = None
    pad: int = 0
    mask: str | None = None
    dtype: str = "float32"

    def with_dtype(self, dtype: str) -> MeanPoolingCase:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        rng = np.random.default_rng(seed)
        dtype = jnp.dtype(self.dtype)
        if self.lengths is not None:
            tokens = sum(self.lengths) + self.pad
            x = rng.standard_normal((tokens, self.hidden)).astype(np.float32)
            cu = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int32)
            kw: dict[str, Any] = {"cu_seqlens": jnp.asarray(cu)}
            valid = np.zeros(tokens, bool)
            valid[: cu[-1]] = True
            if self.mask:
                m = rng.random(tokens) < 0.7
                m[cu[1] : cu[2]] = False  # the second sequence fully masked: zeros
                kw["attention_mask"] = jnp.asarray(m)
                valid &= m
        else:
            shape = (self.batch, self.seq) if self.batch else (self.seq,)
            x = rng.standard_normal((*shape, self.hidden)).astype(np.float32)
            valid = np.ones(shape, bool)
            kw = {}
            if self.mask:
                m = rng.random(shape) < 0.6
                if self.batch >= 3:
                    m[0] = False  # fully masked: zeros
                    m[1] = False
                    m[1, -1] = True  # one token (the last: left padding)
                valid = m
                kw["cu_seqlens" if self.mask == "positional" else "attention_mask"] = jnp.asarray(m)
        x[~valid] = np.nan  # tokens that do not count are never read
        return {"x": jnp.asarray(x, dtype), **kw}


_BASE = (
    MeanPoolingCase("packed", lengths=(5, 0, 1, 37, 12), pad=3, hidden=64),
    MeanPoolingCase("dense", batch=3, seq=17, hidden=40),
    MeanPoolingCase("masked", batch=4, seq=19, hidden=33, mask="keyword"),
    MeanPoolingCase("masked-positional", batch=3, seq=6, hidden=130, mask="positional"),
    MeanPoolingCase("packed-masked", lengths=(9, 1, 0, 70), pad=2, hidden=48, mask="keyword"),
    MeanPoolingCase("one-sequence", batch=0, seq=29, hidden=24),
    MeanPoolingCase("len1", batch=5, seq=1, hidden=16),
)
CASES: tuple[MeanPoolingCase, ...] = _BASE + tuple(
    c.with_dtype("bfloat16") for c in _BASE if c.name in ("dense", "packed-masked")
)
FULL_CASES: tuple[MeanPoolingCase, ...] = _BASE + tuple(
    c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE
)

# Realistic shapes: sentence-embedding batches and packed pretraining rows.
ARG_SPECS: dict[str, dict[str, Any]] = {
    "bert-base-batch": dict(batch=64, seq=512, hidden=768),
    "e5-large-packed": dict(tokens=65536, hidden=1024, seqs=256),
    "llm-embed-packed": dict(tokens=262144, hidden=4096, seqs=128),
}
