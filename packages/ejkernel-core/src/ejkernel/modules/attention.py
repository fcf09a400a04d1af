"""Dense attention (BSHD): the arguments record and its binding, shared by the dense ops.

``flash_attention`` and ``scaled_dot_product_attention`` (and later ``ring_attention``) take the
same arguments; :func:`bind_attention` validates and canonicalizes them once into an
:class:`AttentionArgs` record, which is all an implementation sees.

Canonical forms:

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
- ``position_offset`` (set only by ring attention, per ring step; never by ``bind``): an int32
  scalar, possibly traced, replacing ``off = seq_k - seq_q`` above: query ``i`` sits at key
  position ``i + position_offset`` for ``causal`` and ``sliding_window``. ``None`` keeps the
  bottom-right alignment. Implementations that cannot honour it decline calls that set it.
- Dropout drops attention probabilities (after the softmax, sinks included in its denominator)
  with the keep mask of :func:`dropout_keep_mask`, a counter-based hash of the seed and the
  global (batch, head, query, key) indices: independent of tiling, so every backend and the
  reference draw the same mask.

Backends use :func:`key_bounds` and :func:`dropout_keep_mask` to reproduce these semantics, and
:func:`vary_like` for loop carries that must run inside ``shard_map(check_vma=True)``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..ops.kernel import Kernel, args_record, array_field, describe_array
from ..types.mask_info import MaskInfo, canonical_window
from . import _validate as V

__all__ = ["AttentionArgs", "DenseAttentionOp", "bind_attention", "dropout_keep_mask", "key_bounds", "vary_like"]


@args_record
class AttentionArgs:
    """Canonical arguments of a dense attention call (see the module docstring)."""

    query: Any = array_field()
    key: Any = array_field()
    value: Any = array_field()
    bias: Any = array_field(None)
    q_segment_ids: Any = array_field(None)
    kv_segment_ids: Any = array_field(None)
    attention_mask: Any = array_field(None)
    cum_seqlens_q: Any = array_field(None)
    cum_seqlens_k: Any = array_field(None)
    softmax_aux: Any = array_field(None)
    dropout_seed: Any = array_field(None)
    position_offset: Any = array_field(None)
    causal: bool = False
    softmax_scale: float = 1.0
    sliding_window: tuple[int, int] | None = None
    logits_soft_cap: float | None = None
    dropout_prob: float = 0.0

    @property
    def batch(self) -> int:
        return int(self.query.shape[0])

    @property
    def seq_q(self) -> int:
        return int(self.query.shape[1])

    @property
    def seq_k(self) -> int:
        return int(self.key.shape[1])

    @property
    def num_heads(self) -> int:
        return int(self.query.shape[2])

    @property
    def num_kv_heads(self) -> int:
        return int(self.key.shape[2])

    @property
    def head_dim(self) -> int:
        return int(self.query.shape[3])

    @property
    def value_head_dim(self) -> int:
        return int(self.value.shape[3])

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


def _merge_mask_info(op: str, mi: Any, b: int, h: int, sq: int, sk: int) -> tuple[Any, Any, Any]:
    if not isinstance(mi, MaskInfo):
        raise TypeError(f"{op}: mask_info must be an ejkernel.types.MaskInfo, got {type(mi).__name__}")
    q_seg = kv_seg = mask = None
    if mi.q_segment_ids is not None:
        q_seg, kv_seg = mi.q_segment_ids, mi.kv_segment_ids
        if tuple(q_seg.shape) != (b, sq):
            raise ValueError(f"{op}: mask_info q_segment_ids {V.shape_str(q_seg)} must be [batch, seq_q] = {(b, sq)}")
        if tuple(kv_seg.shape) != (b, sk):
            raise ValueError(f"{op}: mask_info kv_segment_ids {V.shape_str(kv_seg)} must be [batch, seq_k] = {(b, sk)}")
    if mi.attention_mask is not None:
        mask = mi.attention_mask
        mb, mh, msq, msk = (int(d) for d in mask.shape)
        if (msq, msk) != (sq, sk) or mb not in (1, b) or mh not in (1, h):
            raise ValueError(
                f"{op}: mask_info attention_mask {V.shape_str(mask)} must be [batch or 1, num_heads or 1, seq_q, seq_k] "
                f"with batch={b}, num_heads={h}, seq_q={sq}, seq_k={sk}"
            )
    return q_seg, kv_seg, mask


def _bind_cu_seqlens(op: str, cu_q: Any, cu_k: Any, b: int, sq: int, sk: int) -> tuple[Any, Any]:
    if cu_q is None:
        if cu_k is not None:
            raise ValueError(f"{op}: cum_seqlens_k needs cum_seqlens_q")
        return None, None
    cu_q = V.as_array(op, "cum_seqlens_q", cu_q, ndim=1, layout="[num_seqs + 1]")
    V.check_int(op, "cum_seqlens_q", cu_q)
    if cu_k is None:
        if sq != sk:
            raise ValueError(
                f"{op}: cum_seqlens_k is required when seq_q ({sq}) != seq_k ({sk}); it defaults to cum_seqlens_q only "
                "for self-attention"
            )
        cu_k = cu_q
    cu_k = V.as_array(op, "cum_seqlens_k", cu_k, ndim=1, layout="[num_seqs + 1]")
    V.check_int(op, "cum_seqlens_k", cu_k)
    if b != 1:
        raise ValueError(
            f"{op}: with cum_seqlens_q the sequences are packed along seq in one row: query batch must be 1, got {b}"
        )
    if cu_q.shape != cu_k.shape or cu_q.shape[0] < 2:
        raise ValueError(
            f"{op}: cum_seqlens_q {V.shape_str(cu_q)} and cum_seqlens_k {V.shape_str(cu_k)} must both be "
            "[num_seqs + 1] with num_seqs >= 1"
        )
    for name, cu, total in (("cum_seqlens_q", cu_q, sq), ("cum_seqlens_k", cu_k, sk)):
        c = V.concrete(cu)
        if c is None:
            continue
        if c[0] != 0 or (np.diff(c) < 0).any() or c[-1] > total:
            raise ValueError(
                f"{op}: {name} must start at 0, never decrease and end at most at the packed length {total}; "
                f"got {c.tolist()}"
            )
    return cu_q.astype(jnp.int32), cu_k.astype(jnp.int32)


def _bind_bias(op: str, bias: Any, b: int, h: int, sq: int, sk: int) -> Any:
    if bias is None:
        return None
    bias = V.as_array(op, "bias", bias, ndim=(2, 3, 4), layout="broadcastable to [batch, num_heads, seq_q, seq_k]")
    V.check_float(op, "bias", bias)
    full = (b, h, sq, sk)
    shape4 = (1,) * (4 - bias.ndim) + tuple(int(d) for d in bias.shape)
    if any(d not in (1, f) for d, f in zip(shape4, full, strict=True)):
        raise ValueError(
            f"{op}: bias {V.shape_str(bias)} does not broadcast to [batch, num_heads, seq_q, seq_k] = {full} "
            "(each dim must be 1 or full)"
        )
    return bias.reshape(shape4)


def bind_attention(op: str, p: dict[str, Any]) -> AttentionArgs:
    """Validate and canonicalize dense-attention parameters (names as in ``flash_attention``)."""
    layout_q = "[batch, seq_q, num_heads, head_dim]"
    layout_kv = "[batch, seq_k, num_kv_heads, head_dim]"
    q = V.as_array(op, "query", p["query"], ndim=4, layout=layout_q)
    k = V.as_array(op, "key", p["key"], ndim=4, layout=layout_kv)
    v = V.as_array(op, "value", p["value"], ndim=4, layout="[batch, seq_k, num_kv_heads, value_head_dim]")
    for name, x in (("query", q), ("key", k), ("value", v)):
        V.check_float(op, name, x)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"{op}: query, key and value must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    b, sq, h, d = (int(x) for x in q.shape)
    bk, sk, hk, dk = (int(x) for x in k.shape)
    bv, skv, hv, _ = (int(x) for x in v.shape)
    shapes = f"query {V.shape_str(q)}, key {V.shape_str(k)}, value {V.shape_str(v)}"
    if not (b == bk == bv):
        raise ValueError(f"{op}: batch sizes differ: {shapes}")
    if sk != skv:
        raise ValueError(f"{op}: key and value sequence lengths differ: {shapes}")
    if dk != d:
        raise ValueError(f"{op}: key head_dim must equal query head_dim: {shapes}")
    if hv != hk:
        raise ValueError(f"{op}: key and value must have the same num_kv_heads: {shapes}")
    if hk == 0 or h % hk:
        raise ValueError(f"{op}: num_heads ({h}) must be a multiple of num_kv_heads ({hk}) for GQA/MQA: {shapes}")
    if min(b, sq, sk, h, d) == 0 or v.shape[3] == 0:
        raise ValueError(f"{op}: empty dimensions are not supported: {shapes}")

    causal = V.static_bool(op, "causal", p.get("causal", False))
    window = canonical_window(p.get("sliding_window"))
    scale = V.static_float(op, "softmax_scale", p.get("softmax_scale"))
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    soft_cap = V.static_float(op, "logits_soft_cap", p.get("logits_soft_cap"))

    dropout_prob = V.static_float(op, "dropout_prob", p.get("dropout_prob", 0.0), positive=False, allow_none=False)
    assert dropout_prob is not None
    if not 0.0 <= dropout_prob < 1.0:
        raise ValueError(f"{op}: dropout_prob must be in [0, 1), got {dropout_prob}")
    seed = p.get("dropout_seed")
    if dropout_prob > 0:
        if seed is None:
            raise ValueError(f"{op}: dropout_prob > 0 needs dropout_seed (an int or a scalar integer array)")
        if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            seed = jnp.asarray(int(seed) & 0xFFFFFFFF, jnp.uint32)
        else:
            seed = V.as_array(op, "dropout_seed", seed, ndim=0, layout="(a scalar)")
            V.check_int(op, "dropout_seed", seed)
            seed = seed.astype(jnp.uint32)
    else:
        seed = None

    bias = _bind_bias(op, p.get("bias"), b, h, sq, sk)
    q_seg = kv_seg = mask = None
    mi = p.get("mask_info")
    if mi is not None:
        q_seg, kv_seg, mask = _merge_mask_info(op, mi, b, h, sq, sk)
        causal = causal or mi.causal
        if mi.sliding_window is not None:
            if window is not None and window != mi.sliding_window:
                raise ValueError(
                    f"{op}: sliding_window={window} contradicts mask_info's sliding window {mi.sliding_window}"
                )
            window = mi.sliding_window
    cu_q, cu_k = _bind_cu_seqlens(op, p.get("cum_seqlens_q"), p.get("cum_seqlens_k"), b, sq, sk)
    if cu_q is not None and (q_seg is not None or mask is not None):
        raise ValueError(f"{op}: pass either cum_seqlens_q/k or a mask_info with segments or a mask, not both")
    aux = V.softmax_aux(op, p.get("softmax_aux"), h)

    return AttentionArgs(
        query=q,
        key=k,
        value=v,
        bias=bias,
        q_segment_ids=q_seg,
        kv_segment_ids=kv_seg,
        attention_mask=mask,
        cum_seqlens_q=cu_q,
        cum_seqlens_k=cu_k,
        softmax_aux=aux,
        dropout_seed=seed,
        causal=causal,
        softmax_scale=scale,
        sliding_window=window,
        logits_soft_cap=soft_cap,
        dropout_prob=dropout_prob,
    )


def key_bounds(args: AttentionArgs) -> tuple[jax.Array, jax.Array]:
    """Per query row, the half-open range ``[lo, hi)`` of key indices it may attend.

    Combines causal, sliding window, ``position_offset`` and varlen (segment ids and pairwise
    masks apply on top, elementwise). Rows outside every varlen sequence get an empty range.
    Returns two int32 ``[seq_q]`` arrays; works under ``jit``.
    """
    sq, sk = args.seq_q, args.seq_k
    i = jnp.arange(sq, dtype=jnp.int32)
    left, right = args.sliding_window if args.sliding_window is not None else (None, None)
    if args.position_offset is not None and args.cum_seqlens_q is not None:
        raise ValueError("position_offset cannot be combined with cum_seqlens (varlen)")
    if args.cum_seqlens_q is None:
        off = sk - sq if args.position_offset is None else jnp.asarray(args.position_offset, jnp.int32)
        pos = i + off
        k_start = jnp.zeros_like(i)
        len_k = jnp.full_like(i, sk)
        valid = jnp.ones_like(i, dtype=bool)
    else:
        cu_q, cu_k = args.cum_seqlens_q, args.cum_seqlens_k
        n = cu_q.shape[0] - 1
        s = jnp.clip(jnp.searchsorted(cu_q, i, side="right").astype(jnp.int32) - 1, 0, n - 1)
        valid = (i >= cu_q[0]) & (i < cu_q[n])
        len_q = cu_q[s + 1] - cu_q[s]
        k_start = cu_k[s]
        len_k = cu_k[s + 1] - cu_k[s]
        pos = i - cu_q[s] + (len_k - len_q)
    lo_rel = jnp.zeros_like(i)
    hi_rel = len_k
    if args.causal:
        hi_rel = jnp.minimum(hi_rel, pos + 1)
    if left is not None:
        lo_rel = jnp.maximum(lo_rel, pos - left)
        hi_rel = jnp.minimum(hi_rel, pos + right + 1)
    lo = k_start + jnp.clip(lo_rel, 0, len_k)
    hi = k_start + jnp.clip(hi_rel, 0, len_k)
    hi = jnp.maximum(hi, lo)
    lo = jnp.where(valid, lo, 0)
    hi = jnp.where(valid, hi, 0)
    return lo, hi


def _varying_axes(x: Any) -> frozenset:
    mat = getattr(jax.typeof(x), "mat", None)
    return frozenset(getattr(mat, "varying", ()))


def vary_like(tree: Any, *refs: Any) -> Any:
    """``tree`` marked as varying over every manual mesh axis that any of ``refs`` varies over.

    Inside ``shard_map(check_vma=True)`` a loop carry must keep its type: an initial value built
    from constants (``jnp.zeros``) does not vary over the mesh axes while the values computed
    from sharded inputs do. Elsewhere (outside ``shard_map``, ``check_vma=False``) it returns
    ``tree`` unchanged.
    """
    want = frozenset().union(*(_varying_axes(r) for r in jax.tree.leaves(refs)))
    if not want:
        return tree

    def cast(x: Any) -> Any:
        missing = tuple(sorted(want - _varying_axes(x), key=str))
        return jax.lax.pcast(x, missing, to="varying") if missing else x

    return jax.tree.map(cast, tree)


def output_rowsum(dout: Any, out: Any) -> jax.Array:
    """``D = rowsum(dO ∘ O)`` of BSHD ``dout`` and ``out``: float32 ``[b, h, sq]``, computed
    elementwise (exact float32: an einsum is a matmul, TF32 on GPUs and bfloat16 passes on TPUs)."""
    return (dout.astype(jnp.float32) * out.astype(jnp.float32)).sum(axis=-1).transpose(0, 2, 1)


def softmax_aux_grad(aux: Any, lse: Any, delta: Any) -> jax.Array:
    """Gradient of the sinks ``softmax_aux [h, n]``: ``d(sink) = -Σ_rows exp(sink - lse) · D``, with
    each row's log-sum-exp ``lse`` and ``D = rowsum(dO ∘ O)``, both float32 ``[b, h, sq]`` (a sink
    takes probability mass from every key but carries no value; a row with ``lse = -inf`` adds 0).
    Float32 ``[h, n]``."""
    lse = jnp.where(lse == -jnp.inf, jnp.inf, lse)
    p_sink = jnp.exp(aux.astype(jnp.float32)[None, :, None, :] - lse[..., None])  # [b, h, sq, n]
    return -(p_sink * delta[..., None]).sum(axis=(0, 2))


_GOLDEN = 0x9E3779B9


def _fmix32(x: jax.Array) -> jax.Array:
    """MurmurHash3's 32-bit finalizer (an invertible mix; uint32 arithmetic wraps)."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def dropout_threshold(rate: float) -> int:
    """Keep an element when its 32-bit hash is >= this: ``P(keep) = 1 - rate``."""
    return min(round(rate * 2**32), 2**32 - 1)


