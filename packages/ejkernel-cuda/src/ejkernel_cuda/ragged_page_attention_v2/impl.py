"""The CUDA ``ragged_page_attention_v2``: decode-only steps on the paged decode kernel
(``csrc/page_attention``), the other steps handed on.

A step is decode-only when every live sequence has at most one query token. That is known only
when the step runs (``query_start_loc`` and ``num_seqs`` may be traced), so both paths are
compiled under ``lax.cond``: the CUDA decode over the K/V-interleaved cache read in place (keys at
even combined heads, values at odd: the kernel's strides, no copy), and for a step with a
prefill, the best implementation of another backend (:func:`ejkernel.ops.run_next`: the Triton
kernel on a GPU with jax-triton, else XLA).
"""

from __future__ import annotations

from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from ejkernel.ops import DeviceInfo, KernelImpl, Need, OpConfig, run_next
from ejkernel.ops.op import op_class
from ejkernel.ops.ragged_page_attention_v2 import RaggedPageAttentionv2Args, RaggedPageAttentionv2Config

from .. import _ffi
from ..page_attention import heuristics as H
from ..page_attention._call import decode
from ..page_attention.impl import LANE_VARIANT, cuda_available, smem_limits

__all__ = ["CudaRaggedPageAttentionv2", "CudaRaggedPaged"]


def _window_left(args: Any) -> int | None:
    return None if args.sliding_window is None else int(args.sliding_window[0])


def _itemsize(args: Any) -> int:
    return jnp.dtype(args.dtype).itemsize


def _context(args: Any) -> int:
    return H.effective_context(args.pages_per_seq * args.page_size, _window_left(args))


