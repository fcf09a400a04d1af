"""The ``blocksparse_attention`` op: attention that visits only the tiles its mask leaves visible."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import math
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np

from ...types.mask_info import MaskInfo
from ..args import Args, array, as_array, concrete, positive_float, shape_str, static, static_bool, static_int, window
from ..checks import ValueRule
from ..families.attention import BlockAttentionConfig, bind_bias, segment_ids_rule
from ..families.serving import sinks_per_head
from ..op import Op
from .mask import (
    BlockLayout,
    SparseMask,
    block_layout,
    causal_mask,
    chunked_mask,
    compile_static,
    intersect,
    local_mask,
    token_mask,
)

__all__ = ["BlockSparseAttention", "BlockSparseAttentionArgs", "BlockSparseAttentionConfig"]


@dataclasses.dataclass(frozen=True)
class BlockSparseAttentionConfig(BlockAttentionConfig):
    __doc__ = (
        "Config of ``blocksparse_attention``: the tile sizes are also the granularity of the mask's "
        "block classification (empty / full / partial). " + (BlockAttentionConfig.__doc__ or "")
    )


class BlockSparseAttentionArgs(
    Args,
    shardable=("batch", "num_heads", "num_kv_heads"),
    shard_reasons={
        "seq_q": "the block schedule spans the whole sequence; use ring_attention for sequence parallelism",
        "seq_k": "the block schedule spans the whole sequence; use ring_attention for sequence parallelism",
        "head_dim": "a head is computed whole",
        "value_head_dim": "a head is computed whole",
    },
    tied=[("num_heads", "num_kv_heads")],
    divides=[("num_kv_heads", "num_heads")],
):
    """Canonical arguments (BHSD).

    ``mask`` is the static part of the mask (causal, window, chunks, block and token masks, as
    one :class:`~.mask.SparseMask`); ``q_segment_ids``/``kv_segment_ids`` (document mask, ``-1`` =
    padding) and ``attention_mask`` (pairwise, ``[batch or 1, num_heads or 1, seq_q, seq_k]``) are
    its runtime part. A pair is visible only where every part allows it. ``softmax_aux`` is
    ``[num_heads, num_sinks]``.
    """

    query: Any = array("batch", "num_heads", "seq_q", "head_dim", differentiable=True)
    key: Any = array("batch", "num_kv_heads", "seq_k", "head_dim", same_dtype_as="query", differentiable=True)
    value: Any = array("batch", "num_kv_heads", "seq_k", "value_head_dim", same_dtype_as="query", differentiable=True)
    softmax_aux: Any = array("num_heads", "num_sinks", optional=True, ranks=(1, 2), differentiable=True)
    bias: Any = array(
        "batch", "num_heads", "seq_q", "seq_k", optional=True, broadcast=True, ranks=(2, 3, 4), differentiable=True
    )
    q_segment_ids: Any = array("batch", "seq_q", kind="int", optional=True, label="mask_info q_segment_ids")
    kv_segment_ids: Any = array("batch", "seq_k", kind="int", optional=True, label="mask_info kv_segment_ids")
    attention_mask: Any = array(
        "batch", "num_heads", "seq_q", "seq_k", kind="bool", optional=True, broadcast=True, ranks=(4,)
    )
    mask: SparseMask = static(SparseMask(), key="ignore")
    mask_key: str = static("full")
    softmax_scale: float = static(1.0, key="ignore")
    logits_soft_cap: float | None = static(None, key="presence", parse=positive_float)

    @property
    def num_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def dtype(self) -> Any:
        return self.query.dtype

    def layout(self, block_q: int, block_k: int) -> BlockLayout:
        """The kernels' block schedule at tiles ``block_q × block_k``: the static mask compiled
        (cached) and intersected with this call's segment ids and pairwise mask."""
        static = compile_static(self.mask, self.seq_q, self.seq_k, block_q, block_k)
        return block_layout(static, self.q_segment_ids, self.kv_segment_ids, self.attention_mask)


FEATURES: dict[str, tuple[str, Any]] = {
    "causal": ("causal pattern (bottom-right aligned)", lambda a: a.mask.causal),
    "sliding_window": ("local window pattern", lambda a: bool(a.mask.windows)),
    "chunked": ("chunked (local) attention pattern", lambda a: bool(a.mask.chunks)),
    "block_mask": ("arbitrary [q_blocks, k_blocks] block mask", lambda a: bool(a.mask.block_masks)),
    "token_mask": ("static [seq_q, seq_k] token mask from mask_builder", lambda a: bool(a.mask.token_masks)),
    "segment_ids": ("document mask from segment ids (-1 = padding)", lambda a: a.q_segment_ids is not None),
    "attention_mask": ("pairwise boolean mask", lambda a: a.attention_mask is not None),
    "bias": ("additive bias", lambda a: a.bias is not None),
    "softmax_aux": ("attention sinks", lambda a: a.softmax_aux is not None),
    "logits_soft_cap": ("cap · tanh(logits / cap)", lambda a: a.logits_soft_cap is not None),
    "gqa": ("fewer key/value heads than query heads", lambda a: a.num_heads != a.num_kv_heads),
    "cross": ("seq_q != seq_k", lambda a: a.seq_q != a.seq_k),
    "value_head_dim": ("value head dim differs from the query's", lambda a: a.value_head_dim != a.head_dim),
}


