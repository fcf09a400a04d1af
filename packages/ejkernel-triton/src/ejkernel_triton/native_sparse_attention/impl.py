"""The Triton ``native_sparse_attention`` implementation: what it declares, its configs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import jax
import jax.numpy as jnp

from ejkernel.ops import DeviceInfo, KernelImpl, Need, OpConfig
from ejkernel.ops.native_sparse_attention import NativeSparseAttentionArgs, NativeSparseAttentionConfig

from .._launch import gpu_availability


def _block_k(args: NativeSparseAttentionArgs) -> int:
    """Key rows per step: the block rounded up to a power of two, 16 (``tl.dot``'s least) to 64."""
    return min(64, max(16, 1 << max(args.block_size - 1, 0).bit_length()))


class TritonNativeSparseAttention(KernelImpl):
    """NSA with the selected-blocks branch as a Triton kernel (one program per token and kv
    head, the group's query rows together) for NVIDIA GPUs; the compressed and sliding branches,
    the selection and the selected branch's backward are the blocked JAX of the core."""

    device_requirement = "an NVIDIA GPU"
    dtypes = ("float16", "bfloat16", "float32")
    max_sizes: ClassVar[Mapping[str, int]] = {"head_dim": 256, "value_head_dim": 256}
    # Key steps smaller than a block (several per block) and tiny query chunks.
    test_configs: ClassVar[Mapping[str, OpConfig]] = {
        "k16-q8": NativeSparseAttentionConfig(block_q=8, block_k=16, num_warps=2, num_stages=1)
    }

    def available(self, device: DeviceInfo) -> str | None:
        return gpu_availability(device, min_cc=None)

    def heuristic_cfg(self, args: NativeSparseAttentionArgs, device: DeviceInfo) -> NativeSparseAttentionConfig:
        from ejkernel.ops.native_sparse_attention.branches import default_chunk

        return NativeSparseAttentionConfig(
            block_q=default_chunk(args), block_k=_block_k(args), num_warps=4 if args.head_dim <= 64 else 8, num_stages=1
        )

    def validate_cfg(
        self, cfg: NativeSparseAttentionConfig, args: NativeSparseAttentionArgs, device: DeviceInfo
    ) -> None:
        if cfg.block_k is not None and cfg.block_k < 16:
            raise ValueError(f"TritonNativeSparseAttention: block_k must be >= 16 (tl.dot), got {cfg.block_k}")

    def resources(
        self, cfg: NativeSparseAttentionConfig, args: NativeSparseAttentionArgs, device: DeviceInfo
    ) -> list[Need]:
        """The selected-branch kernel's shared memory: a K and a V tile per pipeline stage (at
        least one: ``tl.dot`` reads them from shared memory), the group's query tile, barriers;
        a model, not yet checked against a compiled kernel."""

        def pow2(n: int) -> int:
            return max(16, 1 << max(n - 1, 0).bit_length())

        item = jnp.dtype(args.dtype).itemsize
        d, dv = pow2(args.head_dim), pow2(args.value_head_dim)
        block_k = int(cfg.block_k or _block_k(args))
        stages = max(1, int(cfg.num_stages or 1))
        smem = stages * block_k * (d + dv) * item + pow2(args.num_heads // args.num_kv_heads) * d * item + 1024
        return [Need("selected-blocks attention", smem, 32 * int(cfg.num_warps or 4))]

    def run(self, args: NativeSparseAttentionArgs, cfg: NativeSparseAttentionConfig) -> jax.Array:
        from ._call import native_sparse_attention

        return native_sparse_attention(args, cfg)
