"""Multi-head latent attention (MLA, DeepSeek-V2/V3): the contract shared by ``flash_mla`` and
``deepseek_attn``: their arguments record, binding, and the absorbed form both compute in.

The math (every implementation and the reference agree on it). With ``c = key_value [b, sk, r]``
(the latent, ``r = kv_lora_rank``), ``G = num_heads // num_kv_heads`` and query head ``j`` using
kv head ``j // G``::

    k_nope[b, t, j] = c[b, t] @ w_kc[:, j // G]            # [qk_nope_head_dim]
    v[b, t, j]      = c[b, t] @ w_vc[:, j // G]            # [value_head_dim]
    s[b, j, i, t]   = scale · (q_nope[b, i, j] · k_nope[b, t, j] + q_rope[b, i, j] · k_rope[b, t])
    out[b, i, j]    = softmax_t(s[b, j, i, :]) @ v[b, :, j]

where ``query``, ``b_q`` and ``b_k`` give the nope and rope parts in one of three ways (``rope``):

- ``"none"`` (no ``b_q``, no ``b_k``): ``query`` is ``q_nope``; there is no rope term.
- ``"query"`` (``b_k`` only): ``query = [q_nope | q_rope]`` along its last axis, ``q_rope`` per
  head; ``k_rope = b_k`` is shared by every head.
- ``"shared"`` (``b_q`` and ``b_k``): ``query`` is ``q_nope``; ``q_rope = b_q`` and
  ``k_rope = b_k`` are both shared by every head.

``b_q`` without ``b_k`` is an error. The default ``softmax_scale`` is
``1 / sqrt(qk_nope_head_dim + qk_rope_head_dim)``.

The absorbed form (DeepSeek-V2 §2.1.2; what FlashMLA computes): because
``q_nope · (c @ w_kc) = (q_nope @ w_kcᵀ) · c``, the nope part of the query is absorbed into the
latent space once per query, ``q_abs = q_nope @ w_kcᵀ [b, sq, h, r]``, and every head attends the
one shared latent, multi-query style: keys ``[c | k_rope]`` (``r + rope`` wide), values ``c``;
the head's latent output is projected by ``w_vc`` once per query. Keys and values are never
materialized per head, so the memory read per key is one latent row however many heads there
are. :func:`absorbed_operands` / :func:`project_latent_output` build it; the attention in between
is ordinary dense attention (``ejkernel.ops.families.attention`` semantics) with one kv head.
The non-absorbed form (materialize ``K = [k_nope | k_rope]`` and ``V`` per head, then attend)
is :func:`ejkernel.flash_attention` on those arrays; the references compute that form.

Options shared with dense attention keep its semantics: ``causal`` and ``sliding_window`` are
aligned bottom-right (``off = seq_k - seq_q``; a decode step is ``seq_q = 1`` against the whole
latent cache); ``bias`` / ``attention_mask`` are ``[batch or 1, num_heads or 1, seq_q, seq_k]``;
``softmax_aux`` are per-head sink logits; ``cu_seqlens`` packs sequences along one row
(``batch == 1``, ``seq_q == seq_k``). A query row that sees no key returns zeros.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from ..args import Args, array, flag, positive_float, shape_str, static, static_float, window
from .attention import AttentionArgs, bind_bias

__all__ = [
    "LATENT_FEATURES",
    "ROPE_MODES",
    "LatentAttentionArgs",
    "absorbed_attention_args",
    "absorbed_operands",
    "bind_latent",
    "gathered_latent_attention",
    "index_mask",
    "index_scores",
    "index_selection",
    "materialize_pays",
    "materialized_attention_args",
    "materialized_kv",
    "project_latent_output",
    "selection_mask",
]

ROPE_MODES = ("none", "query", "shared")

_NOT_SHARDED = {
    "seq_q": "every query needs every key",
    "seq_k": "every query needs every key",
    "kv_lora_rank": "the latent is read whole by every head",
    "q_head_dim": "a head is computed whole",
    "qk_nope_head_dim": "a head is computed whole",
    "value_head_dim": "a head is computed whole",
    "rope_head_dim": "a head is computed whole",
}


class LatentAttentionArgs(
    Args,
    shardable=("batch", "num_heads", "num_kv_heads"),
    shard_reasons=_NOT_SHARDED,
    tied=[("num_heads", "num_kv_heads")],
    divides=[("num_kv_heads", "num_heads")],
):
    """Canonical arguments of a latent attention call (see the module docstring).

    ``rope`` says how ``query``/``b_q``/``b_k`` split into nope and rope parts; ``bias`` is 4-D
    broadcast; ``attention_mask`` is bool.
    """

    query: Any = array("batch", "seq_q", "num_heads", "q_head_dim", differentiable=True)
    key_value: Any = array("batch", "seq_k", "kv_lora_rank", same_dtype_as="query", differentiable=True)
    w_kc: Any = array("kv_lora_rank", "num_kv_heads", "qk_nope_head_dim", differentiable=True)
    w_vc: Any = array("kv_lora_rank", "num_kv_heads", "value_head_dim", differentiable=True)
    b_q: Any = array("batch", "seq_q", "rope_head_dim", optional=True, same_dtype_as="query", differentiable=True)
    b_k: Any = array("batch", "seq_k", "rope_head_dim", optional=True, same_dtype_as="query", differentiable=True)
    cu_seqlens: Any = array("num_seqs_plus_1", kind="int", optional=True)
    bias: Any = array(
        "batch", "num_heads", "seq_q", "seq_k", optional=True, broadcast=True, ranks=(2, 3, 4), differentiable=True
    )
    attention_mask: Any = array("batch", "num_heads", "seq_q", "seq_k", kind="any", optional=True, broadcast=True)
    softmax_aux: Any = array("num_heads", "num_sinks", optional=True, ranks=(1, 2), differentiable=True)
    rope: str = static("none")
    causal: bool = static(False)
    softmax_scale: float = static(1.0, key="ignore")
    sliding_window: tuple[int, int] | None = static(None, parse=window)
    logits_soft_cap: float | None = static(None, key="presence", parse=positive_float)

    @property
    def dtype(self) -> Any:
        return self.query.dtype

    @property
    def num_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def rope_dim(self) -> int:
        return 0 if self.b_k is None else int(self.b_k.shape[-1])


LATENT_FEATURES: dict[str, tuple[str, Any]] = {
    "causal": ("causal mask, aligned bottom-right", lambda a: a.causal),
    "rope": ("rotary parts (b_k, and b_q or the query's tail)", lambda a: a.rope != "none"),
    "gqa": ("fewer kv heads in w_kc/w_vc than query heads", lambda a: a.num_heads != a.num_kv_heads),
    "cross": ("seq_q != seq_k (decode against a latent cache)", lambda a: a.seq_q != a.seq_k),
    "varlen": ("cu_seqlens: sequences packed along one row", lambda a: a.cu_seqlens is not None),
    "sliding_window": ("sliding window (left, right)", lambda a: a.sliding_window is not None),
    "logits_soft_cap": ("cap · tanh(logits / cap)", lambda a: a.logits_soft_cap is not None),
    "bias": ("additive bias (broadcast), differentiable", lambda a: a.bias is not None),
    "attention_mask": ("pairwise boolean mask", lambda a: a.attention_mask is not None),
    "softmax_aux": ("attention sinks", lambda a: a.softmax_aux is not None),
}


def _rope_mode(op: str, q: Any, w_kc: Any, b_q: Any, b_k: Any) -> tuple[str, int]:
    """The rope mode and the default scale's head dim, checking ``query``'s last dim against it."""
    dq, dn = int(q.shape[-1]), int(w_kc.shape[-1])
    if b_q is not None and b_k is None:
        raise ValueError(
            f"{op}: b_q {shape_str(b_q)} needs b_k (the keys' rotary part); pass b_k, or put the query's "
            "rotary part in query's last axis"
        )
    if b_k is None:
        mode, want, layout = "none", dn, "qk_nope_head_dim (no b_k: query is the nope part only)"
    elif b_q is None:
        dr = int(b_k.shape[-1])
        mode, want, layout = (
            "query",
            dn + dr,
            "qk_nope_head_dim + qk_rope_head_dim (b_k only: query = [q_nope | q_rope])",
        )
    else:
        mode, want, layout = "shared", dn, "qk_nope_head_dim (b_q and b_k: query is the nope part only)"
    if dq != want:
        raise ValueError(
            f"{op}: query's last dim must be {layout} = {want}: query {shape_str(q)}, w_kc {shape_str(w_kc)}"
            + ("" if b_k is None else f", b_k {shape_str(b_k)}")
        )
    return mode, dn + (0 if b_k is None else int(b_k.shape[-1]))


def bind_latent(op: str, p: dict[str, Any], record: type[LatentAttentionArgs], **given: Any) -> Any:
    """Canonicalize latent-attention parameters (names as in ``flash_mla``) into ``record``,
    after :meth:`Args.precheck`; ``given`` adds or overrides fields (an op's own options)."""
    q, c, w_kc = p["query"], p["key_value"], p["w_kc"]
    b_q, b_k = p.get("b_q"), p.get("b_k")
    b, sq, h, _ = (int(x) for x in q.shape)
    sk = int(c.shape[1])
    rope, d_scale = _rope_mode(op, q, w_kc, b_q, b_k)
    scale = static_float(op, "softmax_scale", p.get("softmax_scale"))
    if scale is None:
        scale = 1.0 / math.sqrt(d_scale)
    cu = p.get("cu_seqlens")
    if cu is not None:
        if cu.ndim != 1 or cu.shape[0] < 2:
            raise ValueError(f"{op}: cu_seqlens must be [num_seqs + 1] with num_seqs >= 1, got {shape_str(cu)}")
        if b != 1 or sq != sk:
            raise ValueError(
                f"{op}: with cu_seqlens the sequences are packed along seq in one row: query and key_value "
                f"must be [1, total, ...] of one length; got query {shape_str(q)}, key_value {shape_str(c)}"
            )
    mask = p.get("attention_mask")
    if mask is not None:
        if jnp.issubdtype(mask.dtype, jnp.floating):
            raise TypeError(
                f"{op}: attention_mask must be bool (or int, nonzero = attend), got {mask.dtype}; "
                "pass additive float masks as bias"
            )
        mask = mask if mask.dtype == jnp.bool_ else mask != 0
    aux = p.get("softmax_aux")
    if aux is not None and aux.ndim == 1:
        # [num_heads]: one sink per head; any other length: [num_sinks] shared by every head.
        aux = aux[:, None] if aux.shape[0] == h else jnp.broadcast_to(aux[None, :], (h, aux.shape[0]))
    fields = dict(
        bias=bind_bias(op, p.get("bias"), b, h, sq, sk),
        attention_mask=mask,
        softmax_aux=aux,
        cu_seqlens=cu,
        rope=rope,
        causal=flag(op, "causal", p.get("causal", False)),
        softmax_scale=scale,
    )
    fields.update(given)
    return record.build(op, p, **fields)


# -- the absorbed form ------------------------------------------------------------------------------


def _dot(spec: str, a: Any, b: Any) -> Any:
    """``einsum`` accumulated in float32; float32 operands at float32 accuracy (HIGHEST), others at
    the default (fast) precision."""
    precision = jax.lax.Precision.HIGHEST if jnp.result_type(a, b) == jnp.float32 else None
    return jnp.einsum(spec, a, b, precision=precision, preferred_element_type=jnp.float32)


def absorbed_operands(a: LatentAttentionArgs) -> tuple[Any, Any, Any]:
    """``(q, k, v)`` of the absorbed form as one-kv-head dense attention, in the query's dtype:
    ``q = [q_nope @ w_kcᵀ | q_rope] [b, sq, h, r + rope]``, ``k = [c | k_rope] [b, sk, 1, r + rope]``,
    ``v = c [b, sk, 1, r]``."""
    b, sq, h, _ = a.query.shape
    hk, g, dn = a.num_kv_heads, a.num_groups, a.qk_nope_head_dim
    dt = a.query.dtype
    q_nope = a.query[..., :dn].reshape(b, sq, hk, g, dn)
    q_abs = _dot("bqkgd,rkd->bqkgr", q_nope, a.w_kc.astype(dt)).reshape(b, sq, h, a.kv_lora_rank).astype(dt)
    c = a.key_value
    if a.rope == "none":
        return q_abs, c[:, :, None, :], c[:, :, None, :]
    q_rope = a.query[..., dn:] if a.rope == "query" else jnp.broadcast_to(a.b_q[:, :, None, :], (b, sq, h, a.rope_dim))
    q = jnp.concatenate([q_abs, q_rope.astype(dt)], axis=-1)
    k = jnp.concatenate([c, a.b_k.astype(dt)], axis=-1)[:, :, None, :]
    return q, k, c[:, :, None, :]


def absorbed_attention_args(a: LatentAttentionArgs, attention_mask: Any = None) -> AttentionArgs:
    """The dense-attention record of the absorbed form (one kv head, the latent as values), with
    ``attention_mask`` (bool, broadcast 4-D) and-ed into the call's own mask."""
    return _dense_args(a, *absorbed_operands(a), attention_mask)


def _dense_args(a: LatentAttentionArgs, q: Any, k: Any, v: Any, attention_mask: Any) -> AttentionArgs:
    """``a``'s options on dense operands ``q, k, v``, ``attention_mask`` and-ed into its mask."""
    mask = a.attention_mask
    if attention_mask is not None:
        mask = attention_mask if mask is None else mask & attention_mask
    return AttentionArgs(
        query=q,
        key=k,
        value=v,
        bias=a.bias,
        attention_mask=mask,
        cum_seqlens_q=a.cu_seqlens,
        cum_seqlens_k=a.cu_seqlens,
        softmax_aux=a.softmax_aux,
        causal=a.causal,
        softmax_scale=a.softmax_scale,
        sliding_window=a.sliding_window,
        logits_soft_cap=a.logits_soft_cap,
    )


def project_latent_output(a: LatentAttentionArgs, out_latent: Any) -> Any:
    """``[b, sq, h, r]`` latent outputs projected by each head's ``w_vc`` → ``[b, sq, h, dv]`` in
    the query's dtype."""
    b, sq, h, r = out_latent.shape
    hk, g = a.num_kv_heads, a.num_groups
    o = out_latent.reshape(b, sq, hk, g, r)
    out = _dot("bqkgr,rkv->bqkgv", o, a.w_vc.astype(o.dtype))
    return out.reshape(b, sq, h, a.value_head_dim).astype(a.query.dtype)


# -- the non-absorbed form (the references) ---------------------------------------------------------


def materialized_kv(
    query: Any, key_value: Any, w_kc: Any, w_vc: Any, b_q: Any, b_k: Any, *, dtype: Any, precision: Any
) -> tuple[Any, Any, Any]:
    """``(q, k, v)`` of the non-absorbed form in ``dtype``: ``q = [q_nope | q_rope]`` per head
    ``[b, sq, h, dn + rope]``, ``k = [c @ w_kc | k_rope]`` per kv head ``[b, sk, hk, dn + rope]``,
    ``v = c @ w_vc [b, sk, hk, dv]``: the arrays :func:`ejkernel.flash_attention` takes."""
    q, c = query.astype(dtype), key_value.astype(dtype)
    k_nope = jnp.einsum("btr,rkd->btkd", c, w_kc.astype(dtype), precision=precision)
    v = jnp.einsum("btr,rkd->btkd", c, w_vc.astype(dtype), precision=precision)
    if b_k is None:
        return q, k_nope, v
    hk = k_nope.shape[2]
    k_rope = jnp.broadcast_to(b_k.astype(dtype)[:, :, None, :], (*b_k.shape[:2], hk, b_k.shape[-1]))
    if b_q is not None:
        q_rope = jnp.broadcast_to(b_q.astype(dtype)[:, :, None, :], (*b_q.shape[:2], q.shape[2], b_q.shape[-1]))
        q = jnp.concatenate([q, q_rope], axis=-1)
    return q, jnp.concatenate([k_nope, k_rope], axis=-1), v


def materialized_attention_args(a: LatentAttentionArgs, attention_mask: Any = None) -> AttentionArgs:
    """The dense-attention record of the non-absorbed form (:func:`materialized_kv`: keys and
    values per kv head), with ``attention_mask`` (bool, broadcast 4-D) and-ed into the call's own
    mask: the output is ``[b, sq, h, dv]`` itself, no projection after."""
    dt = a.query.dtype
    precision = jax.lax.Precision.HIGHEST if dt == jnp.float32 else None
    q, k, v = materialized_kv(a.query, a.key_value, a.w_kc, a.w_vc, a.b_q, a.b_k, dtype=dt, precision=precision)
    return _dense_args(a, q, k, v, attention_mask)


def materialize_pays(a: LatentAttentionArgs) -> bool:
    """Whether the non-absorbed form costs fewer FLOPs than the absorbed one: per (query, key,
    head) the absorbed form multiplies over the latent (``2(r + rope) + 2r``), the other over the
    head dims (``2(dn + rope) + 2dv``), at the price of materializing every key and value
    (``2r(dn + dv)`` per key and head). Prefill (many queries per key) pays; decode does not."""
    r, rope, dn, dv = a.kv_lora_rank, a.rope_dim, a.qk_nope_head_dim, a.value_head_dim
    saved = (2 * (r + rope) + 2 * r) - (2 * (dn + rope) + 2 * dv)
    return a.seq_q * saved > 2 * r * (dn + dv)


# -- the lightning indexer (deepseek_attn) ----------------------------------------------------------


def index_scores(query_index: Any, key_index: Any, index_weights: Any, scale: float) -> Any:
    """The lightning indexer's scores ``[b, sq, sk]`` in float32 (DeepSeek-V3.2 §2.1):
    ``I[i, t] = Σ_j w[i, j] · relu(scale · q_idx[i, j] · k_idx[t])``."""
    f32, hi = jnp.float32, jax.lax.Precision.HIGHEST
    qi, ki, w = query_index.astype(f32), key_index.astype(f32), index_weights.astype(f32)
    per_head = jax.nn.relu(jnp.einsum("bqjd,btd->bqjt", qi, ki, precision=hi) * scale)
    return jnp.einsum("bqjt,bqj->bqt", per_head, w, precision=hi)


def index_selection(
    query_index: Any, key_index: Any, index_weights: Any, *, topk: int, scale: float, causal: bool
) -> Any:
    """The keys each query attends in ``deepseek_attn``, as key indices, int32
    ``[b, sq, min(topk, sk) + 1]``: the ``topk`` highest :func:`index_scores` among the keys it
    may see (``t <= i + sk - sq`` when causal; ties go to the lower key index), then its own
    position ``i + sk - sq``, which it always attends, unless already among them; ``-1`` marks an
    unused slot (a top-k slot holding a key it may not see, or the own position already kept or
    before the first key). Not differentiable (a selection): the indexer's inputs get no gradient
    through it.

    This function *defines* the selection: the implementations (as indices or as
    :func:`index_mask`) and the reference share it, so that a near-tie cannot select differently
    between them."""
    query_index, key_index, index_weights = (jax.lax.stop_gradient(x) for x in (query_index, key_index, index_weights))
    sq, sk = query_index.shape[1], key_index.shape[1]
    pos = jnp.arange(sq)[:, None] + (sk - sq)  # each query's own key position
    keys = jnp.arange(sk)[None, :]
    visible = (keys <= pos) if causal else jnp.ones((sq, sk), bool)
    scores = jnp.where(visible, index_scores(query_index, key_index, index_weights, scale), -jnp.inf)
    _, top = jax.lax.top_k(scores, min(topk, sk))  # [b, sq, k]
    if causal:
        top = jnp.where(top <= pos, top, -1)
    own = jnp.where(jnp.any(top == pos, axis=-1) | (pos[:, 0] < 0), -1, pos[:, 0])  # [b, sq]
    return jnp.concatenate([top, own[..., None]], axis=-1).astype(jnp.int32)


def selection_mask(selection: Any, seq_k: int) -> Any:
    """The bool mask ``[b, 1, sq, seq_k]`` of key indices ``selection [b, sq, n]`` (``-1``: none)."""
    b, sq, _ = selection.shape
    slot = jnp.where(selection >= 0, selection, seq_k)  # out of range: dropped by the scatter
    rows = (jnp.arange(b)[:, None, None], jnp.arange(sq)[None, :, None], slot)
    return jnp.zeros((b, sq, seq_k), bool).at[rows].set(True, mode="drop")[:, None]


def index_mask(query_index: Any, key_index: Any, index_weights: Any, *, topk: int, scale: float, causal: bool) -> Any:
    """:func:`index_selection` as a bool mask ``[b, 1, sq, sk]`` (what the dense forms apply)."""
    sel = index_selection(query_index, key_index, index_weights, topk=topk, scale=scale, causal=causal)
    return selection_mask(sel, key_index.shape[1])


def gathered_latent_attention(
    q: Any, kv: Any, selection: Any, *, lora: int, scale: float, causal: bool, chunk: int
) -> Any:
    """Absorbed-form attention over selected latent rows, in plain JAX: ``q [b, sq, h, d]`` (the
    :func:`absorbed_operands` query, ``d = lora + rope``) attends, per query, the rows
    ``selection [b, sq, n]`` of ``kv [b, sk, d]`` (keys: all ``d`` lanes; values: the first
    ``lora``), skipping ``-1``, out-of-range and (``causal``) later-than-own-position slots;
    returns the latent output ``[b, sq, h, lora]`` in ``q``'s dtype (zeros for a query with no key).

    Work and memory follow the selection, not ``sk``: ``chunk`` queries at a time gather their
    rows (each chunk rematerialized in the backward, so residuals stay at the inputs)."""
    b, sq, h, d = q.shape
    sk, n = kv.shape[1], selection.shape[-1]
    chunk = max(1, min(chunk, sq))
    pad = -sq % chunk
    pos = jnp.arange(sq + pad) + (sk - sq)
    q_p = jnp.pad(q, ((0, 0), (0, pad), (0, 0), (0, 0)))
    sel_p = jnp.pad(selection, ((0, 0), (0, pad), (0, 0)), constant_values=-1)
    steps = (sq + pad) // chunk

    @jax.checkpoint
    def step(xs: Any) -> Any:
        qc, sc, pc = xs  # [b, c, h, d], [b, c, n], [c]
        ok = (sc >= 0) & (sc < sk)
        if causal:
            ok &= sc <= pc[None, :, None]
        rows = jax.vmap(lambda kv_b, s_b: kv_b[s_b])(kv, jnp.where(ok, sc, 0))  # [b, c, n, d]
        s = _dot("bchd,bcnd->bchn", qc, rows) * scale
        s = jnp.where(ok[:, :, None, :], s, -jnp.inf)
        m = jnp.max(s, axis=-1, keepdims=True)
        p = jnp.exp(s - jnp.where(jnp.isfinite(m), m, 0.0))
        denom = jnp.sum(p, axis=-1, keepdims=True)
        o = _dot("bchn,bcnr->bchr", p.astype(rows.dtype), rows[..., :lora])
        return (o / jnp.where(denom > 0, denom, 1.0)).astype(q.dtype)

    xs = (
        q_p.reshape(b, steps, chunk, h, d).swapaxes(0, 1),
        sel_p.reshape(b, steps, chunk, n).swapaxes(0, 1),
        pos.reshape(steps, chunk),
    )
    out = jax.lax.map(step, xs)  # [steps, b, c, h, lora]
    return out.swapaxes(0, 1).reshape(b, sq + pad, h, lora)[:, :sq]
