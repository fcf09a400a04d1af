"""The Pallas TPU ``page_attention`` implementation: what it declares, its configs, its entry."""

from __future__ import annotations

from typing import ClassVar

import jax

from ejkernel.ops import DeviceInfo, KernelImpl, OpConfig, SizeRule
from ejkernel.ops.page_attention import PageAttentionArgs, PageAttentionConfig

from .._tiling import NUM_LANES, tpu_decline
from . import heuristics as H

# Row statistics are [rows, 128] vregs: they scale a tile by slicing (n < 128) or tiling
# (multiples of 128); other widths would need a relayout per step.
LANE_FRIENDLY = SizeRule(
    f"at most {NUM_LANES} or a multiple of {NUM_LANES}", lambda n: n <= NUM_LANES or n % NUM_LANES == 0
)


class PallasTpuPageAttention(KernelImpl):
    """Paged decode as a Mosaic TPU Pallas kernel (TPU v4 and newer): block-table walk with
    scalar prefetch, double-buffered page DMAs, GQA/MQA, soft cap, sliding window and sinks."""

    # 2: configs are PageAttentionConfig(tokens_per_block=pages × block_size) (was fwd_params).
    version = "2"
    device_requirement = "a TPU"
    # The query's dtype (the op requires the caches to share it). No float16: TPUs have no fast
    # float16 path.
    dtypes: ClassVar[tuple[str, ...]] = ("float32", "bfloat16")
    allowed_sizes: ClassVar[dict[str, SizeRule]] = {
        "block_size": LANE_FRIENDLY,
        "head_dim": LANE_FRIENDLY,
        "value_head_dim": LANE_FRIENDLY,
    }
    # Every feature of the op is supported (sinks, sliding window, soft cap, GQA, value head dim).
    unsupported: ClassVar[dict[str, str]] = {}
    # 32 tokens per step: several steps per sequence on the small conformance cases (block-table
    # walk, skipped steps before a window, prefetch of the next step and of the next sequence).
    test_configs: ClassVar[dict[str, OpConfig]] = {"step32tokens": PageAttentionConfig(tokens_per_block=32)}

    def available(self, device: DeviceInfo) -> str | None:
        return tpu_decline(device)

    def _shape(self, args: PageAttentionArgs) -> tuple:
        return (
            args.block_size,
            args.max_blocks,
            args.num_kv_heads,
            args.head_dim,
            args.value_head_dim,
            args.key_cache.dtype,
            args.heads_major,
        )

    def heuristic_cfg(self, args: PageAttentionArgs, device: DeviceInfo) -> PageAttentionConfig:
        return PageAttentionConfig(tokens_per_block=H.heuristic(*self._shape(args)), num_splits=1)

    def candidate_cfgs(self, args: PageAttentionArgs, device: DeviceInfo) -> list[PageAttentionConfig]:
        return [PageAttentionConfig(tokens_per_block=t, num_splits=1) for t in H.candidates(*self._shape(args))]

    def validate_cfg(self, cfg: PageAttentionConfig, args: PageAttentionArgs, device: DeviceInfo) -> None:
        block_size, _, *rest = self._shape(args)
        H.check(cfg.tokens_per_block, block_size, *rest)
        if cfg.num_splits not in (None, 1):
            raise ValueError(
                f"pallas page_attention does not split the context (num_splits must be 1, got {cfg.num_splits})"
            )

    def run(self, args: PageAttentionArgs, cfg: PageAttentionConfig) -> jax.Array:
        from ._kernel import page_attention

        assert cfg.tokens_per_block is not None
        pages = min(cfg.tokens_per_block // args.block_size, args.max_blocks)
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
            heads_major=args.heads_major,
        )
        return out[:, None] if args.query_had_seq_axis else out
