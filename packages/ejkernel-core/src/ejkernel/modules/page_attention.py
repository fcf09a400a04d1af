"""``page_attention``: one decode step over a paged KV cache."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from ..ops.config import FwdParams, OpConfig, check_positive_int
from ..ops.kernel import Kernel, args_record, array_field, describe_array
from ..types.mask_info import canonical_window
from . import _validate as V

__all__ = ["PageAttention", "PageAttentionArgs", "PageAttentionConfig", "page_attention"]


@dataclasses.dataclass(frozen=True)
class PageAttentionConfig(OpConfig):
    """Config of ``page_attention``.

    Attributes:
        fwd_params: ``kv_blocksize`` is the number of cached tokens processed per step (a
            multiple of the cache's block size; XLA gathers that many tokens at a time), and
            warps/stages on GPU.
        num_splits: split-K: the context is cut into this many parts reduced in a second pass
            (GPU kernels; ``1`` disables).
    """

    op_name = "page_attention"

    fwd_params: FwdParams | None = None
    num_splits: int | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.fwd_params is not None and not isinstance(self.fwd_params, FwdParams):
            raise TypeError(f"PageAttentionConfig.fwd_params must be FwdParams, got {type(self.fwd_params).__name__}")
        check_positive_int("PageAttentionConfig", "num_splits", self.num_splits)


@args_record
class PageAttentionArgs:
    """Canonical arguments of a paged decode call.

    ``query`` is ``[batch, num_heads, head_dim]`` (a ``[batch, 1, heads, dim]`` input is squeezed
    and ``query_had_seq_axis`` restores it on the output). The query sits at position
    ``context_lens[b] - 1``: it attends cached tokens ``0 .. context_lens[b] - 1``, or with a
    window ``(left, right)`` only those ``>= context_lens[b] - 1 - left``.
    """

    query: Any = array_field()
    key_cache: Any = array_field()
    value_cache: Any = array_field()
    context_lens: Any = array_field()
    block_tables: Any = array_field()
    softmax_aux: Any = array_field(None)
    softmax_scale: float = 1.0
    logits_soft_cap: float | None = None
    sliding_window: tuple[int, int] | None = None
    query_had_seq_axis: bool = False

    @property
    def batch(self) -> int:
        return int(self.query.shape[0])

    @property
    def num_heads(self) -> int:
        return int(self.query.shape[1])

    @property
    def head_dim(self) -> int:
        return int(self.query.shape[2])

    @property
    def num_blocks(self) -> int:
        return int(self.key_cache.shape[0])

    @property
    def block_size(self) -> int:
        return int(self.key_cache.shape[1])

    @property
    def num_kv_heads(self) -> int:
        return int(self.key_cache.shape[2])

    @property
    def value_head_dim(self) -> int:
        return int(self.value_cache.shape[3])

    @property
    def max_blocks(self) -> int:
        return int(self.block_tables.shape[1])

    @property
    def num_groups(self) -> int:
        return self.num_heads // self.num_kv_heads


class PageAttention(Kernel):
    """The ``page_attention`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    op_name = "page_attention"
    version = "1"
    config_cls = PageAttentionConfig

    def bind(self, p: dict[str, Any]) -> PageAttentionArgs:
        op = self.op_name
        q = V.as_array(
            op,
            "query",
            p["query"],
            ndim=(3, 4),
            layout="[batch, num_heads, head_dim] or [batch, 1, num_heads, head_dim]",
        )
        had_seq = q.ndim == 4
        if had_seq:
            if q.shape[1] != 1:
                raise ValueError(
                    f"{op}: decodes one token per sequence: a 4-D query must be [batch, 1, num_heads, head_dim], "
                    f"got {V.shape_str(q)}"
                )
            q = q[:, 0]
        kc = V.as_array(
            op, "key_cache", p["key_cache"], ndim=4, layout="[num_blocks, block_size, num_kv_heads, head_dim]"
        )
        vc = V.as_array(
            op, "value_cache", p["value_cache"], ndim=4, layout="[num_blocks, block_size, num_kv_heads, head_dim]"
        )
        for name, x in (("query", q), ("key_cache", kc), ("value_cache", vc)):
            V.check_float(op, name, x)
        if kc.dtype != vc.dtype:
            raise TypeError(f"{op}: key_cache and value_cache must share one dtype, got {kc.dtype} and {vc.dtype}")
        b, h, d = (int(x) for x in q.shape)
        nb, bs, hk, dk = (int(x) for x in kc.shape)
        shapes = f"query {V.shape_str(q)}, key_cache {V.shape_str(kc)}, value_cache {V.shape_str(vc)}"
        if tuple(vc.shape[:3]) != (nb, bs, hk):
            raise ValueError(
                f"{op}: key_cache and value_cache must agree on [num_blocks, block_size, num_kv_heads]: {shapes}"
            )
        if dk != d:
            raise ValueError(f"{op}: key_cache head_dim must equal the query's: {shapes}")
        if min(b, h, d, nb, bs, hk, int(vc.shape[3])) == 0:
            raise ValueError(f"{op}: empty dimensions are not supported: {shapes}")
        if h % hk:
            raise ValueError(f"{op}: num_heads ({h}) must be a multiple of num_kv_heads ({hk}): {shapes}")
        lens = V.as_array(op, "context_lens", p["context_lens"], ndim=1, layout="[batch]")
        tables = V.as_array(op, "block_tables", p["block_tables"], ndim=2, layout="[batch, max_blocks]")
        V.check_int(op, "context_lens", lens)
        V.check_int(op, "block_tables", tables)
        if lens.shape[0] != b or tables.shape[0] != b:
            raise ValueError(
                f"{op}: context_lens {V.shape_str(lens)} and block_tables {V.shape_str(tables)} must have batch {b} rows"
            )
        max_blocks = int(tables.shape[1])
        cl, bt = V.concrete(lens), V.concrete(tables)
        if cl is not None:
            if (cl < 0).any() or (cl > max_blocks * bs).any():
                raise ValueError(
                    f"{op}: context_lens must be in [0, max_blocks * block_size = {max_blocks * bs}], got {cl.tolist()}"
                )
            if bt is not None:
                used = np.arange(max_blocks)[None, :] < -(-cl[:, None] // bs)
                bad = used & ((bt < 0) | (bt >= nb))
                if bad.any():
                    r, c = map(int, np.argwhere(bad)[0])
                    raise ValueError(
                        f"{op}: block_tables[{r}, {c}] = {int(bt[r, c])} is outside the cache's {nb} blocks"
                    )
        scale = V.static_float(op, "softmax_scale", p.get("softmax_scale"))
        if scale is None:
            scale = 1.0 / math.sqrt(d)
        return PageAttentionArgs(
            query=q,
            key_cache=kc,
            value_cache=vc,
            context_lens=lens.astype(jnp.int32),
            block_tables=tables.astype(jnp.int32),
            softmax_aux=V.softmax_aux(op, p.get("softmax_aux"), h),
            softmax_scale=scale,
            logits_soft_cap=V.static_float(op, "logits_soft_cap", p.get("logits_soft_cap")),
            sliding_window=canonical_window(p.get("sliding_window")),
            query_had_seq_axis=had_seq,
        )

    def describe(self, a: PageAttentionArgs) -> str:
        return " ".join(
            [
                f"q={describe_array(a.query)}",
                f"k={describe_array(a.key_cache)}",
                f"v={describe_array(a.value_cache)}",
                f"tables={describe_array(a.block_tables)}",
                f"aux={describe_array(a.softmax_aux)}",
                f"window={a.sliding_window[0]}" if a.sliding_window else "window=-",
                f"softcap={'y' if a.logits_soft_cap else 'n'}",
            ]
        )

    def autotune_inputs(self, a: PageAttentionArgs, seed: int = 0) -> PageAttentionArgs:
        rng = np.random.default_rng(seed)

        def normal(x: Any) -> Any:
            if x is None:
                return None
            return jnp.asarray(rng.standard_normal(x.shape).astype(np.float32), dtype=x.dtype)

        lens = V.concrete(a.context_lens)
        tables = V.concrete(a.block_tables)
        if lens is None:  # traced: time the worst case, every sequence at full length
            lens = np.full((a.batch,), a.max_blocks * a.block_size, np.int32)
        if tables is None:
            tables = (rng.permutation(a.batch * a.max_blocks) % a.num_blocks).reshape(a.batch, a.max_blocks)
        return dataclasses.replace(
            a,
            query=normal(a.query),
            key_cache=normal(a.key_cache),
            value_cache=normal(a.value_cache),
            context_lens=jnp.asarray(lens, jnp.int32),
            block_tables=jnp.asarray(tables, jnp.int32),
            softmax_aux=normal(a.softmax_aux),
        )

    def partition_specs(self, a: PageAttentionArgs, in_specs: Any, mesh: Any) -> dict[str, Any]:
        from jax.sharding import PartitionSpec as P

        op = self.op_name
        if isinstance(in_specs, P) or not isinstance(in_specs, (tuple, list)) or len(in_specs) not in (3, 5):
            raise TypeError(
                f"{op}: in_specs must be a tuple of PartitionSpecs for (query, key_cache, value_cache"
                "[, context_lens, block_tables])"
            )
        q_entries = V.spec_entries(op, "query", in_specs[0], 4 if a.query_had_seq_axis else 3)
        if a.query_had_seq_axis:
            if q_entries[1] is not None:
                raise ValueError(f"{op}: the query's length-1 axis cannot be sharded")
            q_entries = (q_entries[0], q_entries[2], q_entries[3])
        qb, qh, qd = q_entries
        if qd is not None:
            raise ValueError(f"{op}: head_dim cannot be sharded")
        for name, spec in (("key_cache", in_specs[1]), ("value_cache", in_specs[2])):
            n, s, kh, kd = V.spec_entries(op, name, spec, 4)
            if n is not None or s is not None or kd is not None or kh != qh:
                raise ValueError(
                    f"{op}: {name} may only be sharded over kv heads, like the query's heads ({qh!r}); got {spec}"
                )
        V.check_batch_head_shards(op, a.batch, a.num_heads, a.num_kv_heads, mesh, qb, qh)
        if len(in_specs) == 5:
            for name, spec, nd in (("context_lens", in_specs[3], 1), ("block_tables", in_specs[4], 2)):
                if V.spec_entries(op, name, spec, nd) != (qb,) + (None,) * (nd - 1):
                    raise ValueError(f"{op}: {name} must be sharded over the query's batch axis {qb!r} only")
        specs = {
            "query": P(qb, qh, None),
            "key_cache": in_specs[1],
            "value_cache": in_specs[2],
            "context_lens": P(qb),
            "block_tables": P(qb, None),
        }
        if a.softmax_aux is not None:
            specs["softmax_aux"] = P(qh, None)
        return specs

    def default_out_spec(self, a: PageAttentionArgs, specs: dict[str, Any]) -> Any:
        from jax.sharding import PartitionSpec as P

        qb, qh, _ = tuple(specs["query"])
        return P(qb, None, qh, None) if a.query_had_seq_axis else P(qb, qh, None)


@PageAttention.define
def page_attention(
    query: Float[Array, "batch num_heads head_dim"] | Float[Array, "batch 1 num_heads head_dim"],
    key_cache: Float[Array, "num_blocks block_size num_kv_heads head_dim"],
    value_cache: Float[Array, "num_blocks block_size num_kv_heads value_head_dim"],
    context_lens: Int[Array, "batch"],
    block_tables: Int[Array, "batch max_blocks"],
    *,
    softmax_scale: float | None = None,
    logits_soft_cap: float | None = None,
    sliding_window: int | tuple[int, int] | None = None,
    softmax_aux: Float[Array, "num_heads"] | Float[Array, "num_heads num_sinks"] | None = None,
    platform: Literal["auto", "xla", "triton", "pallas", "cuda"] | str | None = None,
    cfg: PageAttentionConfig | None = None,
    mesh: Any = None,
    in_specs: Any = None,
    out_specs: Any = None,
) -> Float[Array, "batch num_heads value_head_dim"] | Float[Array, "batch 1 num_heads value_head_dim"]:
    """Attention of one new token per sequence over a paged KV cache (decode).

    Sequence ``b`` has ``context_lens[b]`` cached tokens; token ``t`` lives in page
    ``block_tables[b, t // block_size]`` at slot ``t % block_size``. The query sits at the last
    position, ``context_lens[b] - 1``, so it attends every cached token (no causal mask needed).
    Pages past the context may hold anything (even NaN): they are never read into the result.

    Args:
        query: ``[batch, num_heads, head_dim]`` or ``[batch, 1, num_heads, head_dim]``.
        key_cache: ``[num_blocks, block_size, num_kv_heads, head_dim]``.
        value_cache: ``[num_blocks, block_size, num_kv_heads, value_head_dim]``.
        context_lens: ``[batch]`` int, each in ``[0, max_blocks * block_size]`` (0 → zeros out).
        block_tables: ``[batch, max_blocks]`` int page indices.
        softmax_scale: default ``1/sqrt(head_dim)``.
        logits_soft_cap: ``cap · tanh(logits / cap)``.
        sliding_window: ``w`` or ``(left, right)``: attend only the last ``left + 1`` tokens
            (``right`` has no effect: no cached token follows the query).
        softmax_aux: attention-sink logits ``[num_heads]`` or ``[num_heads, num_sinks]``.
        platform, cfg: implementation and :class:`PageAttentionConfig`.
        mesh, in_specs, out_specs: run under ``shard_map``; heads (query heads and the caches'
            kv heads together) and batch (query, context_lens, block_tables) may be sharded.

    Returns:
        The query's shape with ``value_head_dim`` last, in the query's dtype.

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> kc = vc = jax.random.normal(jax.random.key(0), (64, 16, 2, 64))   # 64 pages of 16 tokens
        >>> q = jax.random.normal(jax.random.key(1), (4, 8, 64))
        >>> tables = jnp.arange(64, dtype=jnp.int32).reshape(4, 16)
        >>> ejkernel.page_attention(q, kc, vc, jnp.array([1, 17, 200, 256]), tables).shape
        (4, 8, 64)
    """
    return PageAttention.call(locals())