class CudaRaggedPaged(KernelImpl):
    """What the ragged paged ops on the CUDA decode declare, their configs (``num_splits``
    partitions of the context, ``num_stages`` ring slots) and the decode-or-hand-on step; a
    subclass gives its op's cache (:meth:`pages`) and finishes the result (:meth:`finish`)."""

    version = "1"
    device_requirement = "an NVIDIA GPU"
    dtypes = ("float32", "bfloat16", "float16")
    allowed_sizes: ClassVar[dict[str, tuple[int, ...]]] = {"head_dim": H.HEAD_DIMS}

    def available(self, device: DeviceInfo) -> str | None:
        return cuda_available(device)

    def _config(self, **fields: Any) -> OpConfig:
        return op_class(self.op_name).config_cls(**fields)

    def heuristic_cfg(self, args: Any, device: DeviceInfo) -> OpConfig:
        ext, _ = _ffi._load()
        sms = ext.sm_count() if ext is not None else 132  # type: ignore[attr-defined]
        ctx = _context(args)
        g, d, ps, item = args.num_groups, args.head_dim, args.page_size, _itemsize(args)
        p = H.heuristic_partition(args.max_num_seqs, args.num_kv_heads, g, d, ctx, ps, sms, item)
        stages = H.heuristic_stages(g, d, p, ps, item, LANE_VARIANT, *smem_limits(device))
        return self._config(num_splits=H.num_splits(ctx, p), num_stages=stages)

    def candidate_cfgs(self, args: Any, device: DeviceInfo) -> list[OpConfig]:
        ctx = _context(args)
        pairs = H.candidate_configs(args.num_groups, args.head_dim, ctx, args.page_size, _itemsize(args))
        return list(dict.fromkeys(self._config(num_splits=H.num_splits(ctx, p), num_stages=s) for p, s in pairs))

    def _plan(self, cfg: Any, args: Any) -> tuple[int, int, int]:
        """``(partition, splits, stages)`` of ``cfg``."""
        if not cfg.num_splits or cfg.num_splits < 1:
            raise ValueError(f"cuda {self.op_name}: num_splits must be a positive int, got {cfg.num_splits}")
        ctx = _context(args)
        partition = -(-ctx // cfg.num_splits)
        stages = cfg.num_stages or H.heuristic_stages(
            args.num_groups, args.head_dim, partition, args.page_size, _itemsize(args), LANE_VARIANT
        )
        return partition, H.num_splits(ctx, partition), int(stages)

    def _smem(self, cfg: Any, args: Any) -> int:
        partition, _, stages = self._plan(cfg, args)
        return H.smem_bytes(
            args.num_groups, args.head_dim, partition, args.page_size, stages, _itemsize(args), LANE_VARIANT
        )

    def validate_cfg(self, cfg: Any, args: Any, device: DeviceInfo) -> None:
        partition, _, stages = self._plan(cfg, args)
        if not H.MIN_STAGES <= stages <= H.MAX_STAGES:
            raise ValueError(
                f"cuda {self.op_name}: num_stages must be in [{H.MIN_STAGES}, {H.MAX_STAGES}], got {stages}"
            )
        smem = self._smem(cfg, args)
        if smem > H.SMEM_LIMIT:
            raise ValueError(
                f"cuda {self.op_name}: partitions of {partition} tokens with {stages} stages need {smem} B of "
                f"shared memory (at most {H.SMEM_LIMIT}, what the FFI handler accepts)"
            )

    def resources(self, cfg: Any, args: Any, device: DeviceInfo) -> list[Need]:
        """Pass 1's CTA (its dynamic shared memory); the merge pass holds one row per head."""
        return [Need("paged decode pass 1", self._smem(cfg, args), H.THREADS)]

    def attend(self, args: Any, cfg: Any, pages: jax.Array, handed_on: Any) -> jax.Array:
        """The step's output over ``pages`` (``[num_pages, page_size, 2 * kv_heads, d]``): the CUDA
        decode when every live sequence has at most one query, else ``handed_on()``."""
        t, m = args.total_tokens, args.max_num_seqs
        qsl = args.query_start_loc.astype(jnp.int32)
        n = jnp.asarray(args.num_seqs, jnp.int32).reshape(())
        live = jnp.arange(m) < n
        q_lens = qsl[1:] - qsl[:-1]
        decode_only = jnp.all(~live | (q_lens <= 1))

        def cuda_decode() -> jax.Array:
            one = live & (q_lens == 1)
            rows = jnp.where(one, qsl[:-1], t)  # padding and empty sequences write nothing
            q = args.queries[jnp.clip(rows, 0, t - 1)]
            lens = jnp.where(one, self.lens(args).astype(jnp.int32), 0)
            partition, splits, stages = self._plan(cfg, args)
            out = decode(
                q, pages, pages, lens, self.tables(args), args.softmax_aux,
                scale=args.softmax_scale, soft_cap=args.logits_soft_cap, window_left=_window_left(args),
                partition=partition, splits=splits, stages=stages, variant=LANE_VARIANT, kv_interleaved=True,
            )  # fmt: skip
            return jnp.zeros_like(args.queries).at[rows].set(out, mode="drop")

        return jax.lax.cond(decode_only, cuda_decode, handed_on)

    @staticmethod
    def tables(args: Any) -> jax.Array:
        return args.block_tables.astype(jnp.int32)

    @staticmethod
    def lens(args: Any) -> jax.Array:
        return args.context_lens


class CudaRaggedPageAttentionv2(CudaRaggedPaged):
    """Ragged paged attention whose decode-only steps run the CUDA paged decode (split-K over
    the context, the GQA group of a KV head per CTA on the tensor cores, a cp.async K/V ring)."""

    test_configs: ClassVar[dict[str, OpConfig]] = {
        "splits3": RaggedPageAttentionv2Config(num_splits=3, num_stages=2),
    }

    def run(self, args: RaggedPageAttentionv2Args, cfg: RaggedPageAttentionv2Config) -> jax.Array:
        return self.attend(args, cfg, args.kv_pages, lambda: run_next(self, self.op_name, args))
