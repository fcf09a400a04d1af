"""What the Triton linear-attention implementations declare, and their configs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ejkernel.ops import DeviceInfo, get_op

from .._launch import availability

# 32-token chunks: the intra-chunk scores are one product per chunk when its gates stay within
# 30 nats of its middle row (``_kernel.SPAN``), so larger chunks halve the chunk states (the state
# kernels' traffic) at little cost (H100, gla_attention B4 T4096 H16 D128 bf16, forward+backward:
# 3.42 ms at 32-token chunks, 4.09 at 16; ``benchmarks/wave2_breakdown.py --only linear``); a
# chunk that decays more builds its scores column by column (cost ∝ chunk² · head_dim). 64-column
# value tiles keep a [32, 64] output and a [64, 64] state tile in registers.
CHUNK, BLOCK_V, WARPS, STAGES = 32, 64, 4, 2
# A scalar gate (``_call.Spec.scalar_gate``: one product for the scores at any decay, in the
# inputs' dtype) takes 64-token chunks: H200, lightning_attention B4 T4096 H16 D128 bf16,
# forward+backward 1.274 ms at (64, 64, 4 warps), 1.658 at (32, 64, 4), 1.476 at (64, 64, 8)
# (``benchmarks/wave2_breakdown.py --only linear_scalar``).
SCALAR_CHUNK = 64
CHUNKS = (16, 32, 64)


class TritonLinearAttention:
    """Mixin of the Triton implementations of the linear-attention ops (NVIDIA GPUs, cc >= 8.0)."""

    version = "1"
    device_requirement = "an NVIDIA GPU"
    dtypes = ("float16", "bfloat16", "float32")
    max_sizes: ClassVar[Mapping[str, int]] = {"head_dim": 256, "value_head_dim": 256, "state_size": 256}
    unsupported: ClassVar[Mapping[str, str]] = {"value_gate": "a per-value-channel gate (gv) is not supported"}

    def available(self, device: DeviceInfo) -> str | None:
        if device.compute_capability is None:
            return f"needs an NVIDIA GPU; this call runs on {device.kind}"
        if device.compute_capability < (8, 0):
            return f"needs compute capability >= 8.0, this GPU has {device.compute_capability}"
        return availability()

    def _cfg_cls(self) -> Any:
        return get_op(self.op_name).config_cls  # type: ignore[attr-defined]

    @staticmethod
    def scalar_gate(args: Any) -> bool:
        """Whether the call's gate is one number per token and head: no per-key-channel gate
        (``g``/``gk``) among its arguments (lightning's slopes, Mamba2's ``A·dt``, ``g_gamma``)."""
        return all(getattr(args, name, None) is None for name in ("g", "gk"))

    def heuristic_cfg(self, args: Any, device: DeviceInfo) -> Any:
        chunk = SCALAR_CHUNK if self.scalar_gate(args) else CHUNK
        return self._cfg_cls()(chunk_size=chunk, block_v=BLOCK_V, num_warps=WARPS, num_stages=STAGES)

    def candidate_cfgs(self, args: Any, device: DeviceInfo) -> list[Any]:
        cls = self._cfg_cls()
        chunks = (32, 64) if self.scalar_gate(args) else (16, 32)
        return [
            cls(chunk_size=c, block_v=bv, num_warps=w, num_stages=STAGES)
            for c in chunks
            for bv in (32, 64, 128)
            for w in (4, 8)
        ]

    def validate_cfg(self, cfg: Any, args: Any, device: DeviceInfo) -> None:
        if cfg.chunk_size not in CHUNKS:
            raise ValueError(f"triton {self.op_name}: chunk_size must be one of {CHUNKS}, got {cfg.chunk_size}")  # type: ignore[attr-defined]
        if cfg.block_v is None or cfg.block_v < 16:
            raise ValueError(f"triton {self.op_name}: block_v must be >= 16, got {cfg.block_v}")  # type: ignore[attr-defined]

    def run(self, args: Any, cfg: Any) -> Any:
        from ._call import linear_attention

        op = get_op(self.op_name)  # type: ignore[attr-defined]
        out, final_state = linear_attention(
            op.problem(args), cfg.chunk_size, cfg.block_v, cfg.num_warps, cfg.num_stages
        )  # type: ignore[attr-defined]
        return op.finish(args, out, final_state)  # type: ignore[attr-defined]
