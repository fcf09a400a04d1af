"""The ``ragged_decode_attention`` op: one decode step over a contiguous (non-paged) KV cache."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np

from ..args import Args, ShardPlan, array, concrete, positive_float, shape_str, static, static_float, window
from ..checks import ValueRule
from ..config import FwdParams, OpConfig, tile
from ..families.serving import FEATURES, sinks_per_head
from ..op import Op

__all__ = ["RaggedDecodeAttention", "RaggedDecodeAttentionArgs", "RaggedDecodeAttentionConfig"]


@dataclasses.dataclass(frozen=True)
class RaggedDecodeAttentionConfig(OpConfig):
    """Config of ``ragged_decode_attention``.

    Attributes:
        fwd_params: ``kv_blocksize``: cached tokens one step attends (XLA: the block of the
            online-softmax scan); ``num_warps``/``num_stages`` for GPU kernels.
        num_key_splits: split-K: the KV range cut into this many parts reduced in a second pass
            (GPU kernels; the XLA scan takes ``None`` or 1).
    """

    fwd_params: FwdParams | None = None
    num_key_splits: int | None = tile()


class RaggedDecodeAttentionArgs(
    Args,
    shardable=("batch", "num_heads", "num_kv_heads"),
    shard_reasons={"kv_len": "a sequence's KV range is read whole"},
    tied=[("num_heads", "num_kv_heads")],
    divides=[("num_kv_heads", "num_heads")],
):
    """Canonical arguments of a ragged decode call.

    ``query`` is ``[batch, num_heads, head_dim]`` (a ``[batch, 1, heads, dim]`` input is squeezed;
    ``query_had_seq_axis`` restores it on the output). Sequence ``b`` attends keys
    ``sequence_start[b] <= t < sequence_end[b]``; its query sits at ``sequence_end[b] - 1``, so a
    window ``(left, right)`` keeps only ``t >= sequence_end[b] - 1 - left``.
    """

    query: Any = array("batch", "num_heads", "head_dim", ranks=(3, 4))
    key: Any = array("batch", "kv_len", "num_kv_heads", "head_dim", same_dtype_as="query")
    value: Any = array("batch", "kv_len", "num_kv_heads", "value_head_dim", same_dtype_as="query")
    sequence_start: Any = array("batch", kind="int")
    sequence_end: Any = array("batch", kind="int")
    softmax_aux: Any = array("num_heads", "num_sinks", optional=True, ranks=(1, 2))
    softmax_scale: float = static(1.0, key="ignore")
    logits_soft_cap: float | None = static(None, key="presence", parse=positive_float)
    sliding_window: tuple[int, int] | None = static(None, parse=window)
    query_had_seq_axis: bool = static(False)

    @property
    def num_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def dtype(self) -> Any:
        return self.query.dtype


class RaggedDecodeAttention(Op):
    """The ``ragged_decode_attention`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "ragged_decode_attention"
    config_cls = RaggedDecodeAttentionConfig
    args_cls = RaggedDecodeAttentionArgs
    features: ClassVar[dict[str, tuple[str, Any]]] = FEATURES

    def canonicalize(self, p: dict[str, Any]) -> RaggedDecodeAttentionArgs:
        op = self.name
        q = p["query"]
        had_seq = q.ndim == 4
        if had_seq:
            if q.shape[1] != 1:
                raise ValueError(
                    f"{op}: decodes one token per sequence: a 4-D query must be [batch, 1, num_heads, head_dim], "
                    f"got {shape_str(q)}"
                )
            q = q[:, 0]
        scale = static_float(op, "softmax_scale", p.get("softmax_scale"))
        if scale is None:
            scale = 1.0 / math.sqrt(int(q.shape[2])) if q.shape[2] else 1.0
        aux = sinks_per_head(p.get("softmax_aux"), int(q.shape[1]))
        return RaggedDecodeAttentionArgs.build(
            op, p, query=q, softmax_aux=aux, softmax_scale=scale, query_had_seq_axis=had_seq
        )

    def value_rules(self, a: RaggedDecodeAttentionArgs) -> list[ValueRule]:
        s = a.kv_len
        return [
            ValueRule(
                ("sequence_start", "sequence_end"),
                f"must be in [0, sequence_end] (sequence_end within kv_len = {s})",
                lambda xp, start, end: (start < 0) | (start > end),
            ),
            ValueRule(
                ("sequence_end",),
                f"must be in [0, kv_len = {s}]",
                lambda xp, end: (end < 0) | (end > s),
            ),
        ]

    def autotune_inputs(self, a: RaggedDecodeAttentionArgs, seed: int = 0) -> RaggedDecodeAttentionArgs:
        start, end = concrete(a.sequence_start), concrete(a.sequence_end)
        if start is None or end is None:  # traced: time the worst case, every sequence at full length
            start, end = np.zeros((a.batch,), np.int32), np.full((a.batch,), a.kv_len, np.int32)
        return dataclasses.replace(
            a.random_like(seed),
            sequence_start=jnp.asarray(start, jnp.int32),
            sequence_end=jnp.asarray(end, jnp.int32),
        )

    def _query_axes(self, a: RaggedDecodeAttentionArgs) -> tuple[str | None, ...]:
        return ("batch", None, "num_heads", "head_dim") if a.query_had_seq_axis else ("batch", "num_heads", "head_dim")

    def shard_plan(self, a: RaggedDecodeAttentionArgs, in_specs: Any, mesh: Any) -> ShardPlan:
        return a.shard_plan(
            self.name, in_specs, mesh, self.positional_arrays(), {"query": self._query_axes(a)}, required=3
        )

    def default_out_spec(self, a: RaggedDecodeAttentionArgs, plan: ShardPlan) -> Any:
        axes = (
            ("batch", None, "num_heads", "value_head_dim")
            if a.query_had_seq_axis
            else ("batch", "num_heads", "value_head_dim")
        )
        return plan.spec_of(axes)
