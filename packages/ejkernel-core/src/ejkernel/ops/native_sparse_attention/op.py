"""The ``native_sparse_attention`` op: DeepSeek's NSA (compressed, selected and sliding branches)."""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np

from ..args import Args, ShardPlan, array, concrete, shape_str, static, static_float, static_int
from ..checks import ValueRule
from ..config import OpConfig, tile
from ..families.attention import cu_seqlens_rule
from ..op import Op

__all__ = ["NativeSparseAttention", "NativeSparseAttentionArgs", "NativeSparseAttentionConfig"]

DEFAULT_BLOCK_SIZE = 64
DEFAULT_BLOCK_COUNT = 16


@dataclasses.dataclass(frozen=True)
class NativeSparseAttentionConfig(OpConfig):
    """Config of ``native_sparse_attention``.

    Attributes:
        block_q: query tokens one step handles (XLA: the token chunk of the blocked branches,
            which bounds the gathered keys to ``block_q x selected keys``).
        block_k: key rows one step of a GPU kernel loads.
        block_d: head-dim columns of a GPU kernel's tile.
        block_size: the earlier releases' place for the selection block size. It changes what is
            computed, so it is the call's ``block_size`` option: a config that sets it passes it on
            to the call (both set and different is an error).
        num_warps, num_stages: GPU launch parameters.
    """

    block_q: int | None = tile(power_of_two=True)
    block_k: int | None = tile(power_of_two=True)
    block_d: int | None = tile(power_of_two=True)
    block_size: int | None = tile()
    num_warps: int | None = tile(power_of_two=True, maximum=32)
    num_stages: int | None = tile()