def _decline_options(op: str, p: dict[str, Any]) -> None:
    """The spec's options this op cannot honour: refused unless they are at their no-op value."""
    axis = p.pop("sequence_parallelism_mesh_axis_name", None)
    if axis is not None:
        raise ValueError(
            f"{op}: sequence_parallelism_mesh_axis_name={axis!r} is not supported: the block schedule spans the "
            "whole sequence on one device; shard batch or heads with mesh/in_specs, or use ring_attention "
            "(axis_name=...) for a sequence sharded over devices"
        )
    layouts = p.pop("qkv_layouts", None)
    if layouts is not None:
        raise ValueError(
            f"{op}: qkv_layouts (per-call SparseMask layouts of the earlier Triton kernel) is not supported: "
            "describe the mask with mask_builder (returning an ejkernel.ops.blocksparse_attention.SparseMask), "
            "causal, sliding_window, chunk_size, mask_info or attention_mask; it is compiled to block metadata once"
        )
    if static_bool(op, "fused_backward", p.pop("fused_backward", False)):
        raise ValueError(
            f"{op}: fused_backward=True (one fused dQ/dK/dV kernel) is not available: the backward runs as "
            "separate dQ and dK/dV passes over the block schedule; pass fused_backward=False"
        )
    if static_bool(op, "purify", p.pop("purify", False)):
        raise ValueError(
            f"{op}: purify=True is not supported: rows that see no key already return exact zeros (never NaN) "
            "and the mask is applied exactly; pass purify=False"
        )