def dropout_keep_mask(seed: Any, batch_head: Any, q_idx: Any, k_idx: Any, rate: float) -> jax.Array:
    """Which attention probabilities dropout keeps (broadcasting the index arrays).

    Args:
        seed: uint32 scalar.
        batch_head: ``batch_index * num_heads + query_head`` (global query head).
        q_idx, k_idx: global query and key token indices (packed indices for varlen).
        rate: the dropout probability.
    """
    u32 = jnp.uint32
    bh = jnp.asarray(batch_head).astype(u32)
    s = _fmix32(jnp.asarray(seed).astype(u32) ^ _fmix32(bh * u32(_GOLDEN) + u32(0x7F4A7C15)))
    h = _fmix32(s ^ (jnp.asarray(q_idx).astype(u32) * u32(0x27D4EB2F)))
    h = _fmix32(h ^ (jnp.asarray(k_idx).astype(u32) * u32(0x165667B1)))
    return h >= u32(dropout_threshold(rate))


class DenseAttentionOp(Kernel):
    """Shared behaviour of the dense (BSHD) attention ops."""

    trainable = True

    def bind(self, params: dict[str, Any]) -> AttentionArgs:
        return bind_attention(self.op_name, params)

    def describe(self, a: AttentionArgs) -> str:
        parts = [
            f"q={describe_array(a.query)}",
            f"k={describe_array(a.key)}",
            f"v={describe_array(a.value)}",
            f"bias={describe_array(a.bias)}",
            f"seg={'y' if a.has_segments else 'n'}",
            f"mask={describe_array(a.attention_mask)}",
            f"cu={describe_array(a.cum_seqlens_q)}",
            f"aux={describe_array(a.softmax_aux)}",
            f"causal={'y' if a.causal else 'n'}",
            f"window={a.sliding_window[0]},{a.sliding_window[1]}" if a.sliding_window else "window=-",
            f"softcap={'y' if a.logits_soft_cap else 'n'}",
            f"dropout={'y' if a.dropout_prob > 0 else 'n'}",
        ]
        if a.position_offset is not None:
            parts.append("offset=y")
        return " ".join(parts)

    def differentiable_fields(self, args: AttentionArgs) -> tuple[str, ...]:
        return ("query", "key", "value", "bias", "softmax_aux")

    def autotune_inputs(self, a: AttentionArgs, seed: int = 0) -> AttentionArgs:
        rng = np.random.default_rng(seed)

        def normal(x: Any, std: float = 1.0) -> Any:
            if x is None:
                return None
            return jnp.asarray((rng.standard_normal(x.shape) * std).astype(np.float32), dtype=x.dtype)

        def keep_or(x: Any, make: Any) -> Any:
            if x is None:
                return None
            c = V.concrete(x)
            return jnp.asarray(c) if c is not None else make()

        sq, sk = a.seq_q, a.seq_k

        def segments(n: int) -> Any:
            return jnp.asarray(np.tile((np.arange(n) * 3 // n)[None], (a.batch, 1)), jnp.int32)

        def cu(total: int) -> Any:
            return jnp.asarray(np.linspace(0, total, a.cum_seqlens_q.shape[0]).astype(np.int32))

        return dataclasses.replace(
            a,
            query=normal(a.query),
            key=normal(a.key),
            value=normal(a.value),
            bias=normal(a.bias, 0.5),
            q_segment_ids=keep_or(a.q_segment_ids, lambda: segments(sq)),
            kv_segment_ids=keep_or(a.kv_segment_ids, lambda: segments(sk)),
            attention_mask=keep_or(a.attention_mask, lambda: jnp.asarray(rng.random(a.attention_mask.shape) < 0.9)),
            cum_seqlens_q=keep_or(a.cum_seqlens_q, lambda: cu(sq)),
            cum_seqlens_k=keep_or(a.cum_seqlens_k, lambda: cu(sk)),
            softmax_aux=normal(a.softmax_aux),
            dropout_seed=None if a.dropout_seed is None else jnp.asarray(1234, jnp.uint32),
            position_offset=keep_or(a.position_offset, lambda: jnp.asarray(0, jnp.int32)),
        )

    # -- shard_map ----------------------------------------------------------------------------

    def partition_specs(self, a: AttentionArgs, in_specs: Any, mesh: Any) -> dict[str, Any]:
        from jax.sharding import PartitionSpec as P

        op = self.op_name
        if isinstance(in_specs, P) or not isinstance(in_specs, (tuple, list)):
            raise TypeError(f"{op}: in_specs must be a tuple of PartitionSpecs for (query, key, value[, bias])")
        n_pos = 4 if a.bias is not None else 3
        if len(in_specs) not in (3, n_pos):
            raise ValueError(f"{op}: in_specs has {len(in_specs)} entries; expected 3 (query, key, value) or {n_pos}")
        qb, qs, qh, qd = V.spec_entries(op, "query", in_specs[0], 4)
        for name, spec in (("key", in_specs[1]), ("value", in_specs[2])):
            kb, ks, kh, kd = V.spec_entries(op, name, spec, 4)
            if (kb, kh) != (qb, qh):
                raise ValueError(
                    f"{op}: {name} must be sharded like query over batch and heads: query {in_specs[0]}, {name} {spec}"
                )
            if ks is not None or kd is not None:
                raise ValueError(f"{op}: {name}'s sequence and head_dim axes cannot be sharded (got {spec})")
        if qs is not None:
            raise ValueError(
                f"{op}: the query sequence axis cannot be sharded over {qs!r} (every query needs every key); "
                "use ring_attention for sequence parallelism"
            )
        if qd is not None:
            raise ValueError(f"{op}: the head_dim axis cannot be sharded (got {in_specs[0]})")
        V.check_batch_head_shards(op, a.batch, a.num_heads, a.num_kv_heads, mesh, qb, qh)

        def broadcast_spec(x: Any) -> Any:  # [batch or 1, heads or 1, ...]
            return P(qb if x.shape[0] > 1 else None, qh if x.shape[1] > 1 else None, None, None)

        specs: dict[str, Any] = {"query": in_specs[0], "key": in_specs[1], "value": in_specs[2]}
        if a.bias is not None:
            if len(in_specs) == 4:
                bb, bh, bq, bkk = V.spec_entries(op, "bias", in_specs[3], 4)
                expect = broadcast_spec(a.bias)
                if (bb, bh, bq, bkk) != tuple(expect):
                    raise ValueError(f"{op}: bias of shape {V.shape_str(a.bias)} must be sharded as {expect}")
            specs["bias"] = broadcast_spec(a.bias)
        if a.q_segment_ids is not None:
            specs["q_segment_ids"] = specs["kv_segment_ids"] = P(qb, None)
        if a.attention_mask is not None:
            specs["attention_mask"] = broadcast_spec(a.attention_mask)
        if a.cum_seqlens_q is not None:
            specs["cum_seqlens_q"] = specs["cum_seqlens_k"] = P()
        if a.softmax_aux is not None:
            specs["softmax_aux"] = P(qh, None)
        if a.dropout_seed is not None:
            specs["dropout_seed"] = P()
        if a.position_offset is not None:
            specs["position_offset"] = P()
        return specs

    def default_out_spec(self, a: AttentionArgs, specs: dict[str, Any]) -> Any:
        from jax.sharding import PartitionSpec as P

        qb, _, qh, _ = V.spec_entries(self.op_name, "query", specs["query"], 4)
        return P(qb, None, qh, None)

    def localize(self, a: AttentionArgs, specs: dict[str, Any], mesh: Any) -> AttentionArgs:
        if a.dropout_seed is None:
            return a
        # Each shard holds other (batch, head) pairs: give each its own dropout stream.
        qb, _, qh, _ = V.spec_entries(self.op_name, "query", specs["query"], 4)
        axes: list[str] = []
        for entry in (qb, qh):
            if entry is not None:
                axes.extend(entry if isinstance(entry, tuple) else (entry,))
        if not axes:
            return a
        idx = jax.lax.axis_index(tuple(axes)).astype(jnp.uint32)
        seed = a.dropout_seed + (idx + jnp.uint32(1)) * jnp.uint32(_GOLDEN)
        return dataclasses.replace(a, dropout_seed=seed)