class NativeSparseAttentionArgs(
    Args,
    shardable=("batch", "num_heads", "num_kv_heads"),
    shard_reasons={
        "seq": "every branch reads keys across the sequence",
        "cu_len": "cu_seqlens is read whole",
        "num_selected": "a token's selected blocks are read together",
    },
    tied=[("num_heads", "num_kv_heads")],
    divides=[("num_kv_heads", "num_heads")],
):
    """Canonical arguments of an NSA call.

    ``block_indices`` (``None``: computed from the compressed branch's scores) holds, per token
    and kv head, block numbers within the token's sequence; ``block_counts`` (``None``: every
    token uses ``block_count`` of them) how many of its slots count. ``num_selected`` is the
    number of slots: ``block_indices``' last axis, or for computed selection the blocks ranked
    per token (``block_count`` clipped to the blocks of the longest possible sequence, or all of
    them when the counts vary per token).
    """

    query: Any = array("batch", "seq", "num_heads", "head_dim", differentiable=True)
    key: Any = array("batch", "seq", "num_kv_heads", "head_dim", same_dtype_as="query", differentiable=True)
    value: Any = array("batch", "seq", "num_kv_heads", "value_head_dim", same_dtype_as="query", differentiable=True)
    g_cmp: Any = array("batch", "seq", "num_heads", optional=True, differentiable=True)
    g_slc: Any = array("batch", "seq", "num_heads", optional=True, differentiable=True)
    g_swa: Any = array("batch", "seq", "num_heads", optional=True, differentiable=True)
    block_indices: Any = array("batch", "seq", "num_kv_heads", "num_selected", kind="int", optional=True)
    block_counts: Any = array("batch", "seq", "num_kv_heads", kind="int", optional=True)
    cu_seqlens: Any = array("cu_len", kind="int", optional=True)
    block_count: int = static(DEFAULT_BLOCK_COUNT)
    num_selected_blocks: int = static(DEFAULT_BLOCK_COUNT)
    block_size: int = static(DEFAULT_BLOCK_SIZE)
    window_size: int | None = static(None)
    softmax_scale: float = static(1.0, key="ignore")

    @property
    def num_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def dtype(self) -> Any:
        return self.query.dtype

    @property
    def num_blocks(self) -> int:
        """Blocks of the longest possible sequence (``ceil(seq / block_size)``)."""
        return -(-self.seq // self.block_size)


FEATURES: dict[str, tuple[str, Any]] = {
    "compressed": ("the compressed branch and the selection computed from its scores", lambda a: a.g_cmp is not None),
    "sliding_window": ("the sliding-window branch", lambda a: a.window_size is not None),
    "varlen": ("packed sequences (cu_seqlens)", lambda a: a.cu_seqlens is not None),
    "gqa": ("fewer key/value heads than query heads", lambda a: a.num_heads != a.num_kv_heads),
    "value_head_dim": ("value head dim differs from the query's", lambda a: a.value_head_dim != a.head_dim),
}


class NativeSparseAttention(Op):
    """The ``native_sparse_attention`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "native_sparse_attention"
    config_cls = NativeSparseAttentionConfig
    args_cls = NativeSparseAttentionArgs
    trainable = True
    output_axes = ("batch", "seq", "num_heads", "value_head_dim")
    features: ClassVar[dict[str, tuple[str, Any]]] = FEATURES

    def canonical_config(self, cfg: NativeSparseAttentionConfig, p: dict[str, Any]) -> NativeSparseAttentionConfig:
        if cfg.block_size is None:
            return cfg
        given = p.get("block_size")
        if given is not None and given != cfg.block_size:
            raise ValueError(
                f"{self.name}: block_size={given} contradicts cfg.block_size={cfg.block_size}; pass one of them"
            )
        p["block_size"] = cfg.block_size
        return dataclasses.replace(cfg, block_size=None)

    def bind(self, params: dict[str, Any]) -> NativeSparseAttentionArgs:
        # An int block_counts is a uniform count (a static), not an array.
        params = dict(params)
        counts = params.get("block_counts")
        if counts is None:
            raise TypeError(f"{self.name}: block_counts must be an int or an int array [batch, seq, num_kv_heads]")
        if isinstance(counts, (int, np.integer)) and not isinstance(counts, bool):
            params["block_count"] = static_int(self.name, "block_counts", counts, minimum=0)
            params["block_counts"] = None
        elif isinstance(counts, bool):
            raise TypeError(f"{self.name}: block_counts must be an int or an int array, got bool")
        return super().bind(params)  # type: ignore[return-value]

    def canonicalize(self, p: dict[str, Any]) -> NativeSparseAttentionArgs:
        op = self.name
        q, k = p["query"], p["key"]
        if q.ndim != 4 or k.ndim != 4:
            raise ValueError(
                f"{op}: query and key must be 4-D [batch, seq, heads, head_dim]: {shape_str(q)}, {shape_str(k)}"
            )
        block_size = static_int(op, "block_size", p.get("block_size"), minimum=1)
        block_size = DEFAULT_BLOCK_SIZE if block_size is None else block_size
        window = static_int(op, "window_size", p.get("window_size"), minimum=1)
        if (window is None) != (p.get("g_swa") is None):
            raise ValueError(
                f"{op}: the sliding-window branch needs both window_size and its gate g_swa "
                f"(got window_size={window}, g_swa {'given' if p.get('g_swa') is not None else 'None'})"
            )
        scale = static_float(op, "softmax_scale", p.get("softmax_scale"))
        if scale is None:
            scale = 1.0 / math.sqrt(int(q.shape[3])) if q.shape[3] else 1.0
        indices = p.get("block_indices")
        count = int(p.get("block_count", DEFAULT_BLOCK_COUNT))
        counts = p.get("block_counts")
        seq = int(q.shape[1])
        num_blocks = -(-seq // block_size)
        if p.get("g_cmp") is not None:
            if indices is not None:
                warnings.warn(
                    f"{op}: block_indices is ignored when g_cmp is given (the blocks are selected from the "
                    "compressed branch's scores)",
                    stacklevel=4,
                )
                indices = None
            selected = num_blocks if counts is not None else min(count, num_blocks)
        elif indices is None:
            raise ValueError(f"{op}: pass g_cmp (the selection is computed) or block_indices (the explicit form)")
        else:
            if indices.ndim != 4:
                raise ValueError(
                    f"{op}: block_indices must be 4-D [batch, seq, num_kv_heads, num_selected_blocks], got "
                    f"{shape_str(indices)}"
                )
            selected = int(indices.shape[3])
        cu = p.get("cu_seqlens")
        if cu is not None:
            if cu.ndim != 1 or cu.shape[0] < 2:
                raise ValueError(f"{op}: cu_seqlens must be [num_seqs + 1] with num_seqs >= 1, got {shape_str(cu)}")
            if q.shape[0] != 1:
                raise ValueError(
                    f"{op}: cu_seqlens packs the sequences in one row: query must have batch 1, got {shape_str(q)}"
                )
        return NativeSparseAttentionArgs.build(
            op,
            p,
            block_indices=indices,
            block_counts=counts,
            block_count=count,
            num_selected_blocks=max(selected, 1),
            block_size=block_size,
            window_size=window,
            softmax_scale=scale,
        )

    def value_rules(self, a: NativeSparseAttentionArgs) -> list[ValueRule]:
        return [cu_seqlens_rule("cu_seqlens", a.seq)] if a.cu_seqlens is not None else []

    def autotune_inputs(self, a: NativeSparseAttentionArgs, seed: int = 0) -> NativeSparseAttentionArgs:
        out = a.random_like(seed)
        rng = np.random.default_rng(seed)
        changes: dict[str, Any] = {}
        if a.block_indices is not None and concrete(a.block_indices) is None:  # traced: random past blocks
            t = np.arange(a.seq)[None, :, None, None] // a.block_size
            idx = np.floor(rng.random(a.block_indices.shape) * (t + 1)).astype(np.int32)
            changes["block_indices"] = jnp.asarray(idx)
        if a.block_counts is not None and concrete(a.block_counts) is None:
            changes["block_counts"] = jnp.full(a.block_counts.shape, a.num_selected_blocks, jnp.int32)
        if a.cu_seqlens is not None and concrete(a.cu_seqlens) is None:
            n = int(a.cu_seqlens.shape[0]) - 1
            changes["cu_seqlens"] = jnp.asarray(np.arange(n + 1) * (a.seq // n), jnp.int32)
        return dataclasses.replace(out, **changes)

    def shard_plan(self, a: NativeSparseAttentionArgs, in_specs: Any, mesh: Any) -> ShardPlan:
        return a.shard_plan(self.name, in_specs, mesh, self.positional_arrays(), required=3)
