"""Config of the XLA ``native_sparse_attention``: ``block_q``, the query tokens of one chunk of the
core's blocked branches (``branches.default_chunk``: the gathered keys of a chunk bounded in bytes)."""

from __future__ import annotations

from ejkernel.ops import DeviceInfo
from ejkernel.ops.native_sparse_attention import NativeSparseAttentionArgs, NativeSparseAttentionConfig
from ejkernel.ops.native_sparse_attention.branches import default_chunk


def chunk_size(a: NativeSparseAttentionArgs) -> int:
    return default_chunk(a)


def heuristic(a: NativeSparseAttentionArgs, device: DeviceInfo) -> NativeSparseAttentionConfig:
    return NativeSparseAttentionConfig(block_q=chunk_size(a))
