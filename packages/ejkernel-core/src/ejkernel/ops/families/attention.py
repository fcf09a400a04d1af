"""Dense attention (BSHD): the contract shared by ``flash_attention``, ``scaled_dot_product_attention``
and ``ring_attention``: their arguments record, signature, binding, features and implementation base.

Canonical forms (what implementations see in :class:`AttentionArgs`):

- ``bias``: 4-D ``[batch or 1, num_heads or 1, seq_q or 1, seq_k or 1]`` (NumPy broadcasting from
  the right, each dim 1 or full). It is added after the soft cap: ``s = cap·tanh(qk·scale/cap) + bias``.
- ``sliding_window``: ``(left, right)``; query ``i`` sees keys ``j`` with
  ``i + off - left <= j <= i + off + right`` where ``off = seq_k - seq_q`` (bottom-right alignment,
  per sequence for varlen). ``causal`` means ``j <= i + off``.
- ``softmax_aux`` (attention sinks): ``[num_heads, num_sinks]`` logits that join each row's softmax
  denominator and contribute no value.
- MaskInfo is unpacked into ``q_segment_ids``/``kv_segment_ids`` (``-1`` = padding) and/or a
  pairwise ``attention_mask`` ``[batch or 1, num_heads or 1, seq_q, seq_k]``; its patterns are
  merged into ``causal``/``sliding_window``.
- GQA/MQA: query head ``j`` uses key/value head ``j // (num_heads // num_kv_heads)``.
- ``position_offset`` (set only by ring attention, per ring step; never by binding): an int32
  scalar, possibly traced, replacing ``off = seq_k - seq_q`` above: query ``i`` sits at key
  position ``i + position_offset`` for ``causal`` and ``sliding_window``. ``None`` keeps the
  bottom-right alignment. Implementations that cannot honour it declare the feature unsupported.
- Dropout drops attention probabilities (after the softmax, sinks included in its denominator)
  with the keep mask of :func:`~ejkernel.ops.families.attention_math.dropout_keep_mask`.

Kernels reproduce these semantics with :mod:`ejkernel.ops.families.attention_math`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from ...types.mask_info import MaskInfo
from ..args import (
    Args,
    ShardPlan,
    array,
    as_array,
    concrete,
    flag,
    is_traced,
    positive_float,
    shape_str,
    static,
    static_float,
    window,
)
from ..checks import ValueRule
from ..config import BwdParams, FwdParams, OpConfig
from ..impl import KernelImpl
from ..op import Op
from .attention_math import GOLDEN

__all__ = [
    "FEATURES",
    "AttentionArgs",
    "AttentionImpl",
    "AttentionOp",
    "BlockAttentionConfig",
    "bind_attention",
    "bind_bias",
    "dense_attention_signature",
    "earlier_attention_mask",
    "lengths_mask_info",
]

_NOT_SHARDED = {
    "seq_q": "every query needs every key; use ring_attention for sequence parallelism",
    "seq_k": "every query needs every key; use ring_attention for sequence parallelism",
    "head_dim": "a head is computed whole",
    "value_head_dim": "a head is computed whole",
}


class AttentionArgs(
    Args,
    shardable=("batch", "num_heads", "num_kv_heads"),
    shard_reasons=_NOT_SHARDED,
    tied=[("num_heads", "num_kv_heads")],
    divides=[("num_kv_heads", "num_heads")],
):
    """Canonical arguments of a dense attention call (see the module docstring)."""

    query: Any = array("batch", "seq_q", "num_heads", "head_dim", differentiable=True)
    key: Any = array("batch", "seq_k", "num_kv_heads", "head_dim", same_dtype_as="query", differentiable=True)
    value: Any = array("batch", "seq_k", "num_kv_heads", "value_head_dim", same_dtype_as="query", differentiable=True)
    bias: Any = array(
        "batch", "num_heads", "seq_q", "seq_k", optional=True, broadcast=True, ranks=(2, 3, 4), differentiable=True
    )
    q_segment_ids: Any = array("batch", "seq_q", kind="int", optional=True, label="mask_info q_segment_ids")
    kv_segment_ids: Any = array("batch", "seq_k", kind="int", optional=True, label="mask_info kv_segment_ids")
    attention_mask: Any = array(
        "batch", "num_heads", "seq_q", "seq_k", kind="bool", optional=True, broadcast=True,
        label="mask_info attention_mask",
    )  # fmt: skip
    cum_seqlens_q: Any = array("num_seqs_plus_1", kind="int", optional=True)
    cum_seqlens_k: Any = array("num_seqs_plus_1", kind="int", optional=True)
    softmax_aux: Any = array("num_heads", "num_sinks", optional=True, ranks=(1, 2), differentiable=True)
    dropout_seed: Any = array(kind="int", optional=True)
    position_offset: Any = array(kind="int", optional=True)
    causal: bool = static(False, parse=flag)
    softmax_scale: float = static(1.0, key="ignore")
    sliding_window: tuple[int, int] | None = static(None, parse=window)
    logits_soft_cap: float | None = static(None, key="presence", parse=positive_float)
    dropout_prob: float = static(0.0, key="presence")

    @property
    def num_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def dtype(self) -> Any:
        return self.query.dtype

    @property
    def is_varlen(self) -> bool:
        return self.cum_seqlens_q is not None

    @property
    def has_segments(self) -> bool:
        return self.q_segment_ids is not None


FEATURES: dict[str, tuple[str, Any]] = {
    "causal": ("causal mask, aligned bottom-right", lambda a: a.causal),
    "sliding_window": ("sliding window (left, right)", lambda a: a.sliding_window is not None),
    "logits_soft_cap": ("cap · tanh(logits / cap)", lambda a: a.logits_soft_cap is not None),
    "bias": ("additive bias (broadcast), differentiable", lambda a: a.bias is not None),
    "segment_ids": ("MaskInfo segment ids (packed sequences, -1 = padding)", lambda a: a.q_segment_ids is not None),
    "attention_mask": ("pairwise boolean mask", lambda a: a.attention_mask is not None),
    "varlen": ("cum_seqlens_q/k: sequences packed along one row", lambda a: a.cum_seqlens_q is not None),
    "softmax_aux": ("attention sinks", lambda a: a.softmax_aux is not None),
    "dropout": ("attention dropout", lambda a: a.dropout_prob > 0),
    "position_offset": ("explicit query position (ring attention's blocks)", lambda a: a.position_offset is not None),
    "gqa": ("fewer key/value heads than query heads", lambda a: a.num_heads != a.num_kv_heads),
    "cross": ("seq_q != seq_k", lambda a: a.seq_q != a.seq_k),
    "value_head_dim": ("value head dim differs from the query's", lambda a: a.value_head_dim != a.head_dim),
    # Combinations whose meaning depends on the bottom-right alignment or on the right side of a
    # window: a kernel whose masks are aligned top-left, or only reach left, declares them.
    "aligned_cross": (
        "causal or a sliding window with seq_q != seq_k (aligned bottom-right)",
        lambda a: (a.causal or a.sliding_window is not None) and a.seq_q != a.seq_k,
    ),
    "window_right": (
        "a sliding window reaching right of the diagonal (right > 0) without causal",
        lambda a: a.sliding_window is not None and a.sliding_window[1] > 0 and not a.causal,
    ),
}


@dataclasses.dataclass(frozen=True)
class BlockAttentionConfig(OpConfig):
    """Config of a dense attention op: forward and backward tiling of its kernels.

    Attributes:
        fwd_params: forward tiling (``q_blocksize``/``kv_blocksize``; warps and stages on GPU).
        bwd_params: backward tiling.
        platform: ``"auto"`` or an implementation (``"xla"``, ``"triton"``, ...).
        backend: ``"any"`` or ``"gpu"``/``"tpu"``/``"cpu"``.

    ``None`` fields are chosen by the implementation's heuristic (or by autotuning).
    """

    fwd_params: FwdParams | None = None
    bwd_params: BwdParams | None = None


def bind_bias(op: str, bias: Any, b: int, h: int, sq: int, sk: int) -> Any:
    """A 2-, 3- or 4-D bias as the canonical 4-D broadcast form (checked against the record)."""
    if bias is None:
        return None
    bias = as_array(op, "bias", bias, ndim=(2, 3, 4), layout="broadcastable to [batch, num_heads, seq_q, seq_k]")
    full = (b, h, sq, sk)
    shape4 = (1,) * (4 - bias.ndim) + tuple(int(d) for d in bias.shape)
    if any(d not in (1, f) for d, f in zip(shape4, full, strict=True)):
        raise ValueError(
            f"{op}: bias {shape_str(bias)} does not broadcast to [batch, num_heads, seq_q, seq_k] = {full} "
            "(each dim must be 1 or full)"
        )
    return bias.reshape(shape4)


def _merge_mask_info(op: str, mi: Any, b: int, h: int, sq: int, sk: int) -> tuple[Any, Any, Any]:
    if not isinstance(mi, MaskInfo):
        raise TypeError(f"{op}: mask_info must be an ejkernel.types.MaskInfo, got {type(mi).__name__}")
    q_seg = kv_seg = mask = None
    if mi.q_segment_ids is not None:
        q_seg, kv_seg = mi.q_segment_ids, mi.kv_segment_ids
        if tuple(q_seg.shape) != (b, sq):
            raise ValueError(f"{op}: mask_info q_segment_ids {shape_str(q_seg)} must be [batch, seq_q] = {(b, sq)}")
        if tuple(kv_seg.shape) != (b, sk):
            raise ValueError(f"{op}: mask_info kv_segment_ids {shape_str(kv_seg)} must be [batch, seq_k] = {(b, sk)}")
    if mi.stored_attention_mask is not None:
        mask = mi.stored_attention_mask
        mb, mh, msq, msk = (int(d) for d in mask.shape)
        if (msq, msk) != (sq, sk) or mb not in (1, b) or mh not in (1, h):
            raise ValueError(
                f"{op}: mask_info attention_mask {shape_str(mask)} must be [batch or 1, num_heads or 1, seq_q, seq_k] "
                f"with batch={b}, num_heads={h}, seq_q={sq}, seq_k={sk}"
            )
    return q_seg, kv_seg, mask


def _bind_cu_seqlens(op: str, cu_q: Any, cu_k: Any, b: int, sq: int, sk: int) -> tuple[Any, Any]:
    if cu_q is None:
        if cu_k is not None:
            raise ValueError(f"{op}: cum_seqlens_k needs cum_seqlens_q")
        return None, None
    if cu_k is None:
        if sq != sk:
            raise ValueError(
                f"{op}: cum_seqlens_k is required when seq_q ({sq}) != seq_k ({sk}); it defaults to cum_seqlens_q only "
                "for self-attention"
            )
        cu_k = cu_q
    if b != 1:
        raise ValueError(
            f"{op}: with cum_seqlens_q the sequences are packed along seq in one row: query batch must be 1, got {b}"
        )
    if cu_q.shape != cu_k.shape or cu_q.shape[0] < 2:
        raise ValueError(
            f"{op}: cum_seqlens_q {shape_str(cu_q)} and cum_seqlens_k {shape_str(cu_k)} must both be "
            "[num_seqs + 1] with num_seqs >= 1"
        )
    return cu_q, cu_k


def lengths_mask_info(op: str, query: Any, key: Any, q_lens: Any, k_lens: Any, mask_info: Any) -> MaskInfo:
    """Per-example valid lengths (``jax.nn.dot_product_attention``'s ``query_seq_lengths`` /
    ``key_value_seq_lengths``) as a :class:`MaskInfo`: query row ``i`` of example ``b`` is real iff
    ``i < q_lens[b]``, key ``j`` iff ``j < k_lens[b]`` (``None``: every row of that side is real);
    the other rows are padding (segment ``-1``). ``mask_info``'s own segments, mask and patterns
    stay (both must allow a pair).

    ``q_lens`` / ``k_lens``: integer ``[batch]`` arrays, here under the names earlier
    ``scaled_dot_product_attention`` releases gave them (``cum_seqlens_q`` / ``cum_seqlens_k``)."""
    q = as_array(op, "query", query, ndim=4, layout="[batch, seq_q, num_heads, head_dim]")
    k = as_array(op, "key", key, ndim=4, layout="[batch, seq_k, num_kv_heads, head_dim]")
    b, sq, sk = int(q.shape[0]), int(q.shape[1]), int(k.shape[1])
    valid = []
    for name, lens, n in (("cum_seqlens_q", q_lens, sq), ("cum_seqlens_k", k_lens, sk)):
        if lens is None:
            valid.append(jnp.ones((b, n), bool))
            continue
        lens = as_array(op, name, lens, ndim=1, layout="[batch] (per-example lengths)")
        if not jnp.issubdtype(lens.dtype, jnp.integer):
            raise TypeError(f"{op}: {name} (per-example lengths) must have an integer dtype, got {lens.dtype}")
        if int(lens.shape[0]) != b:
            raise ValueError(
                f"{op}: {name} holds per-example lengths [batch] = [{b}] (query {shape_str(q)}), got "
                f"{shape_str(lens)}; packed sequence boundaries [num_seqs + 1] go in "
                f"{name.replace('cum_', 'cu_')}"
            )
        valid.append(jnp.arange(n, dtype=jnp.int32)[None, :] < lens.astype(jnp.int32)[:, None])
    if mask_info is None:
        mask_info = MaskInfo()
    elif not isinstance(mask_info, MaskInfo):
        raise TypeError(f"{op}: mask_info must be an ejkernel.types.MaskInfo, got {type(mask_info).__name__}")
    segments = [mask_info.q_segment_ids, mask_info.kv_segment_ids]
    ids = []
    for valid_side, seg, name, n in zip(valid, segments, ("q_segment_ids", "kv_segment_ids"), (sq, sk), strict=True):
        if seg is None:
            seg = jnp.zeros((b, n), jnp.int32)
        elif tuple(seg.shape) != (b, n):
            raise ValueError(f"{op}: mask_info {name} {shape_str(seg)} must be [batch, seq] = {(b, n)}")
        ids.append(jnp.where(valid_side, seg, -1).astype(jnp.int32))
    return mask_info._evolve(q_segment_ids=ids[0], kv_segment_ids=ids[1])


def earlier_attention_mask(op: str, mask: Any, query: Any, key: Any) -> MaskInfo:
    """Earlier releases' ``attention(..., attention_mask=)`` as a :class:`MaskInfo`: ``True`` /
    nonzero = may attend; ``[batch, heads, seq_q, seq_k]`` with ``heads`` = the query heads, the
    key/value heads (each shared by its group of query heads) or 1; ``[batch, seq_q, seq_k]``; or
    ``[batch, seq_k]`` (keys only: every query sees the same keys)."""
    q = as_array(op, "query", query, ndim=4, layout="[batch, seq_q, num_heads, head_dim]")
    k = as_array(op, "key", key, ndim=4, layout="[batch, seq_k, num_kv_heads, head_dim]")
    b, sq, h = (int(d) for d in q.shape[:3])
    sk, hk = int(k.shape[1]), int(k.shape[2])
    layout = "[batch, heads, seq_q, seq_k], [batch, seq_q, seq_k] or [batch, seq_k]"
    mask = as_array(op, "attention_mask", mask, ndim=(2, 3, 4), layout=layout)
    if not (mask.dtype == jnp.bool_ or jnp.issubdtype(mask.dtype, jnp.integer)):
        raise TypeError(f"{op}: attention_mask must be a bool or integer array, got {mask.dtype}")
    want = {2: (b, sk), 3: (b, sq, sk), 4: (b, None, sq, sk)}[mask.ndim]
    heads_ok = mask.ndim != 4 or int(mask.shape[1]) in (1, h, hk)
    if not heads_ok or any(w is not None and int(d) != w for d, w in zip(mask.shape, want, strict=True)):
        raise ValueError(
            f"{op}: attention_mask {shape_str(mask)} must be {layout} with batch={b}, seq_q={sq}, seq_k={sk} "
            f"and heads 1, {h} (query heads) or {hk} (key/value heads); query {shape_str(q)}, key {shape_str(k)}"
        )
    mask = mask.astype(bool)
    if mask.ndim == 2:
        mask = jnp.broadcast_to(mask[:, None, None, :], (b, 1, sq, sk))
    elif mask.ndim == 3:
        mask = mask[:, None]
    elif int(mask.shape[1]) == hk != h:
        mask = jnp.repeat(mask, h // hk, axis=1)  # query head j uses key/value head j // (h // hk)
    return MaskInfo.from_attention_mask(mask)


def cu_seqlens_rule(name: str, total: int) -> ValueRule:
    """``name`` (cumulative lengths of packed sequences) starts at 0, never decreases, ends <= total."""

    def bad(xp: Any, cu: Any) -> Any:
        prev = xp.concatenate([cu[:1], cu[:-1]])
        first = xp.arange(cu.shape[0]) == 0
        return (first & (cu != 0)) | (cu < prev) | (cu > total)

    return ValueRule((name,), f"must start at 0, never decrease and end at most at the packed length {total}", bad)


def segment_ids_rule(name: str) -> ValueRule:
    """Segment ids are labels >= 0, or -1 for padding."""
    return ValueRule((name,), "must be >= -1 (a segment label, or -1 for padding)", lambda xp, s: s < -1)


def _dropout_seed(op: str, prob: float, seed: Any, traced: bool) -> Any:
    """The uint32 seed of the dropout mask. ``seed``: an int, a scalar integer array or a
    ``jax.random`` key. Without one, an eager call draws a fresh seed from the OS (a new mask each
    call, as earlier ejkernel releases did); under ``jit`` a seed is required (a traced function
    must not draw hidden randomness: pass ``dropout_seed``, e.g. ``jax.random.bits(key)``)."""
    if prob == 0:
        return None
    if seed is None:
        if traced:
            raise ValueError(
                f"{op}: dropout_prob > 0 under jit needs dropout_seed (an int, a scalar integer array or a "
                "jax.random key, e.g. dropout_seed=jax.random.fold_in(key, step)); outside jit a fresh seed is drawn"
            )
        return jnp.asarray(np.random.SeedSequence().generate_state(1)[0], jnp.uint32)
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return jnp.asarray(int(seed) & 0xFFFFFFFF, jnp.uint32)
    seed = as_array(op, "dropout_seed", seed, ndim=0, layout="(a scalar)")
    if not jnp.issubdtype(seed.dtype, jnp.integer):
        raise TypeError(f"{op}: dropout_seed must have an integer dtype, got {seed.dtype}")
    return seed.astype(jnp.uint32)


def bind_attention(
    op: str, p: dict[str, Any], *, keys_total: int | None = None, record: type[AttentionArgs] = AttentionArgs
) -> AttentionArgs:
    """Canonicalize dense-attention parameters (names as in ``flash_attention``), whose arrays
    :meth:`Args.precheck` has already made arrays of the right rank and kind.

    ``keys_total``: the number of keys a bias or pairwise mask spans (ring attention: every key
    of the ring); default ``seq_k``. ``record``: the record class (a subclass of
    :class:`AttentionArgs` adding an op's own options).
    """
    bind_compat_options(op, p)
    q, k = p["query"], p["key"]
    b, sq, h, d = (int(x) for x in q.shape)
    sk = int(k.shape[1])
    sk_mask = sk if keys_total is None else keys_total

    causal = flag(op, "causal", p.get("causal", False))
    sliding = window(op, "sliding_window", p.get("sliding_window"))
    scale = static_float(op, "softmax_scale", p.get("softmax_scale"))
    if scale is None:
        scale = 1.0 / math.sqrt(d) if d else 1.0
    dropout_prob = static_float(op, "dropout_prob", p.get("dropout_prob", 0.0), positive=False, allow_none=False)
    assert dropout_prob is not None
    if not 0.0 <= dropout_prob < 1.0:
        raise ValueError(f"{op}: dropout_prob must be in [0, 1), got {dropout_prob}")
    seed = _dropout_seed(op, dropout_prob, p.get("dropout_seed"), is_traced(q))

    bias = bind_bias(op, p.get("bias"), b, h, sq, sk_mask)
    q_seg = kv_seg = mask = None
    mi = p.get("mask_info")
    if mi is not None:
        q_seg, kv_seg, mask = _merge_mask_info(op, mi, b, h, sq, sk_mask)
        causal = causal or mi.causal
        if mi.sliding_window is not None:
            if sliding is not None and sliding != mi.sliding_window:
                raise ValueError(
                    f"{op}: sliding_window={sliding} contradicts mask_info's sliding window {mi.sliding_window}"
                )
            sliding = mi.sliding_window
    cu_q, cu_k = _bind_cu_seqlens(op, p.get("cum_seqlens_q"), p.get("cum_seqlens_k"), b, sq, sk)
    if cu_q is not None and (q_seg is not None or mask is not None):
        raise ValueError(f"{op}: pass either cum_seqlens_q/k or a mask_info with segments or a mask, not both")
    aux = p.get("softmax_aux")
    if aux is not None and aux.ndim == 1:
        # [num_heads]: one sink per head; any other length: [num_sinks] shared by every head
        # (earlier releases' 1-D form).
        aux = aux[:, None] if aux.shape[0] == h else jnp.broadcast_to(aux[None, :], (h, aux.shape[0]))
    return record.build(
        op,
        p,
        bias=bias,
        q_segment_ids=q_seg,
        kv_segment_ids=kv_seg,
        attention_mask=None if mask is None else mask.astype(bool),
        cum_seqlens_q=cu_q,
        cum_seqlens_k=cu_k,
        softmax_aux=aux,
        dropout_seed=seed,
        causal=causal,
        softmax_scale=scale,
        sliding_window=sliding,
        dropout_prob=dropout_prob,
    )


def dense_attention_signature(
    query: Float[Array, "batch seq_q num_heads head_dim"],
    key: Float[Array, "batch seq_k num_kv_heads head_dim"],
    value: Float[Array, "batch seq_k num_kv_heads value_head_dim"],
    bias: Float[Array, "..."] | None = None,
    cum_seqlens_q: Int[Array, "num_seqs_plus_1"] | None = None,
    cum_seqlens_k: Int[Array, "num_seqs_plus_1"] | None = None,
    softmax_aux: Float[Array, "num_heads"] | Float[Array, "num_heads num_sinks"] | None = None,
    *,
    mask_info: MaskInfo | None = None,
    causal: bool = False,
    softmax_scale: float | None = None,
    sliding_window: int | tuple[int, int] | None = None,
    logits_soft_cap: float | None = None,
    dropout_prob: float = 0.0,
    dropout_seed: int | Int[Array, ""] | None = None,
    init_bias: Callable[[], Any] | None = None,
    normalize_output: bool = True,
    precision: Any = jax.lax.Precision.DEFAULT,
    logits_dtype: Any = jnp.float32,
) -> Float[Array, "batch seq_q num_heads value_head_dim"]:
    """The parameters shared by the dense attention ops (declared once; see ``flash_attention``).

    The arrays come first and may be passed by position, in the order earlier ejkernel releases
    documented (``query, key, value, bias, cum_seqlens_q, cum_seqlens_k, softmax_aux``).
    """
    raise NotImplementedError


def bind_compat_options(op: str, p: dict[str, Any]) -> None:
    """The options earlier ejkernel releases took that change nothing here, checked to be the
    values that make them no-ops (anything else is an error saying what to use), and
    ``init_bias`` (a callable making ``bias``). Removes them from ``p``."""
    init_bias = p.pop("init_bias", None)
    if init_bias is not None:
        if not callable(init_bias):
            raise TypeError(f"{op}: init_bias must be a callable returning the bias, got {type(init_bias).__name__}")
        if p.get("bias") is not None:
            raise ValueError(f"{op}: pass bias or init_bias, not both")
        p["bias"] = init_bias()
    if p.pop("normalize_output", True) is not True:
        raise ValueError(
            f"{op}: normalize_output must be True: the kernels return the normalized softmax output only "
            "(for partial results to merge, use the log-sum-exp protocol of ejkernel.ops.families.attention)"
        )
    precision = p.pop("precision", None)
    if precision is not None and str(precision).split(".")[-1].upper() not in ("DEFAULT", "0"):
        raise ValueError(
            f"{op}: precision={precision!r} is not supported: the kernels multiply in the inputs' dtype with "
            "float32 accumulation (precision=DEFAULT); for full float32 products use float32 inputs with "
            "scaled_dot_product_attention under jax.default_matmul_precision('highest')"
        )
    logits_dtype = p.pop("logits_dtype", None)
    if logits_dtype is not None:
        try:
            ok = jnp.dtype(logits_dtype) == jnp.float32
        except TypeError:
            raise TypeError(f"{op}: logits_dtype must be a dtype, got {logits_dtype!r}") from None
        if not ok:
            raise ValueError(
                f"{op}: logits_dtype must be float32 (the kernels keep logits in float32), got {jnp.dtype(logits_dtype).name}"
            )


class AttentionOp(Op):
    """Shared behaviour of the dense (BSHD) attention ops."""

    trainable = True
    args_cls = AttentionArgs
    output_axes = ("batch", "seq_q", "num_heads", "value_head_dim")
    features: ClassVar[dict[str, tuple[str, Any]]] = FEATURES

    def bind(self, params: dict[str, Any]) -> Args:
        seed = params.get("dropout_seed")
        if isinstance(seed, jax.Array) and jnp.issubdtype(seed.dtype, jax.dtypes.prng_key):
            if seed.ndim != 0:
                raise ValueError(
                    f"{self.name}: dropout_seed as a jax.random key must be one key, got shape {seed.shape}"
                )
            params = {**params, "dropout_seed": jax.random.bits(seed, dtype=jnp.uint32)}
        return super().bind(params)

    def canonicalize(self, params: dict[str, Any]) -> AttentionArgs:
        return bind_attention(self.name, params)

    def value_rules(self, a: AttentionArgs) -> list[ValueRule]:
        return [
            cu_seqlens_rule("cum_seqlens_q", a.seq_q),
            cu_seqlens_rule("cum_seqlens_k", a.seq_k),
            segment_ids_rule("q_segment_ids"),
            segment_ids_rule("kv_segment_ids"),
        ]

    def autotune_inputs(self, a: AttentionArgs, seed: int = 0) -> AttentionArgs:
        rng = np.random.default_rng(seed)
        out = a.random_like(seed)

        def keep_or(x: Any, make: Any) -> Any:
            if x is None:
                return None
            c = concrete(x)
            return jnp.asarray(c) if c is not None else make()

        def segments(n: int) -> Any:
            return jnp.asarray(np.tile((np.arange(n) * 3 // n)[None], (a.batch, 1)), jnp.int32)

        def cu(total: int) -> Any:
            return jnp.asarray(np.linspace(0, total, a.cum_seqlens_q.shape[0]).astype(np.int32))

        return dataclasses.replace(
            out,
            q_segment_ids=keep_or(a.q_segment_ids, lambda: segments(a.seq_q)),
            kv_segment_ids=keep_or(a.kv_segment_ids, lambda: segments(a.seq_k)),
            attention_mask=keep_or(a.attention_mask, lambda: jnp.asarray(rng.random(a.attention_mask.shape) < 0.9)),
            cum_seqlens_q=keep_or(a.cum_seqlens_q, lambda: cu(a.seq_q)),
            cum_seqlens_k=keep_or(a.cum_seqlens_k, lambda: cu(a.seq_k)),
            dropout_seed=None if a.dropout_seed is None else jnp.asarray(1234, jnp.uint32),
            position_offset=keep_or(a.position_offset, lambda: jnp.asarray(0, jnp.int32)),
        )

    def localize(self, a: AttentionArgs, plan: ShardPlan, mesh: Any) -> AttentionArgs:
        if a.dropout_seed is None:
            return a
        # Each shard holds other (batch, head) pairs: give each its own dropout stream.
        axes: list[str] = []
        for entry in (plan.axes.get("batch"), plan.axes.get("num_heads")):
            if entry is not None:
                axes.extend(entry if isinstance(entry, tuple) else (entry,))
        if not axes:
            return a
        idx = jax.lax.axis_index(tuple(axes)).astype(jnp.uint32)
        seed = a.dropout_seed + (idx + jnp.uint32(1)) * jnp.uint32(GOLDEN)
        return dataclasses.replace(a, dropout_seed=seed)


class AttentionImpl(KernelImpl):
    """Base of dense attention implementations.

    **The log-sum-exp protocol** (optional): an implementation that sets ``supports_lse = True``
    and implements :meth:`forward_lse` and :meth:`backward_lse` can serve as the per-block kernel
    of ``ring_attention``, which combines the blocks' partial results itself.
    """

    supports_lse: bool = False

    def forward_lse(self, args: AttentionArgs, cfg: OpConfig) -> tuple[Any, Any]:
        """The forward of one attention call, with its log-sum-exp (when ``supports_lse``).

        Args:
            args: an ``AttentionArgs`` this implementation accepted. Callers of the protocol pass
                no ``softmax_aux``, no dropout and no ``cum_seqlens``; ``position_offset`` may be
                set (a traced int32 scalar): an implementation that cannot honour it declares the
                ``position_offset`` feature unsupported.
            cfg: a complete config of the op (e.g. ``FlashAttentionConfig``), as for :meth:`run`.

        Returns:
            ``(out, lse)``: ``out [batch, seq_q, num_heads, value_head_dim]`` in float32 or the
            query's dtype, normalized within this call; ``lse`` float32
            ``[batch, num_heads, seq_q]``, the natural log of each row's softmax denominator
            ``log Σ_j exp(s_ij)`` over the logits ``s`` exactly as the op computes them (scaled,
            soft-capped, biased); ``-inf`` (and ``out = 0``) for a row that sees no key. It is
            not differentiated: the caller differentiates through :meth:`backward_lse`.
        """
        raise NotImplementedError(f"{type(self).__name__} does not provide the log-sum-exp protocol")

    def backward_lse(self, args: AttentionArgs, cfg: OpConfig, out: Any, lse: Any, dout: Any) -> tuple[Any, ...]:
        """Gradients of one attention call given the *global* output and log-sum-exp (FA2 style).

        The call is one block of a larger softmax (e.g. one ring step): ``out`` ``[batch, seq_q,
        num_heads, value_head_dim]`` and ``lse`` (float32 ``[batch, num_heads, seq_q]``, ``-inf``
        for rows that see no key anywhere) are those of the whole softmax the block is part of,
        and ``dout`` is the cotangent of that global ``out``. With ``P = exp(s - lse)`` and
        ``D = rowsum(dout ∘ out)``: ``dv = Pᵀ dout``, ``dS = P ∘ (dout vᵀ - D)``, ``dq = dS k ·
        scale``, ``dk = dSᵀ q · scale`` (through the soft cap's derivative where set).

        Returns:
            ``(dq, dk, dv, dbias)``: this block's contributions, shaped like ``query``, ``key``,
            ``value`` and ``bias`` (its broadcast shape, summed over broadcast dims), in float32
            or the inputs' dtype; ``dbias`` is ``None`` when ``args.bias`` is ``None``.
        """
        raise NotImplementedError(f"{type(self).__name__} does not provide the log-sum-exp protocol")
