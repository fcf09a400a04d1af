"""Tokens per step of the XLA paged latent decode: pure functions of the shapes."""

from __future__ import annotations

from ejkernel.ops.flash_mla_decode import FlashMLADecodeArgs, FlashMLADecodeConfig

# Tokens gathered per step summed over the batch: 128K latent rows (151 MB of bf16 576-wide rows,
# their logits 64 MB at 128 heads) keep the gathers near copy bandwidth and the step's temporaries
# a small fraction of an 8k-context batch of 64.
BATCH_TOKENS = 1 << 17
MAX_TOKENS = 2048
CANDIDATE_TOKENS = (256, 512, 1024, 2048, 4096)


def _pow2_at_most(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def heuristic(args: FlashMLADecodeArgs) -> FlashMLADecodeConfig:
    tokens = min(MAX_TOKENS, _pow2_at_most(BATCH_TOKENS // args.batch))
    return FlashMLADecodeConfig(block_n=max(tokens, _pow2_at_most(args.page_size)), num_splits=1)


def candidates(args: FlashMLADecodeArgs) -> list[FlashMLADecodeConfig]:
    base = heuristic(args)
    sizes = sorted({base.block_n, *(t for t in CANDIDATE_TOKENS if t >= args.page_size)})
    return [FlashMLADecodeConfig(block_n=t, num_splits=1) for t in sizes]
