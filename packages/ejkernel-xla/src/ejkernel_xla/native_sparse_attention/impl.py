"""The XLA ``native_sparse_attention`` implementation: the core's blocked branches
(``ejkernel.ops.native_sparse_attention.branches``), differentiated by JAX."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import jax

from ejkernel.ops import DeviceInfo, KernelImpl, OpConfig
from ejkernel.ops.native_sparse_attention import NativeSparseAttentionArgs, NativeSparseAttentionConfig
from ejkernel.ops.native_sparse_attention.branches import sparse_attention

from . import heuristics as H


class XlaNativeSparseAttention(KernelImpl):
    """NSA in plain JAX, any device: token chunks gather their selected blocks and window (never a
    ``[seq, seq]`` array), recomputed chunk by chunk in the backward pass."""

    # Chunks much shorter than the sequences: many chunks, a ragged last one, chunks across
    # packed sequences' boundaries.
    test_configs: ClassVar[Mapping[str, OpConfig]] = {"chunk8": NativeSparseAttentionConfig(block_q=8)}

    def heuristic_cfg(self, args: NativeSparseAttentionArgs, device: DeviceInfo) -> NativeSparseAttentionConfig:
        return H.heuristic(args, device)

    def candidate_cfgs(self, args: NativeSparseAttentionArgs, device: DeviceInfo) -> list[NativeSparseAttentionConfig]:
        best = H.chunk_size(args)
        return [NativeSparseAttentionConfig(block_q=c) for c in sorted({best, max(16, best // 4)}, reverse=True)]

    def run(self, args: NativeSparseAttentionArgs, cfg: NativeSparseAttentionConfig) -> jax.Array:
        assert cfg.block_q
        return sparse_attention(args, cfg.block_q)
