"""The CUDA ``page_attention``: what it accepts, its configs, and the FFI call."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ejkernel.modules.page_attention import PageAttentionArgs, PageAttentionConfig
from ejkernel.ops import DeviceInfo, FwdParams, KernelImpl

from .. import _ffi
from . import heuristics as H

_DTYPES = ("float32", "bfloat16", "float16")
TARGET = "ejkernel_cuda_paged_decode"
# Pass 1's path for bf16/fp16 caches (0: tensor cores where the head dim allows; 1: FMAs, the
# float32 path). Read when a call is traced; benchmarks/cuda_decode_sweep.py compares them.
LANE_VARIANT = 0


def _window_left(args: PageAttentionArgs) -> int | None:
    return None if args.sliding_window is None else int(args.sliding_window[0])


def _itemsize(args: PageAttentionArgs) -> int:
    return jnp.dtype(args.key_cache.dtype).itemsize


def _context(args: PageAttentionArgs) -> int:
    return H.effective_context(args.max_blocks * args.block_size, _window_left(args))


class CudaPageAttention(KernelImpl):
    """Paged decode in CUDA C++ (split-K over the context, GQA groups per CTA as tensor-core tile rows,
    cp.async K/V ring)."""

    version = "2"
    device_requirement = "an NVIDIA GPU"

    def decline(self, args: PageAttentionArgs, device: DeviceInfo) -> str | None:
        if device.compute_capability is None:
            return f"needs an NVIDIA GPU; this call runs on {device.kind}"
        if device.compute_capability < (8, 0):
            return f"needs compute capability >= 8.0, this GPU has {device.compute_capability}"
        missing = _ffi.availability()
        if missing:
            return missing
        if args.head_dim not in H.HEAD_DIMS:
            return f"supports head dims {H.HEAD_DIMS}, got {args.head_dim}"
        if args.value_head_dim != args.head_dim:
            return f"needs value_cache head_dim equal to key_cache's ({args.head_dim}), got {args.value_head_dim}"
        for name, x in (("query", args.query), ("key_cache", args.key_cache)):
            if jnp.dtype(x.dtype).name not in _DTYPES:
                return f"supports {', '.join(_DTYPES)} {name}, got {jnp.dtype(x.dtype).name}"
        return None

    def heuristic_cfg(self, args: PageAttentionArgs, device: DeviceInfo) -> PageAttentionConfig:
        ext, _ = _ffi._load()
        sms = ext.sm_count() if ext is not None else 132  # type: ignore[attr-defined]
        p = H.heuristic_partition(
            args.batch, args.num_kv_heads, args.num_groups, args.head_dim, _context(args), args.block_size, sms,
            _itemsize(args),
        )  # fmt: skip
        stages = H.heuristic_stages(args.num_groups, args.head_dim, p, args.block_size, _itemsize(args), LANE_VARIANT)
        return PageAttentionConfig(fwd_params=FwdParams(kv_blocksize=p, num_stages=stages))

    def candidate_cfgs(self, args: PageAttentionArgs, device: DeviceInfo) -> list[PageAttentionConfig]:
        return [
            PageAttentionConfig(fwd_params=FwdParams(kv_blocksize=p, num_stages=s))
            for p, s in H.candidate_configs(
                args.num_groups, args.head_dim, _context(args), args.block_size, _itemsize(args)
            )
        ]

    def validate_cfg(self, cfg: PageAttentionConfig, args: PageAttentionArgs, device: DeviceInfo) -> None:
        p = self._partition(cfg, args)
        stages = self._stages(cfg, args, p)
        if not H.MIN_STAGES <= stages <= H.MAX_STAGES:
            raise ValueError(
                f"cuda page_attention: fwd_params.num_stages must be in [{H.MIN_STAGES}, {H.MAX_STAGES}], got {stages}"
            )
        smem = H.smem_bytes(args.num_groups, args.head_dim, p, args.block_size, stages, _itemsize(args), LANE_VARIANT)
        if smem > H.SMEM_LIMIT:
            raise ValueError(
                f"cuda page_attention: a partition of {p} tokens with {stages} stages needs {smem} B of shared "
                f"memory (at most {H.SMEM_LIMIT})"
            )

    @staticmethod
    def _partition(cfg: PageAttentionConfig, args: PageAttentionArgs) -> int:
        if cfg.num_splits is not None:  # an explicit split count sets the partition length
            return -(-_context(args) // cfg.num_splits)
        if cfg.fwd_params is None or cfg.fwd_params.kv_blocksize is None:
            raise ValueError("cuda page_attention needs fwd_params.kv_blocksize (tokens per partition) or num_splits")
        return int(cfg.fwd_params.kv_blocksize)

    @staticmethod
    def _stages(cfg: PageAttentionConfig, args: PageAttentionArgs, partition: int) -> int:
        if cfg.fwd_params is not None and cfg.fwd_params.num_stages is not None:
            return int(cfg.fwd_params.num_stages)
        return H.heuristic_stages(
            args.num_groups, args.head_dim, partition, args.block_size, _itemsize(args), LANE_VARIANT
        )

    def run(self, args: PageAttentionArgs, cfg: PageAttentionConfig) -> jax.Array:
        _ffi.ensure_registered()
        q = args.query
        b, h, d = (int(x) for x in q.shape)
        partition = self._partition(cfg, args)
        splits = H.num_splits(_context(args), partition)
        if args.softmax_aux is not None:
            sinks = args.softmax_aux.astype(jnp.float32)
            num_sinks = int(sinks.shape[1])
        else:
            sinks, num_sinks = jnp.zeros((h, 1), jnp.float32), 0
        call = jax.ffi.ffi_call(
            TARGET,
            (
                jax.ShapeDtypeStruct((b, h, d), q.dtype),
                jax.ShapeDtypeStruct((b, h, splits, d), jnp.float32),  # scratch: partial outputs
                jax.ShapeDtypeStruct((b, h, splits), jnp.float32),  # scratch: partial log-sum-exps
            ),
            vmap_method="sequential",
        )
        window = _window_left(args)
        out, _, _ = call(
            q,
            args.key_cache,
            args.value_cache,
            args.context_lens,
            args.block_tables,
            sinks,
            scale=np.float32(args.softmax_scale),
            soft_cap=np.float32(args.logits_soft_cap or 0.0),
            window_left=np.int32(-1 if window is None else window),
            partition=np.int32(partition),
            num_sinks=np.int32(num_sinks),
            stages=np.int32(self._stages(cfg, args, partition)),
            variant=np.int32(LANE_VARIANT),
        )
        return out[:, None] if args.query_had_seq_axis else out
