"""The static launch spec of a Triton flash attention call: shapes, options and tiles (hashable).

``make_spec(args, fwd, bwd)`` is everything ``_call`` needs to know at trace time: it keys the
cached custom-VJP/VMAP wrappers and gives the kernels their compile-time flags and scalars.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from ejkernel.ops import BwdParams, FwdParams, device_for_arrays
from ejkernel.ops.families.attention import AttentionArgs
from ejkernel.ops.families.attention_math import dropout_threshold

from .. import _launch
from .heuristics import tma_eligible

F32 = jnp.float32


def _pow2(n: int) -> int:
    return max(16, 1 << (int(n) - 1).bit_length())


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclasses.dataclass(frozen=True)
class Spec:
    """Everything static about a call: shapes, options and launch parameters (hashable)."""

    batch: int
    seq_q: int
    seq_k: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    head_dim_v: int
    dtype: str
    causal: bool
    window: tuple[int, int] | None
    varlen: bool
    has_bias: bool
    bias_shape: tuple[int, ...] | None
    has_segments: bool
    soft_cap: float | None
    num_sinks: int
    dropout_prob: float
    scale: float
    fwd: tuple[int, int, int, int]  # block_m, block_n, warps, stages
    bwd: tuple[int, int, int, int]  # block_m (dK/dV query block, dQ key block), block_n, warps, stages
    f32_out: bool = False  # output and gradients in float32 (the log-sum-exp protocol's blocks)
    tma: bool = False  # the forward runs on the Hopper TMA kernel (``heuristics.tma_eligible``)

    def out_dtype(self, like: Any) -> Any:
        """The dtype of an output or gradient shaped like ``like``."""
        return F32 if self.f32_out else like.dtype

    @property
    def groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    def flags(self) -> dict[str, Any]:
        return dict(
            HEAD_DIM=self.head_dim,
            HEAD_DIM_PAD=_pow2(self.head_dim),
            HEAD_DIM_V=self.head_dim_v,
            HEAD_DIM_V_PAD=_pow2(self.head_dim_v),
            IS_CAUSAL=self.causal,
            HAS_WINDOW=self.window is not None,
            IS_VARLEN=self.varlen,
            HAS_BIAS=self.has_bias,
            HAS_SEGMENTS=self.has_segments,
            HAS_SOFTCAP=self.soft_cap is not None,
            HAS_DROPOUT=self.dropout_prob > 0,
            # "ieee" (scalar FMAs) would be slow to run and 3-4x slower to compile.
            DOT_PRECISION=_launch.dot_precision(self.dtype),
        )

    def scalars(self) -> list[Any]:
        left, right = self.window or (0, 0)
        keep = 1.0 - self.dropout_prob
        return [
            np.float32(self.scale),
            np.float32(self.soft_cap or 1.0),
            np.float32(1.0 / keep),
            dropout_threshold(self.dropout_prob) if self.dropout_prob > 0 else 0,
            int(left),
            int(right),
        ]


def _capability(a: AttentionArgs) -> tuple[int, int] | None:
    """The compute capability the call runs on (Hopper's in Triton's interpreter, so that the
    TMA kernel is checked there too)."""
    if _launch._INTERPRET:
        return (9, 0)
    return device_for_arrays([a.query]).compute_capability


def make_spec(a: AttentionArgs, fwd: FwdParams, bwd: BwdParams) -> Spec:
    return Spec(
        batch=a.batch,
        seq_q=a.seq_q,
        seq_k=a.seq_k,
        num_heads=a.num_heads,
        num_kv_heads=a.num_kv_heads,
        head_dim=a.head_dim,
        head_dim_v=a.value_head_dim,
        dtype=jnp.dtype(a.dtype).name,
        causal=a.causal,
        window=a.sliding_window,
        varlen=a.is_varlen,
        has_bias=a.bias is not None,
        bias_shape=None if a.bias is None else tuple(int(d) for d in a.bias.shape),
        has_segments=a.has_segments,
        soft_cap=a.logits_soft_cap,
        num_sinks=0 if a.softmax_aux is None else int(a.softmax_aux.shape[1]),
        dropout_prob=a.dropout_prob,
        scale=a.softmax_scale,
        fwd=(fwd.q_blocksize, fwd.kv_blocksize, fwd.num_warps, fwd.num_stages),  # type: ignore[arg-type]
        bwd=(bwd.q_blocksize, bwd.kv_blocksize, bwd.num_warps, bwd.num_stages),  # type: ignore[arg-type]
        tma=tma_eligible(a, _capability(a)),
    )
