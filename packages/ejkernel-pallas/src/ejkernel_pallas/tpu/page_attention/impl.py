"""The Pallas TPU ``page_attention`` implementation: what it accepts, its configs, its entry."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ejkernel.modules.page_attention import PageAttentionArgs, PageAttentionConfig
from ejkernel.ops import DeviceInfo, KernelImpl

from .._tiling import NUM_LANES, tpu_decline
from . import heuristics as H

_DTYPES = ("float32", "bfloat16")


def _lane_friendly(n: int) -> bool:
    # Row statistics are [rows, 128] vregs: they scale a tile by slicing (n < 128) or tiling
    # (multiples of 128); other widths would need a relayout per step.
    return n <= NUM_LANES or n % NUM_LANES == 0


class PallasTpuPageAttention(KernelImpl):
    """Paged decode as a Mosaic TPU Pallas kernel (TPU v4 and newer): block-table walk with
    scalar prefetch, double-buffered page DMAs, GQA/MQA, soft cap, sliding window and sinks."""

    version = "1"
    device_requirement = "a TPU"

    def decline(self, args: PageAttentionArgs, device: DeviceInfo) -> str | None:
        reason = tpu_decline(device)
        if reason is not None:
            return reason
        q_dtype, kv_dtype = jnp.dtype(args.query.dtype).name, jnp.dtype(args.key_cache.dtype).name
        if kv_dtype not in _DTYPES:
            return f"supports {' and '.join(_DTYPES)} caches, got {kv_dtype}"
        if q_dtype != kv_dtype:
            return f"the query and the caches must share a dtype, got {q_dtype} and {kv_dtype}"
        for name, n in (
            ("block_size", args.block_size),
            ("head_dim", args.head_dim),
            ("value head_dim", args.value_head_dim),
        ):
            if not _lane_friendly(n):
                return f"{name} must be at most {NUM_LANES} or a multiple of {NUM_LANES}, got {n}"
        return None

    def _shape(self, args: PageAttentionArgs) -> tuple:
        return (
            args.block_size,
            args.max_blocks,
            args.num_kv_heads,
            args.head_dim,
            args.value_head_dim,
            args.key_cache.dtype,
        )

    def heuristic_cfg(self, args: PageAttentionArgs, device: DeviceInfo) -> PageAttentionConfig:
        return PageAttentionConfig(fwd_params=H.heuristic(*self._shape(args)), num_splits=1)

    def candidate_cfgs(self, args: PageAttentionArgs, device: DeviceInfo) -> list[PageAttentionConfig]:
        return [PageAttentionConfig(fwd_params=p, num_splits=1) for p in H.candidates(*self._shape(args))]

    def validate_cfg(self, cfg: PageAttentionConfig, args: PageAttentionArgs, device: DeviceInfo) -> None:
        H.check(
            cfg.fwd_params, args.block_size, args.num_kv_heads, args.head_dim, args.value_head_dim, args.key_cache.dtype
        )
        if cfg.num_splits not in (None, 1):
            raise ValueError(
                f"pallas page_attention does not split the context (num_splits must be 1, got {cfg.num_splits})"
            )

    def run(self, args: PageAttentionArgs, cfg: PageAttentionConfig) -> jax.Array:
        from ._kernel import page_attention

        assert cfg.fwd_params is not None and cfg.fwd_params.kv_blocksize is not None
        pages = min(cfg.fwd_params.kv_blocksize // args.block_size, args.max_blocks)
        out = page_attention(
            args.query,
            args.key_cache,
            args.value_cache,
            args.context_lens,
            args.block_tables,
            args.softmax_aux,
            scale=float(args.softmax_scale),
            soft_cap=args.logits_soft_cap,
            window_left=None if args.sliding_window is None else args.sliding_window[0],
            pages_per_step=max(1, pages),
        )
        return out[:, None] if args.query_had_seq_axis else out
