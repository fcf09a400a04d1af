"""Tiles of the Triton ``deepseek_attn`` kernel (``_kernel``): the paged latent decode's
(``flash_mla_decode.heuristics``), whose kernel has the same shape (a resident block of query
rows, gathered latent tiles in flight with their row indices, the probabilities' tile): the
heads of one token are the rows (16 to 64 per program), the token's selected keys the context,
one split (a token's top-k is short; the grid has ``batch × seq_q`` programs already)."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from ejkernel.ops import Need
from ejkernel.ops.deepseek_attn import DeepSeekAttnArgs, DeepSeekAttnConfig

from ..flash_mla_decode import heuristics as mla

Tiles = mla.Tiles


def slots(a: DeepSeekAttnArgs) -> int:
    """Key slots per token: ``index_selection``'s ``min(index_topk, seq_k) + 1``."""
    return min(a.index_topk, a.seq_k) + 1


def shape_of(a: DeepSeekAttnArgs) -> mla.Shape:
    return mla.Shape(
        batch=a.batch * a.seq_q,
        rows=a.num_heads,
        lora=a.kv_lora_rank,
        rope=a.rope_dim,
        max_context=slots(a),
        itemsize=jnp.dtype(a.dtype).itemsize,
    )


def needs(s: mla.Shape, t: Tiles, cc: tuple[int, int] | None) -> list[Need]:
    return [Need("deepseek sparse attention", mla.smem(s, t, cc), 32 * t.num_warps)]


def heuristic(s: mla.Shape, cc: tuple[int, int] | None) -> Tiles:
    return dataclasses.replace(mla.heuristic(s, cc), num_splits=1)


def candidates(s: mla.Shape, cc: tuple[int, int] | None) -> list[Tiles]:
    out = dict.fromkeys(dataclasses.replace(t, num_splits=1) for t in mla.candidates(s, cc))
    return list(out)


def tiles_of(cfg: DeepSeekAttnConfig) -> Tiles:
    assert cfg.block_q and cfg.block_k and cfg.num_warps and cfg.num_stages
    return Tiles(cfg.block_q, cfg.block_k, 1, cfg.num_warps, cfg.num_stages)


def config_of(t: Tiles) -> DeepSeekAttnConfig:
    return DeepSeekAttnConfig(block_q=t.block_h, block_k=t.block_n, num_warps=t.num_warps, num_stages=t.num_stages)


def check(t: Tiles) -> None:
    """Raise ``ValueError`` for tiles the kernel cannot run."""
    for name, n in (("block_q", t.block_h), ("block_k", t.block_n)):
        if n < 16 or n & (n - 1):
            raise ValueError(f"triton deepseek_attn: {name} must be a power of two >= 16 (tl.dot), got {n}")
    if t.num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"triton deepseek_attn: num_warps must be 1, 2, 4, 8 or 16, got {t.num_warps}")
    if not 1 <= t.num_stages <= 8:
        raise ValueError(f"triton deepseek_attn: num_stages must be in [1, 8], got {t.num_stages}")
