"""What the Triton linear-attention implementations declare, and their configs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax

from ejkernel.ops import DeviceInfo, Need, get_op, profile_for
from ejkernel.ops.resources import unfit

from .._launch import gpu_availability
from . import resources as R

# 32-token chunks: the intra-chunk scores are one product per chunk when its gates stay within
# 30 nats of its middle row (``_kernel.SPAN``), so larger chunks halve the chunk states (the state
# kernels' traffic) at little cost (benchmarks/results/h100/gla_attention.json, B4 T4096 H16 D128
# bf16: 32-token chunks beat 16 forward+backward); a chunk that decays more builds its scores
# column by column (cost ∝ chunk² · head_dim). 64-column value tiles keep a [32, 64] output and a
# [64, 64] state tile in registers.
CHUNK, BLOCK_V, WARPS, STAGES = 32, 64, 4, 2
# A scalar gate (``_call.Spec.scalar_gate``: one product for the scores at any decay, in the
# inputs' dtype) takes 64-token chunks at 4 warps, faster than 32-token chunks or 8 warps
# (benchmarks/results/h200/lightning_attention.json, B4 T4096 H16 D128 bf16, forward+backward).
SCALAR_CHUNK = 64
# ... and 128-token chunks where the state walks are few and long (fewer than 128 programs of
# 64-wide tiles, sequences of LONG_SEQ tokens or more): half the serial steps per walk. The
# backward's chunk kernels then take 8 warps (_call.WIDE_CHUNK_WARPS), without which the larger
# chunk products cost more than the walk saves (benchmarks/results/h100/lightning_attention.json,
# B1 T32768 H16 D128 bf16, 64 against 128-token chunks).
LONG_SCALAR_CHUNK = 128
LONG_SEQ = 8192
CHUNKS = (16, 32, 64, 128)


class TritonLinearAttention:
    """Mixin of the Triton implementations of the linear-attention ops (NVIDIA GPUs, cc >= 8.0)."""

    version = "1"
    device_requirement = "an NVIDIA GPU"
    dtypes = ("float16", "bfloat16", "float32")
    max_sizes: ClassVar[Mapping[str, int]] = {"head_dim": 256, "value_head_dim": 256, "state_size": 256}
    unsupported: ClassVar[Mapping[str, str]] = {"value_gate": "a per-value-channel gate (gv) is not supported"}

    def available(self, device: DeviceInfo) -> str | None:
        return gpu_availability(device)

    def _cfg_cls(self) -> Any:
        return get_op(self.op_name).config_cls  # type: ignore[attr-defined]

    @staticmethod
    def scalar_gate(args: Any) -> bool:
        """Whether the call's gate is one number per token and head: no per-key-channel gate
        (``g``/``gk``) among its arguments (lightning's slopes, Mamba2's ``A·dt``, ``g_gamma``)."""
        return all(getattr(args, name, None) is None for name in ("g", "gk"))

    def few_long_walks(self, args: Any) -> bool:
        """Whether the state walks are few and long: fewer than 128 programs of 64-wide state
        tiles (``_call.state_block``'s rule) over sequences of ``LONG_SEQ`` tokens or more."""
        from ._call import state_block

        op = get_op(self.op_name)  # type: ignore[attr-defined]

        def shapes(a: Any) -> Any:
            p = op.problem(a)
            return p.q, p.v, p.cu_seqlens

        q, v, cu = jax.eval_shape(shapes, args)
        b, t, h, k = q.shape
        n = cu.shape[0] - 1 if cu is not None else b
        return state_block(n * h, k, v.shape[-1]) < 64 and b * t >= LONG_SEQ * max(n, 1)

    def heuristic_cfg(self, args: Any, device: DeviceInfo) -> Any:
        if not self.scalar_gate(args):
            chunk = CHUNK
        else:
            chunk = LONG_SCALAR_CHUNK if self.few_long_walks(args) else SCALAR_CHUNK
        cfg = self._cfg_cls()(chunk_size=chunk, block_v=BLOCK_V, num_warps=WARPS, num_stages=STAGES)
        return self.fit(cfg, args, device)

    def decline(self, args: Any, device: DeviceInfo) -> str | None:
        """When no config fits the device, the call goes to another implementation."""
        profile = profile_for(device)
        if profile is None:
            return None
        why = unfit(self.resources(self.heuristic_cfg(args, device), args, device), profile)
        return None if why is None else f"no config fits the device: {why}"

    def fit(self, cfg: Any, args: Any, device: DeviceInfo) -> Any:
        """``cfg``, or the nearest config whose kernels fit the device's shared memory: shorter
        chunks (down to 16 tokens), then narrower value blocks (e.g. 128-token chunks on a 99 KiB
        sm_86/89 part, head dim 256 on any)."""
        profile = profile_for(device)
        if profile is None:
            return cfg
        cls = self._cfg_cls()
        while unfit(self.resources(cfg, args, device), profile) is not None:
            if cfg.chunk_size > CHUNKS[0]:
                cfg = cls(**{**cfg.tuning_fields(), "chunk_size": cfg.chunk_size // 2})
            elif cfg.block_v > 16:
                cfg = cls(**{**cfg.tuning_fields(), "block_v": cfg.block_v // 2})
            else:
                break  # reported by the resolution's check, naming the kernel and the limit
        return cfg

    def resources(self, cfg: Any, args: Any, device: DeviceInfo) -> list[Need]:
        rows, k, v, itemsize = R.shapes(args, get_op(self.op_name))  # type: ignore[attr-defined]
        from ._call import state_block

        return R.needs(
            cfg.chunk_size, cfg.block_v, cfg.num_warps, k, v, state_block(rows, k, v), itemsize,
            device.compute_capability,
        )  # fmt: skip

    def candidate_cfgs(self, args: Any, device: DeviceInfo) -> list[Any]:
        cls = self._cfg_cls()
        chunks = (32, 64, 128) if self.scalar_gate(args) else (16, 32)
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
