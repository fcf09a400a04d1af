"""The CUDA ``page_attention``: what it declares, its configs, and its entry point."""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp

from ejkernel.ops import DeviceInfo, KernelImpl, Need, OpConfig, profile_for
from ejkernel.ops.page_attention import PageAttentionArgs, PageAttentionConfig

from .. import _ffi
from . import heuristics as H
from ._call import TARGET, paged_decode

__all__ = ["LANE_VARIANT", "TARGET", "CudaPageAttention", "cuda_available", "smem_limits"]

# Pass 1's path for bf16/fp16 caches (0: tensor cores where the head dim allows; 1: FMAs, the
# float32 path). Read when a call is traced, so a benchmark can compare them.
LANE_VARIANT = 0


def _window_left(args: PageAttentionArgs) -> int | None:
    return None if args.sliding_window is None else int(args.sliding_window[0])


def _itemsize(args: PageAttentionArgs) -> int:
    return jnp.dtype(args.key_cache.dtype).itemsize


def cuda_available(device: DeviceInfo) -> str | None:
    """Why the paged decode cannot run on ``device`` (``None``: it can)."""
    if device.compute_capability is None:
        return f"needs an NVIDIA GPU; this call runs on {device.kind}"
    if device.compute_capability < (8, 0):
        return f"needs compute capability >= 8.0, this GPU has {device.compute_capability}"
    return _ffi.availability()


def smem_limits(device: DeviceInfo) -> tuple[int, int]:
    """Shared memory per SM and per block of ``device`` (Hopper's where it is no known GPU)."""
    profile = profile_for(device)
    if profile is None:
        return H.SMEM_PER_SM, H.SMEM_LIMIT
    return profile.shared_memory_per_sm, profile.shared_memory_per_block


def _context(args: PageAttentionArgs) -> int:
    return H.effective_context(args.max_blocks * args.block_size, _window_left(args))


class CudaPageAttention(KernelImpl):
    """Paged decode in CUDA C++ (split-K over the context, GQA groups per CTA as tensor-core tile rows,
    cp.async K/V ring)."""

    # 3: configs are PageAttentionConfig(tokens_per_block=partition, num_stages=...) (was fwd_params).
    version = "3"
    device_requirement = "an NVIDIA GPU"
    # The query's dtype (the op requires the caches to share it).
    dtypes = ("float32", "bfloat16", "float16")
    allowed_sizes: ClassVar[dict[str, tuple[int, ...]]] = {"head_dim": H.HEAD_DIMS}
    unsupported: ClassVar[dict[str, str]] = {"value_head_dim": "needs value_cache head_dim equal to key_cache's"}
    # 32-token partitions: every case with a context above 32 goes through the split-K merge.
    test_configs: ClassVar[dict[str, OpConfig]] = {
        "partition32": PageAttentionConfig(tokens_per_block=32),
        "splits3": PageAttentionConfig(num_splits=3),
    }

    def available(self, device: DeviceInfo) -> str | None:
        return cuda_available(device)

    def heuristic_cfg(self, args: PageAttentionArgs, device: DeviceInfo) -> PageAttentionConfig:
        ext, _ = _ffi._load()
        sms = ext.sm_count() if ext is not None else 132  # type: ignore[attr-defined]
        p = H.heuristic_partition(
            args.batch, args.num_kv_heads, args.num_groups, args.head_dim, _context(args), args.block_size, sms,
            _itemsize(args),
        )  # fmt: skip
        stages = H.heuristic_stages(
            args.num_groups, args.head_dim, p, args.block_size, _itemsize(args), LANE_VARIANT, *smem_limits(device)
        )
        return PageAttentionConfig(tokens_per_block=p, num_stages=stages)

    def candidate_cfgs(self, args: PageAttentionArgs, device: DeviceInfo) -> list[PageAttentionConfig]:
        return [
            PageAttentionConfig(tokens_per_block=p, num_stages=s)
            for p, s in H.candidate_configs(
                args.num_groups, args.head_dim, _context(args), args.block_size, _itemsize(args)
            )
        ]

    def validate_cfg(self, cfg: PageAttentionConfig, args: PageAttentionArgs, device: DeviceInfo) -> None:
        p = self._partition(cfg, args)
        stages = self._stages(cfg, args, p)
        if not H.MIN_STAGES <= stages <= H.MAX_STAGES:
            raise ValueError(
                f"cuda page_attention: num_stages must be in [{H.MIN_STAGES}, {H.MAX_STAGES}], got {stages}"
            )
        smem = H.smem_bytes(args.num_groups, args.head_dim, p, args.block_size, stages, _itemsize(args), LANE_VARIANT)
        if smem > H.SMEM_LIMIT:
            raise ValueError(
                f"cuda page_attention: a partition of {p} tokens with {stages} stages needs {smem} B of shared "
                f"memory (at most {H.SMEM_LIMIT}, what the FFI handler accepts)"
            )

    def resources(self, cfg: PageAttentionConfig, args: PageAttentionArgs, device: DeviceInfo) -> list[Need]:
        """Pass 1's CTA (its dynamic shared memory, ``heuristics.smem_bytes``); the merge pass
        holds one row per head in registers."""
        p = self._partition(cfg, args)
        stages = self._stages(cfg, args, p)
        smem = H.smem_bytes(args.num_groups, args.head_dim, p, args.block_size, stages, _itemsize(args), LANE_VARIANT)
        return [Need("paged decode pass 1", smem, H.THREADS)]

    @staticmethod
    def _partition(cfg: PageAttentionConfig, args: PageAttentionArgs) -> int:
        if cfg.num_splits is not None:  # an explicit split count sets the partition length
            return -(-_context(args) // cfg.num_splits)
        if cfg.tokens_per_block is None:
            raise ValueError("cuda page_attention needs tokens_per_block (tokens per partition) or num_splits")
        return int(cfg.tokens_per_block)

    @staticmethod
    def _stages(cfg: PageAttentionConfig, args: PageAttentionArgs, partition: int) -> int:
        if cfg.num_stages is not None:
            return int(cfg.num_stages)
        return H.heuristic_stages(
            args.num_groups, args.head_dim, partition, args.block_size, _itemsize(args), LANE_VARIANT
        )

    def run(self, args: PageAttentionArgs, cfg: PageAttentionConfig) -> jax.Array:
        partition = self._partition(cfg, args)
        return paged_decode(
            args,
            partition=partition,
            splits=H.num_splits(_context(args), partition),
            stages=self._stages(cfg, args, partition),
            variant=LANE_VARIANT,
            window_left=_window_left(args),
        )
