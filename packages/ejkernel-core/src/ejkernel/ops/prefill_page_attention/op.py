"""The ``prefill_page_attention`` op: one sequence's chunk of queries over its pages of a paged
cache laid out ``[num_kv_heads, total_num_pages, page_size, head_dim]``."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np

from ..args import Args, array, concrete, positive_float, shape_str, static, static_float
from ..checks import ValueRule
from ..config import OpConfig, tile
from ..families.serving import FEATURES as SERVING_FEATURES
from ..families.serving import last_tokens_window
from ..op import Op

__all__ = ["PrefillPageAttention", "PrefillPageAttentionArgs", "PrefillPageAttentionConfig"]

#: The earlier releases' default ``mask_value`` (accepted; it does not change the result).
DEFAULT_MASK_VALUE = -2.38e38


@dataclasses.dataclass(frozen=True)
class PrefillPageAttentionConfig(OpConfig):
    """Config of ``prefill_page_attention``.

    Attributes:
        block_k: cached tokens one step of the kernel attends (XLA: ``block_k // page_size`` whole
            pages per step of the online-softmax scan, at least one).
        num_warps: warps per program (GPU kernels).
        num_stages: software-pipelining depth (GPU kernels).
    """

    block_k: int | None = tile()
    num_warps: int | None = tile(power_of_two=True, maximum=32)
    num_stages: int | None = tile()


class PrefillPageAttentionArgs(Args, divides=[("num_kv_heads", "num_heads")]):
    """Canonical arguments of a prefill-over-pages call.

    Query row ``j`` of ``chunk_size`` sits at position ``context_len - chunk_size + j`` of its
    sequence and attends the cached tokens up to it (causal, bottom-right; with a window
    ``(left, 0)`` only those ``>= position - left``). Token ``t`` lives in page
    ``page_indices[t // page_size]`` at slot ``t % page_size`` of every kv head of the caches.
    ``context_len`` is ``[1]``.
    """

    query: Any = array("chunk_size", "num_heads", "head_dim")
    key_cache: Any = array("num_kv_heads", "total_num_pages", "page_size", "head_dim", same_dtype_as="query")
    value_cache: Any = array("num_kv_heads", "total_num_pages", "page_size", "head_dim", same_dtype_as="query")
    context_len: Any = array(None, kind="int")
    page_indices: Any = array("num_pages", kind="int")
    softmax_scale: float = static(1.0, key="ignore")
    logits_soft_cap: float | None = static(None, key="presence", parse=positive_float)
    sliding_window: tuple[int, int] | None = static(None)

    @property
    def num_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def dtype(self) -> Any:
        return self.query.dtype


# One sequence: no sinks; keys and values share one head dim.
FEATURES: dict[str, tuple[str, Any]] = {
    k: v for k, v in SERVING_FEATURES.items() if k not in ("value_head_dim", "softmax_aux")
}


class PrefillPageAttention(Op):
    """The ``prefill_page_attention`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "prefill_page_attention"
    config_cls = PrefillPageAttentionConfig
    args_cls = PrefillPageAttentionArgs
    features: ClassVar[dict[str, tuple[str, Any]]] = FEATURES

    def canonicalize(self, p: dict[str, Any]) -> PrefillPageAttentionArgs:
        op = self.name
        # A documented no-op (see the function's docstring), type-checked all the same.
        static_float(op, "mask_value", p.pop("mask_value", None), positive=False)
        cap = static_float(op, "attn_logits_soft_cap", p.pop("attn_logits_soft_cap", None))
        window = last_tokens_window(op, "sliding_window", p.pop("sliding_window", None))
        q, lens = p["query"], p["context_len"]
        if lens.shape != (1,):
            raise ValueError(f"{op}: context_len must be [1] (the sequence's length), got {shape_str(lens)}")
        scale = static_float(op, "softmax_scale", p.get("softmax_scale"))
        if scale is None:
            scale = 1.0 / math.sqrt(int(q.shape[2])) if q.shape[2] else 1.0
        return PrefillPageAttentionArgs.build(op, p, softmax_scale=scale, logits_soft_cap=cap, sliding_window=window)

    def value_rules(self, a: PrefillPageAttentionArgs) -> list[ValueRule]:
        chunk, ps, capacity, pages = a.chunk_size, a.page_size, a.num_pages * a.page_size, a.total_num_pages

        def bad_pages(xp: Any, idx: Any, n: Any) -> Any:
            used = xp.arange(idx.shape[0]) < -(-n[0] // ps)
            return used & ((idx < 0) | (idx >= pages))

        return [
            ValueRule(
                ("context_len",),
                f"must be in [chunk_size = {chunk}, num_pages * page_size = {capacity}] "
                "(the query chunk is the last chunk_size tokens of the context)",
                lambda xp, n: (n < chunk) | (n > capacity),
            ),
            ValueRule(
                ("page_indices", "context_len"),
                f"must index the caches' {pages} pages (in [0, {pages})) for every page the context uses",
                bad_pages,
            ),
        ]

    def autotune_inputs(self, a: PrefillPageAttentionArgs, seed: int = 0) -> PrefillPageAttentionArgs:
        # Traced indices become the context at full capacity over pages in random order.
        changes: dict[str, Any] = {}
        if concrete(a.context_len) is None:
            changes["context_len"] = jnp.full((1,), a.num_pages * a.page_size, jnp.int32)
        if concrete(a.page_indices) is None:
            rng = np.random.default_rng(seed)
            pages = rng.permutation(max(a.total_num_pages, a.num_pages))[: a.num_pages] % a.total_num_pages
            changes["page_indices"] = jnp.asarray(pages, jnp.int32)
        return dataclasses.replace(a.random_like(seed), **changes)
