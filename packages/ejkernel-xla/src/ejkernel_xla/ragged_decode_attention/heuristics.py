"""KV block of the XLA ragged decode scan: pure functions of the shapes."""

from __future__ import annotations

from ejkernel.ops import FwdParams
from ejkernel.ops.ragged_decode_attention import RaggedDecodeAttentionArgs, RaggedDecodeAttentionConfig

# 1024 tokens per step: slices large enough to run near copy bandwidth, while one block of
# logits ([batch, heads, block]) stays a small fraction of a long context's.
BLOCK = 1024
CANDIDATE_BLOCKS = (256, 512, 1024, 2048, 4096)


def _config(block: int) -> RaggedDecodeAttentionConfig:
    return RaggedDecodeAttentionConfig(fwd_params=FwdParams(kv_blocksize=block), num_key_splits=1)


def heuristic(args: RaggedDecodeAttentionArgs) -> RaggedDecodeAttentionConfig:
    return _config(min(BLOCK, args.kv_len))


def candidates(args: RaggedDecodeAttentionArgs) -> list[RaggedDecodeAttentionConfig]:
    return [_config(n) for n in sorted({min(n, args.kv_len) for n in CANDIDATE_BLOCKS})]