def _from_builder(op: str, builder: Any, sq: int, sk: int, h: int) -> SparseMask:
    """``mask_builder`` called as ``mask_builder()`` or ``mask_builder(q_len, kv_len, num_heads,
    head_shard_size, q_seq_shards)``, its result as a :class:`SparseMask`."""
    if not callable(builder):
        raise TypeError(f"{op}: mask_builder must be a callable, got {type(builder).__name__}")
    try:
        params = inspect.signature(builder).parameters.values()
        required = [
            q for q in params if q.default is q.empty and q.kind in (q.POSITIONAL_ONLY, q.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        required = []
    out = builder(sq, sk, h, h, 1) if required else builder()
    if isinstance(out, SparseMask):
        return out
    shape = getattr(out, "shape", None)
    if shape is not None and len(shape) == 2:
        if tuple(int(d) for d in shape) != (sq, sk):
            raise ValueError(
                f"{op}: mask_builder returned a mask of shape {tuple(shape)}, expected [seq_q, seq_k] = {(sq, sk)}"
            )
        # Splash-style Mask objects give their values by slicing.
        dense = out if isinstance(out, np.ndarray) else out[:, :]
        return token_mask(np.asarray(dense))
    if shape is not None and len(shape) == 3:
        raise ValueError(
            f"{op}: mask_builder returned a per-head mask {tuple(shape)}; the block schedule is shared by every "
            "head: pass per-head patterns as attention_mask [batch, num_heads, seq_q, seq_k]"
        )
    raise TypeError(
        f"{op}: mask_builder must return a SparseMask (ejkernel.ops.blocksparse_attention) or a [seq_q, seq_k] "
        f"bool mask, got {type(out).__name__}"
    )


def _mask_key(mask: SparseMask) -> str:
    if mask.is_full:
        return "full"
    parts = ["c" if mask.causal else ""] + [f"w{a},{b}" for a, b in mask.windows] + [f"k{c}" for c in mask.chunks]
    if mask.block_masks or mask.token_masks:
        digest = hashlib.sha1(repr(mask.key()).encode()).hexdigest()[:10]
        parts.append(f"m{digest}")
    return "+".join(p for p in parts if p)


def _pairwise(op: str, mask: Any, b: int, h: int, sq: int, sk: int, label: str) -> Any:
    mask = as_array(op, label, mask, ndim=4, layout="[batch or 1, num_heads or 1, seq_q, seq_k]")
    if not (mask.dtype == jnp.bool_ or jnp.issubdtype(mask.dtype, jnp.integer)):
        raise TypeError(f"{op}: {label} must be a bool or integer array, got {mask.dtype}")
    mb, mh, msq, msk = (int(d) for d in mask.shape)
    if (msq, msk) != (sq, sk) or mb not in (1, b) or mh not in (1, h):
        raise ValueError(
            f"{op}: {label} {shape_str(mask)} must be [batch or 1, num_heads or 1, seq_q, seq_k] with batch={b}, "
            f"num_heads={h}, seq_q={sq}, seq_k={sk}"
        )
    return mask.astype(bool)


class BlockSparseAttention(Op):
    """The ``blocksparse_attention`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "blocksparse_attention"
    version = "1"
    trainable = True
    config_cls = BlockSparseAttentionConfig
    args_cls = BlockSparseAttentionArgs
    output_axes = ("batch", "num_heads", "seq_q", "value_head_dim")
    features: ClassVar[dict[str, tuple[str, Any]]] = FEATURES

    def canonicalize(self, p: dict[str, Any]) -> BlockSparseAttentionArgs:
        op = self.name
        _decline_options(op, p)
        q, k = p["query"], p["key"]
        b, h, sq, d = (int(x) for x in q.shape)
        sk = int(k.shape[2])
        parts: list[SparseMask] = []
        if static_bool(op, "causal", p.get("causal", True)):
            parts.append(causal_mask())
        sliding = window(op, "sliding_window", p.get("sliding_window"))
        chunk = static_int(op, "chunk_size", p.get("chunk_size"), minimum=1)
        if chunk is not None:
            parts.append(chunked_mask(chunk))
        builder = p.get("mask_builder")
        if builder is not None:
            parts.append(_from_builder(op, builder, sq, sk, h))
        q_seg = kv_seg = None
        pair = None
        mi = p.get("mask_info")
        if mi is not None:
            if not isinstance(mi, MaskInfo):
                raise TypeError(f"{op}: mask_info must be an ejkernel.types.MaskInfo, got {type(mi).__name__}")
            if mi.causal:
                parts.append(causal_mask())
            if mi.sliding_window is not None:
                if sliding is not None and sliding != mi.sliding_window:
                    raise ValueError(
                        f"{op}: sliding_window={sliding} contradicts mask_info's sliding window {mi.sliding_window}"
                    )
                sliding = mi.sliding_window
            if mi.q_segment_ids is not None:
                q_seg, kv_seg = mi.q_segment_ids, mi.kv_segment_ids
                for name, x, n in (("q_segment_ids", q_seg, sq), ("kv_segment_ids", kv_seg, sk)):
                    if tuple(x.shape) != (b, n):
                        raise ValueError(f"{op}: mask_info {name} {shape_str(x)} must be [batch, seq] = {(b, n)}")
            if mi.stored_attention_mask is not None:
                pair = _pairwise(op, mi.stored_attention_mask, b, h, sq, sk, "mask_info attention_mask")
        if sliding is not None:
            parts.append(local_mask(sliding))
        if p.get("attention_mask") is not None:
            extra = _pairwise(op, p["attention_mask"], b, h, sq, sk, "attention_mask")
            pair = extra if pair is None else pair & extra
        mask = intersect(parts)
        mask.check(op, sq, sk)
        scale = p.get("softmax_scale")
        if scale is not None:
            from ..args import static_float

            scale = static_float(op, "softmax_scale", scale)
        if scale is None:
            scale = 1.0 / math.sqrt(d) if d else 1.0
        return BlockSparseAttentionArgs.build(
            op,
            p,
            softmax_aux=sinks_per_head(p.get("softmax_aux"), h),
            bias=bind_bias(op, p.get("bias"), b, h, sq, sk),
            q_segment_ids=q_seg,
            kv_segment_ids=kv_seg,
            attention_mask=pair,
            mask=mask,
            mask_key=_mask_key(mask),
            softmax_scale=scale,
        )

    def value_rules(self, a: BlockSparseAttentionArgs) -> list[ValueRule]:
        return [segment_ids_rule("q_segment_ids"), segment_ids_rule("kv_segment_ids")]

    def autotune_inputs(self, a: BlockSparseAttentionArgs, seed: int = 0) -> BlockSparseAttentionArgs:
        out = a.random_like(seed)

        def keep_or(x: Any, make: Any) -> Any:
            if x is None:
                return None
            c = concrete(x)
            return jnp.asarray(c) if c is not None else make()

        def segments(n: int) -> Any:
            return jnp.asarray(np.tile((np.arange(n) * 3 // n)[None], (a.batch, 1)), jnp.int32)

        return dataclasses.replace(
            out,
            q_segment_ids=keep_or(a.q_segment_ids, lambda: segments(a.seq_q)),
            kv_segment_ids=keep_or(a.kv_segment_ids, lambda: segments(a.seq_k)),
            attention_mask=keep_or(a.attention_mask, lambda: jnp.ones(a.attention_mask.shape, bool)),
        )
