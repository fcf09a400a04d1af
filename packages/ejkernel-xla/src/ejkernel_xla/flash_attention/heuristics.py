"""Tile sizes of the XLA flash attention: pure functions of the shapes and the device kind.

Tile sizes are chunk lengths of XLA loops, not on-chip tiles: larger ones amortize each loop
iteration's fixed cost (several fused kernels on accelerators, thread-pool dispatch on CPU),
smaller ones skip more work under causal/window masks and keep the ``[bq, bk]`` logits tile small.
"""

from __future__ import annotations

from ejkernel.ops import BwdParams, FwdParams
from ejkernel.ops.families.attention import AttentionArgs
from ejkernel.ops.flash_attention import FlashAttentionConfig

from .._tiles import round_up

Q_SIZES = (128, 256, 512, 1024)
K_SIZES = (256, 512, 1024, 2048)


def _config(bq: int, bk: int) -> FlashAttentionConfig:
    return FlashAttentionConfig(
        fwd_params=FwdParams(q_blocksize=bq, kv_blocksize=bk), bwd_params=BwdParams(q_blocksize=bq, kv_blocksize=bk)
    )


def heuristic(args: AttentionArgs, platform: str) -> FlashAttentionConfig:
    masked = args.causal or args.sliding_window is not None or args.is_varlen
    if platform == "cpu":
        # On a 2-core CPU (h=8, d=64, s=4096, float32) 256×512 tiles beat 128×512, 256×1024
        # and 512×512 by 13-26 %; masked problems take 256×256 to skip more tiles.
        bq, bk = (256, 256) if masked else (256, 512)
    else:
        # Accelerators: fewer, larger loop iterations (each launches several kernels).
        bq, bk = (512, 1024) if masked else (1024, 1024)
    return _config(bq, bk)


def candidates(args: AttentionArgs) -> list[FlashAttentionConfig]:
    """Every (q, kv) pair of tile sizes, without those that tile the sequence like a smaller one."""
    seen: set[tuple[int, int]] = set()
    out = []
    for bq in Q_SIZES:
        for bk in K_SIZES:
            eff = (min(bq, round_up(args.seq_q, 8)), min(bk, round_up(args.seq_k, 8)))
            if eff in seen:  # larger than the sequence: the same tiles as a smaller candidate
                continue
            seen.add(eff)
            out.append(_config(bq, bk))
    return out
