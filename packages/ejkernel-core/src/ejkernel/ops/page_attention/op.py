"""The ``page_attention`` op: one decode step over a paged KV cache."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import jax.numpy as jnp

from ..args import (
    Args,
    ShardPlan,
    array,
    positive_float,
    shape_str,
    static,
    static_bool,
    static_float,
    static_int,
    window,
)
from ..checks import ValueRule
from ..config import OpConfig, tile
from ..families.serving import FEATURES, paged_autotune_indices, paged_decode_rules
from ..op import Op

__all__ = [
    "CACHE_LAYOUTS",
    "DEFAULT_CACHE_LAYOUT",
    "EARLIER_CACHE_LAYOUT",
    "PageAttention",
    "PageAttentionArgs",
    "PageAttentionConfig",
]

#: This library's cache layout, ``[num_blocks, block_size, num_kv_heads, dim]`` (the default).
DEFAULT_CACHE_LAYOUT = "blocks_tokens_heads"
#: Earlier ejkernel releases' layout, ``[num_blocks, num_kv_heads, block_size, dim]``.
EARLIER_CACHE_LAYOUT = "blocks_heads_tokens"
#: Layout name → the caches' axes (the last is the head dim).
CACHE_LAYOUTS: dict[str, tuple[str, str, str]] = {
    DEFAULT_CACHE_LAYOUT: ("num_blocks", "block_size", "num_kv_heads"),
    EARLIER_CACHE_LAYOUT: ("num_blocks", "num_kv_heads", "block_size"),
}


def parse_cache_layout(op: str, name: str, x: Any) -> str:
    """Parser of ``cache_layout``: one of :data:`CACHE_LAYOUTS`."""
    if x == "auto":
        raise ValueError(
            f"{op}: cache_layout='auto' is not accepted: a cache's shape cannot tell the layouts apart "
            "(e.g. [num_blocks, 16, 4, dim] with 16 query heads fits both); pass "
            f"{DEFAULT_CACHE_LAYOUT!r} ([num_blocks, block_size, num_kv_heads, dim], the default) or "
            f"{EARLIER_CACHE_LAYOUT!r} ([num_blocks, num_kv_heads, block_size, dim])"
        )
    if x not in CACHE_LAYOUTS:
        raise ValueError(f"{op}: {name} must be one of {tuple(CACHE_LAYOUTS)}, got {x!r}")
    return x


@dataclasses.dataclass(frozen=True)
class PageAttentionConfig(OpConfig):
    """Config of ``page_attention``.

    Attributes:
        tokens_per_block: cached tokens one step of the kernel attends (XLA: tokens gathered per
            loop step; Pallas: pages DMA'd per grid step × block size; CUDA: the split-K
            partition). XLA and Pallas need a multiple of the cache's block size.
        num_splits: split-K: the context is cut into this many parts reduced in a second pass
            (CUDA: sets the partition length; ``1`` disables; ``0``, as earlier releases wrote
            it: the implementation decides, like ``None``).
        num_warps: warps per program (GPU kernels).
        num_stages: software-pipelining depth (GPU kernels: the CUDA K/V ring's slots).
        pages_per_compute_block: earlier releases' tile, in pages: a call turns it into
            ``tokens_per_block = pages_per_compute_block × block_size`` (unless that is set).
    """

    tokens_per_block: int | None = tile()
    num_splits: int | None = tile(minimum=0)
    num_warps: int | None = tile(power_of_two=True, maximum=32)
    num_stages: int | None = tile()
    pages_per_compute_block: int | None = tile()


class PageAttentionArgs(
    Args,
    shardable=("batch", "num_heads", "num_kv_heads"),
    shard_reasons={
        "num_blocks": "the page pool is shared by every sequence",
        "block_size": "a page is read whole",
        "max_blocks": "a sequence's page table is read whole",
    },
    tied=[("num_heads", "num_kv_heads")],
    divides=[("num_kv_heads", "num_heads")],
):
    """Canonical arguments of a paged decode call.

    ``query`` is ``[batch, num_heads, head_dim]`` (a ``[batch, 1, heads, dim]`` input is squeezed
    and ``query_had_seq_axis`` restores it on the output). The query sits at position
    ``context_lens[b] - 1``: it attends cached tokens ``0 .. context_lens[b] - 1``, or with a
    window ``(left, right)`` only those ``>= context_lens[b] - 1 - left``.

    The caches stay as the caller laid them out (never transposed: a cache is most of the
    device's memory): ``cache_layout`` says which, and :meth:`axes_of` reads their axes by it.
    """

    query: Any = array("batch", "num_heads", "head_dim", ranks=(3, 4))
    key_cache: Any = array("num_blocks", "block_size", "num_kv_heads", "head_dim", same_dtype_as="query")
    value_cache: Any = array("num_blocks", "block_size", "num_kv_heads", "value_head_dim", same_dtype_as="query")
    context_lens: Any = array("batch", kind="int")
    block_tables: Any = array("batch", "max_blocks", kind="int")
    softmax_aux: Any = array("num_heads", "num_sinks", optional=True, ranks=(1, 2))
    softmax_scale: float = static(1.0, key="ignore")
    logits_soft_cap: float | None = static(None, key="presence", parse=positive_float)
    sliding_window: tuple[int, int] | None = static(None, parse=window)
    query_had_seq_axis: bool = static(False)
    cache_layout: str = static(DEFAULT_CACHE_LAYOUT, parse=parse_cache_layout)

    def axes_of(self, name: str) -> tuple[str | None, ...] | None:
        axes = super().axes_of(name)
        if name in ("key_cache", "value_cache") and axes is not None:
            return (*CACHE_LAYOUTS[self.cache_layout], axes[3])
        return axes

    @property
    def heads_major(self) -> bool:
        """The caches are ``[num_blocks, num_kv_heads, block_size, dim]`` (earlier releases')."""
        return self.cache_layout == EARLIER_CACHE_LAYOUT

    @property
    def num_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def dtype(self) -> Any:
        return self.query.dtype


class PageAttention(Op):
    """The ``page_attention`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "page_attention"
    version = "2"
    config_cls = PageAttentionConfig
    args_cls = PageAttentionArgs
    features: ClassVar[dict[str, tuple[str, Any]]] = FEATURES

    param_aliases: ClassVar[dict[str, str]] = {"attn_scale": "softmax_scale", "attn_logits_soft_cap": "logits_soft_cap"}

    def config_hints(self, p: dict[str, Any]) -> dict[str, Any]:
        splits = static_int(self.name, "num_splits", p.pop("num_splits", None), minimum=0)
        pages = static_int(self.name, "pages_per_compute_block", p.pop("pages_per_compute_block", None), minimum=1)
        hints: dict[str, Any] = {}
        if splits:  # 0: the heuristic decides, as before
            hints["num_splits"] = splits
        if pages is not None:
            hints["tokens_per_block"] = pages * self._block_size(p, "pages_per_compute_block")
        return hints

    def canonical_config(self, cfg: PageAttentionConfig, p: dict[str, Any]) -> PageAttentionConfig:
        changes: dict[str, Any] = {}
        if cfg.num_splits == 0:
            changes["num_splits"] = None
        if cfg.pages_per_compute_block is not None:
            if cfg.tokens_per_block is None:
                block_size = self._block_size(p, "cfg.pages_per_compute_block")
                changes["tokens_per_block"] = cfg.pages_per_compute_block * block_size
            changes["pages_per_compute_block"] = None
        return dataclasses.replace(cfg, **changes) if changes else cfg

    def _block_size(self, p: dict[str, Any], what: str) -> int:
        cache = p.get("key_cache")
        if not hasattr(cache, "shape") or len(cache.shape) != 4:
            raise ValueError(f"{self.name}: {what} needs a 4-D key_cache")
        layout = parse_cache_layout(self.name, "cache_layout", p.get("cache_layout", DEFAULT_CACHE_LAYOUT))
        return int(cache.shape[CACHE_LAYOUTS[layout].index("block_size")])

    def _check_heads(self, q: Any, layout: str, p: dict[str, Any]) -> None:
        """Query heads against the kv heads of ``layout``, before anything reads the caches by it."""
        kc = p["key_cache"]
        h = int(q.shape[-2])
        axis = CACHE_LAYOUTS[layout].index("num_kv_heads")
        hk = int(kc.shape[axis])
        if hk == 0 or h % hk == 0:  # an empty axis: the shape checks report it
            return
        names = ", ".join(CACHE_LAYOUTS[layout])
        msg = (
            f"{self.name}: query has {h} heads, not a multiple of key_cache's {hk} kv heads: query {shape_str(q)}, "
            f"key_cache {shape_str(kc)} read as [{names}, head_dim] (cache_layout={layout!r})"
        )
        other = next(name for name in CACHE_LAYOUTS if name != layout)
        other_hk = int(kc.shape[CACHE_LAYOUTS[other].index("num_kv_heads")])
        if other_hk and h % other_hk == 0:
            msg += f"; if the cache is [{', '.join(CACHE_LAYOUTS[other])}, head_dim], pass cache_layout={other!r}"
        raise ValueError(msg)

    def canonicalize(self, p: dict[str, Any]) -> PageAttentionArgs:
        op = self.name
        layout = parse_cache_layout(op, "cache_layout", p.pop("cache_layout", DEFAULT_CACHE_LAYOUT))
        # Documented no-ops (see the function's docstring), type-checked all the same.
        static_int(op, "max_context_len", p.pop("max_context_len", None), minimum=0)
        static_float(op, "mask_value", p.pop("mask_value", None), positive=False)
        static_bool(op, "inline_seq_dim", p.pop("inline_seq_dim", True))
        mode = p.pop("megacore_mode", None)
        if mode is not None and not isinstance(mode, str):
            raise TypeError(f"{op}: megacore_mode must be a str or None, got {type(mode).__name__}")
        q = p["query"]
        self._check_heads(q, layout, p)
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
        aux = p.get("softmax_aux")
        if aux is not None and aux.ndim == 1:
            # [num_heads]: one sink per head; any other length: [num_sinks] shared by every head.
            h = int(q.shape[-2])
            aux = aux[:, None] if aux.shape[0] == h else jnp.broadcast_to(aux[None, :], (h, aux.shape[0]))
        return PageAttentionArgs.build(
            op, p, query=q, softmax_aux=aux, softmax_scale=scale, query_had_seq_axis=had_seq, cache_layout=layout
        )

    def value_rules(self, a: PageAttentionArgs) -> list[ValueRule]:
        return paged_decode_rules(capacity=a.max_blocks * a.block_size, page_size=a.block_size, num_pages=a.num_blocks)

    def autotune_inputs(self, a: PageAttentionArgs, seed: int = 0) -> PageAttentionArgs:
        lens, tables = paged_autotune_indices(
            a.context_lens, a.block_tables, capacity=a.max_blocks * a.block_size, num_pages=a.num_blocks, seed=seed
        )
        return dataclasses.replace(a.random_like(seed), context_lens=lens, block_tables=tables)

    def _query_axes(self, a: PageAttentionArgs) -> tuple[str | None, ...]:
        return ("batch", None, "num_heads", "head_dim") if a.query_had_seq_axis else ("batch", "num_heads", "head_dim")

    def shard_plan(self, a: PageAttentionArgs, in_specs: Any, mesh: Any) -> ShardPlan:
        # The specs of query and caches are needed; context_lens and block_tables follow the batch.
        return a.shard_plan(
            self.name, in_specs, mesh, self.positional_arrays(), {"query": self._query_axes(a)}, required=3
        )

    def default_out_spec(self, a: PageAttentionArgs, plan: ShardPlan) -> Any:
        axes = (
            ("batch", None, "num_heads", "value_head_dim")
            if a.query_had_seq_axis
            else ("batch", "num_heads", "value_head_dim")
        )
        return plan.spec_of(axes)
