"""The Triton delta rule (base of ``kernel_delta_attention`` and ``gated_delta_rule``): what it
declares, its configs, its entry point."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax.numpy as jnp

from ejkernel.ops import DeviceInfo, KernelImpl, Need, profile_for
from ejkernel.ops.families import delta_rule_math as M
from ejkernel.ops.families.delta_rule import DeltaRuleArgs, DeltaRuleConfig, recurrent_delta_rule

from .._launch import gpu_availability
from . import resources as R

# 64-token chunks (fla's choice: 64×64 intra-chunk matmuls, T/64 sequential state steps); 32
# value columns per program: a 128×32 float32 state block stays in registers at 4 warps and
# B·H·V/32 programs fill an H100/H200 at training shapes.
CHUNK = 64
BLOCK_V = 32
NUM_WARPS = 4
NUM_STAGES = 2


class TritonDeltaRule(KernelImpl):
    """The chunked delta rule in Triton kernels, forward and backward (NVIDIA GPUs, compute
    capability >= 8.0): the intra-chunk WY transform (``_intra``; under a per-channel gate
    JAX's), then the inter-chunk state recurrence and the output. One token per sequence takes
    the step path."""

    version = "2"
    device_requirement = "an NVIDIA GPU"
    config_cls: ClassVar[type[DeltaRuleConfig]] = DeltaRuleConfig
    dtypes = ("float16", "bfloat16", "float32")
    max_sizes: ClassVar[Mapping[str, int]] = {"head_dim": 256}
    test_configs: ClassVar[Mapping[str, DeltaRuleConfig]] = {}

    def available(self, device: DeviceInfo) -> str | None:
        return gpu_availability(device)

    def heuristic_cfg(self, args: DeltaRuleArgs, device: DeviceInfo) -> DeltaRuleConfig:
        cfg = self.config_cls(
            chunk_size=CHUNK,
            chunked=args.seq != 1 or args.is_varlen,
            block_v=min(BLOCK_V, max(16, 1 << (max(args.value_head_dim, 1) - 1).bit_length())),
            num_warps=NUM_WARPS,
            num_stages=NUM_STAGES,
        )
        return self.fit(cfg, args, device)

    def decline(self, args: DeltaRuleArgs, device: DeviceInfo) -> str | None:
        """When no config fits the device (float32 inputs at head dim 128+ on a 99 KiB part: the
        reverse state walk alone needs more), the call goes to another implementation."""
        from ejkernel.ops.resources import unfit

        profile = profile_for(device)
        if profile is None:
            return None
        why = unfit(self.resources(self.heuristic_cfg(args, device), args, device), profile)
        return None if why is None else f"no config fits the device: {why}"

    def fit(self, cfg: DeltaRuleConfig, args: DeltaRuleArgs, device: DeviceInfo) -> DeltaRuleConfig:
        """``cfg``, or the nearest config whose kernels fit the device's shared memory: narrower
        value blocks (down to 16), then fewer warps (down to 2): head dim 256 on sm_90 (the state
        walks' wgmma tiles) and on 99 KiB parts."""
        from ejkernel.ops.resources import unfit

        profile = profile_for(device)
        if profile is None or not cfg.chunked:
            return cfg
        while unfit(self.resources(cfg, args, device), profile) is not None:
            if cfg.block_v and cfg.block_v > 16:
                cfg = self.config_cls(**{**cfg.tuning_fields(), "block_v": cfg.block_v // 2})
            elif cfg.num_warps and cfg.num_warps > 2:
                cfg = self.config_cls(**{**cfg.tuning_fields(), "num_warps": cfg.num_warps // 2})
            else:
                break  # reported by the resolution's check, naming the kernel and the limit
        return cfg

    def resources(self, cfg: DeltaRuleConfig, args: DeltaRuleArgs, device: DeviceInfo) -> list[Need]:
        if cfg.chunked is False:
            return []  # the step path runs in JAX
        from ._call import intra_chunk_supported

        chunk = cfg.chunk_size or CHUNK
        return R.needs(
            chunk, cfg.block_v or BLOCK_V, cfg.num_warps or NUM_WARPS, args.head_dim, args.value_head_dim,
            jnp.dtype(args.value.dtype).itemsize, intra_chunk_supported(chunk), device.compute_capability,
        )  # fmt: skip

    def candidate_cfgs(self, args: DeltaRuleArgs, device: DeviceInfo) -> list[DeltaRuleConfig]:
        base = self.heuristic_cfg(args, device)
        if not base.chunked:
            return [base]
        return [
            self.config_cls(chunk_size=CHUNK, chunked=True, block_v=bv, num_warps=nw, num_stages=NUM_STAGES)
            for bv in (16, 32, 64)
            for nw in (2, 4, 8)
        ]

    def validate_cfg(self, cfg: DeltaRuleConfig, args: DeltaRuleArgs, device: DeviceInfo) -> None:
        if cfg.chunked is not False and (cfg.chunk_size is None or cfg.chunk_size < 16):
            raise ValueError(f"triton {self.op_name}: chunk_size must be >= 16 (a tl.dot side), got {cfg.chunk_size}")

    def run(self, args: DeltaRuleArgs, cfg: DeltaRuleConfig) -> Any:
        if cfg.chunked is False:
            out, final = recurrent_delta_rule(
                args.query, args.key, args.value, args.beta, args.gate, args.initial_state, args.cu_seqlens,
                scale=args.softmax_scale, use_qk_l2norm=args.use_qk_l2norm,
            )  # fmt: skip
            out = out.astype(args.value.dtype)
        else:
            from ._call import intra_chunk_supported, triton_delta_rule, triton_intra_chunk

            chunk = cfg.chunk_size or CHUNK
            dtype = jnp.dtype(args.value.dtype)
            # The Triton WY kernels, which read q, k, v at the op's width (converting on load);
            # chunk sizes they do not take: JAX's transform on float32 chunks.
            triton_intra = intra_chunk_supported(chunk)
            c = M.to_chunks(
                args.query, args.key, args.value, args.beta, args.gate, args.initial_state, args.cu_seqlens,
                scale=args.softmax_scale, use_qk_l2norm=args.use_qk_l2norm, chunk=chunk,
                dtype=dtype if triton_intra else jnp.float32, gather_transpose=True,
            )  # fmt: skip
            if triton_intra:
                intra = triton_intra_chunk(c, dtype)
            else:  # 16-bit inputs: TF32 products (finer than the inputs; HIGHEST ran ~3x slower)
                intra = M.intra_chunk(c, None if dtype != jnp.float32 else M.HIGHEST)
            o, final = triton_delta_rule(
                c, intra, dtype,
                block_v=cfg.block_v or BLOCK_V, num_warps=cfg.num_warps or NUM_WARPS,
                num_stages=cfg.num_stages or NUM_STAGES,
            )  # fmt: skip
            out = M.from_chunks(c, o, gather_transpose=True).astype(dtype)
        return (out, final) if args.return_state else out
