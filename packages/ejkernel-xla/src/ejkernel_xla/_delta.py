"""The XLA delta rule, shared by ``kernel_delta_attention`` and ``gated_delta_rule``: the chunked
WY algorithm of :mod:`ejkernel.ops.families.delta_rule_math` (parallel over chunks, one scan over
chunks for the state; memory linear in the sequence, gradients by JAX's autodiff) and the
token-by-token step path for decode."""

from __future__ import annotations

from typing import Any, ClassVar

import jax

from ejkernel.ops import DeviceInfo, KernelImpl
from ejkernel.ops.families import delta_rule_math as M
from ejkernel.ops.families.delta_rule import DeltaRuleArgs, DeltaRuleConfig, recurrent_delta_rule

__all__ = ["XlaDeltaRule", "chunked_delta_rule"]

# 64 tokens per chunk: fla's choice; the intra-chunk matmuls are 64×64, the scan has T/64 steps.
CHUNK = 64


def chunked_delta_rule(args: DeltaRuleArgs, chunk: int) -> tuple[jax.Array, jax.Array]:
    """``(output [B, T, HV, V] in the query's dtype, final states [N, HV, K, V] float32)``."""
    c = M.to_chunks(
        args.query, args.key, args.value, args.beta, args.gate, args.initial_state, args.cu_seqlens,
        scale=args.softmax_scale, use_qk_l2norm=args.use_qk_l2norm, chunk=chunk,
    )  # fmt: skip
    intra = M.intra_chunk(c)
    states, vn, final = M.inter_chunk(c, intra)
    out = M.from_chunks(c, M.chunk_output(intra, states, vn))
    return out.astype(args.value.dtype), final


class XlaDeltaRule(KernelImpl):
    """The delta rule in plain JAX, any device (base of the two ops' XLA implementations)."""

    version = "1"
    config_cls: ClassVar[type[DeltaRuleConfig]] = DeltaRuleConfig
    test_configs: ClassVar[dict[str, DeltaRuleConfig]] = {}

    def heuristic_cfg(self, args: DeltaRuleArgs, device: DeviceInfo) -> DeltaRuleConfig:
        return self.config_cls(chunk_size=CHUNK, chunked=args.seq != 1 or args.is_varlen)

    def candidate_cfgs(self, args: DeltaRuleArgs, device: DeviceInfo) -> list[DeltaRuleConfig]:
        if args.seq == 1 and not args.is_varlen:
            return [self.heuristic_cfg(args, device)]
        return [self.config_cls(chunk_size=c, chunked=True) for c in (32, 64, 128)]

    def run(self, args: DeltaRuleArgs, cfg: DeltaRuleConfig) -> Any:
        if cfg.chunked is False:
            out, final = recurrent_delta_rule(
                args.query, args.key, args.value, args.beta, args.gate, args.initial_state, args.cu_seqlens,
                scale=args.softmax_scale, use_qk_l2norm=args.use_qk_l2norm,
            )  # fmt: skip
            out = out.astype(args.value.dtype)
        else:
            out, final = chunked_delta_rule(args, cfg.chunk_size or CHUNK)
        return (out, final) if args.return_state else out
