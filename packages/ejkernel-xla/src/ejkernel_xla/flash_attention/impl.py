"""The XLA ``flash_attention`` implementation: heuristics, autotune space, entry point."""

from __future__ import annotations

from ejkernel.modules.attention import AttentionArgs
from ejkernel.modules.flash_attention import FlashAttentionConfig
from ejkernel.ops import BwdParams, DeviceInfo, FwdParams, KernelImpl

from .._tiles import round_up
from ._kernel import backward_from_lse, flash_attention, forward_with_lse

# Tile sizes are chunk lengths of XLA loops, not on-chip tiles: larger ones amortize each loop
# iteration's fixed cost (several fused kernels on accelerators, thread-pool dispatch on CPU),
# smaller ones skip more work under causal/window masks and keep the [bq, bk] logits tile small.
_Q_SIZES = (128, 256, 512, 1024)
_K_SIZES = (256, 512, 1024, 2048)


def _effective(args: AttentionArgs, bq: int, bk: int) -> tuple[int, int]:
    return min(bq, round_up(args.seq_q, 8)), min(bk, round_up(args.seq_k, 8))


class XlaFlashAttention(KernelImpl):
    """Blockwise FlashAttention-2 in plain JAX: every feature, any device.

    It provides the log-sum-exp protocol (``supports_lse``; ring attention's inner kernel) and
    honours ``AttentionArgs.position_offset`` (through ``key_bounds``).
    """

    version = "1"
    supports_lse = True

    def heuristic_cfg(self, args: AttentionArgs, device: DeviceInfo) -> FlashAttentionConfig:
        masked = args.causal or args.sliding_window is not None or args.is_varlen
        if device.platform == "cpu":
            # On CPU (2 cores, h=8, d=64, s=4096, float32) 256×512 tiles ran fastest (170 ms,
            # against 195-230 ms for 128×512, 256×1024 and 512×512); masked problems take
            # 256×256 to skip more tiles.
            bq, bk = (256, 256) if masked else (256, 512)
        else:
            # Accelerators: fewer, larger loop iterations (each launches several kernels).
            bq, bk = (512, 1024) if masked else (1024, 1024)
        return FlashAttentionConfig(
            fwd_params=FwdParams(q_blocksize=bq, kv_blocksize=bk),
            bwd_params=BwdParams(q_blocksize=bq, kv_blocksize=bk),
        )

    def candidate_cfgs(self, args: AttentionArgs, device: DeviceInfo) -> list[FlashAttentionConfig]:
        seen: set[tuple[int, int]] = set()
        out = []
        for bq in _Q_SIZES:
            for bk in _K_SIZES:
                eff = _effective(args, bq, bk)
                if eff in seen:  # larger than the sequence: the same tiles as a smaller candidate
                    continue
                seen.add(eff)
                out.append(
                    FlashAttentionConfig(
                        fwd_params=FwdParams(q_blocksize=bq, kv_blocksize=bk),
                        bwd_params=BwdParams(q_blocksize=bq, kv_blocksize=bk),
                    )
                )
        return out

    def validate_cfg(self, cfg: FlashAttentionConfig, args: AttentionArgs, device: DeviceInfo) -> None:
        for name, params in (("fwd_params", cfg.fwd_params), ("bwd_params", cfg.bwd_params)):
            if params is None or params.q_blocksize is None or params.kv_blocksize is None:
                raise ValueError(f"xla flash_attention needs {name} with q_blocksize and kv_blocksize")

    def run(self, args: AttentionArgs, cfg: FlashAttentionConfig):
        assert cfg.fwd_params is not None and cfg.bwd_params is not None
        fwd = (cfg.fwd_params.q_blocksize, cfg.fwd_params.kv_blocksize)
        bwd = (cfg.bwd_params.q_blocksize, cfg.bwd_params.kv_blocksize)
        return flash_attention(args, fwd, bwd)  # type: ignore[arg-type]

    @staticmethod
    def _blocks(params) -> tuple[int, int]:
        return params.q_blocksize, params.kv_blocksize

    def forward_lse(self, args: AttentionArgs, cfg: FlashAttentionConfig):
        assert cfg.fwd_params is not None
        return forward_with_lse(args, self._blocks(cfg.fwd_params))

    def backward_lse(self, args: AttentionArgs, cfg: FlashAttentionConfig, out, lse, dout):
        assert cfg.bwd_params is not None
        return backward_from_lse(args, self._blocks(cfg.bwd_params), out, lse, dout)
