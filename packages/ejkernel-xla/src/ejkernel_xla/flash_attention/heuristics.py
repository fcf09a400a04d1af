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


# The largest float32 logits tile ``[b, h, bq, bk]`` the GPU heuristic takes with every key in
# one tile (the backward holds a few of them): memory stays linear in the sequence length.
GPU_WHOLE_KEYS_BYTES = 1 << 30


def _whole_keys_rows(args: AttentionArgs) -> int | None:
    """The most query rows (a power of two, 128 to 2048) whose logits against every key fit
    :data:`GPU_WHOLE_KEYS_BYTES`; ``None`` when 128 rows do not."""
    row_bytes = args.batch * args.num_heads * round_up(args.seq_k, 8) * 4
    for bq in (2048, 1024, 512, 256, 128):
        if bq * row_bytes <= GPU_WHOLE_KEYS_BYTES:
            return bq
    return None


def heuristic(args: AttentionArgs, platform: str) -> FlashAttentionConfig:
    masked = args.causal or args.sliding_window is not None or args.is_varlen
    if platform == "cpu":
        # On a 2-core CPU (h=8, d=64, s=4096, float32) 256×512 tiles beat 128×512, 256×1024
        # and 512×512 by 13-26 %; masked problems take 256×256 to skip more tiles.
        bq, bk = (256, 256) if masked else (256, 512)
    elif platform == "gpu" and not masked and (rows := _whole_keys_rows(args)) is not None:
        # Unmasked on a GPU, every key in one tile: no online-softmax rescaling between key
        # tiles (H200, b2 s8192 h16 d128 bf16: 1024 x 8192 tiles 8.9 / 25.0 ms forward /
        # forward+backward against 12.4 / 37.2 for 1024 x 1024; jax.nn's dense XLA form 7.2 / 23.5).
        # Masked calls keep short key tiles: they skip the tiles outside the mask.
        bq, bk = rows, round_up(args.seq_k, 8)
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
