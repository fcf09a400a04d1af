"""The ``ragged_page_attention_v2`` op: packed query tokens of many sequences over one paged cache
whose heads interleave keys (even) and values (odd)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import jax.numpy as jnp

from ..args import (
    Args,
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
from ..families.serving import FEATURES as SERVING_FEATURES
from ..families.serving import num_seqs_scalar, ragged_autotune_indices, ragged_index_rules, sinks_per_head
from ..op import Op

__all__ = ["RaggedPageAttentionv2", "RaggedPageAttentionv2Args", "RaggedPageAttentionv2Config"]


@dataclasses.dataclass(frozen=True)
class RaggedPageAttentionv2Config(OpConfig):
    """Config of ``ragged_page_attention_v2``.

    Attributes:
        num_kv_pages_per_block: pages one step of the kernel attends (XLA: pages gathered per
            step of the online-softmax scan).
        num_queries_per_block: query tokens per tile (GPU/TPU kernels).
        num_warps: warps per program (GPU kernels).
        num_stages: software-pipelining depth (GPU kernels).
        num_splits: split-K of decode sequences (GPU kernels): programs per sequence and kv
            head, each over one range of its context, merged in a second pass (``1``: none).
    """

    num_kv_pages_per_block: int | None = tile()
    num_queries_per_block: int | None = tile()
    num_warps: int | None = tile(power_of_two=True, maximum=32)
    num_stages: int | None = tile()
    num_splits: int | None = tile()


class RaggedPageAttentionv2Args(Args):
    """Canonical arguments of a ragged paged attention call.

    Sequence ``i < num_seqs`` owns query rows ``query_start_loc[i] .. query_start_loc[i + 1] - 1``
    (``q_len`` of them), the last ``q_len`` tokens of its ``context_lens[i]``: row ``j`` of it sits at
    position ``context_lens[i] - q_len + j`` and attends cached tokens up to that position (with a
    window ``(left, right)``, only those ``>= position - left``). Token ``t`` of sequence ``i`` lives
    in page ``block_tables[i, t // page_size]`` at slot ``t % page_size``; its key is head ``2h``
    and its value head ``2h + 1`` of ``kv_pages``. Rows past ``query_start_loc[num_seqs]`` are
    padding and come out zero. ``num_seqs`` is a 0-D int array (it may be traced).
    """

    queries: Any = array("total_tokens", "num_heads", "head_dim")
    kv_pages: Any = array("num_pages", "page_size", "num_combined_kv_heads", "head_dim", same_dtype_as="queries")
    context_lens: Any = array("max_num_seqs", kind="int")
    block_tables: Any = array("max_num_seqs", "pages_per_seq", kind="int")
    query_start_loc: Any = array(None, kind="int")
    num_seqs: Any = array(kind="int", ranks=(0, 1))
    softmax_aux: Any = array("num_heads", "num_sinks", optional=True, ranks=(1, 2))
    softmax_scale: float = static(1.0, key="ignore")
    logits_soft_cap: float | None = static(None, key="presence", parse=positive_float)
    sliding_window: tuple[int, int] | None = static(None, parse=window)

    @property
    def num_kv_heads(self) -> int:
        return self.num_combined_kv_heads // 2

    @property
    def num_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def dtype(self) -> Any:
        return self.queries.dtype


# Keys and values share one head dim in the interleaved cache.
FEATURES: dict[str, tuple[str, Any]] = {k: v for k, v in SERVING_FEATURES.items() if k != "value_head_dim"}


class RaggedPageAttentionv2(Op):
    """The ``ragged_page_attention_v2`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "ragged_page_attention_v2"
    config_cls = RaggedPageAttentionv2Config
    args_cls = RaggedPageAttentionv2Args
    features: ClassVar[dict[str, tuple[str, Any]]] = FEATURES

    def canonicalize(self, p: dict[str, Any]) -> RaggedPageAttentionv2Args:
        op = self.name
        # Documented no-ops (see the function's docstring), type-checked all the same.
        static_bool(op, "optimized", p.pop("optimized", False))
        static_float(op, "mask_value", p.pop("mask_value", None), positive=False)
        static_int(op, "vmem_limit_bytes", p.pop("vmem_limit_bytes", None), minimum=1)
        cdt = p.pop("compute_dtype", None)
        if cdt is not None:
            try:
                jnp.dtype(cdt)
            except TypeError:
                raise TypeError(f"{op}: compute_dtype must be a dtype, got {cdt!r}") from None
        q, kv = p["queries"], p["kv_pages"]
        hc = int(kv.shape[2])
        if hc % 2:
            raise ValueError(
                f"{op}: kv_pages interleaves keys and values ([num_pages, page_size, 2 * num_kv_heads, head_dim]): "
                f"its head axis must be even, got kv_pages {shape_str(kv)}"
            )
        if hc and int(q.shape[1]) % (hc // 2):
            raise ValueError(
                f"{op}: queries has {int(q.shape[1])} heads, not a multiple of kv_pages' {hc // 2} kv heads: "
                f"queries {shape_str(q)}, kv_pages {shape_str(kv)}"
            )
        lens, qsl = p["context_lens"], p["query_start_loc"]
        if qsl.shape[0] != lens.shape[0] + 1:
            raise ValueError(
                f"{op}: query_start_loc must be [num_seqs + 1] for context_lens [num_seqs]: "
                f"query_start_loc {shape_str(qsl)}, context_lens {shape_str(lens)}"
            )
        n = num_seqs_scalar(op, p["num_seqs"])
        scale = static_float(op, "softmax_scale", p.get("softmax_scale"))
        if scale is None:
            scale = 1.0 / math.sqrt(int(q.shape[2])) if q.shape[2] else 1.0
        aux = sinks_per_head(p.get("softmax_aux"), int(q.shape[1]))
        return RaggedPageAttentionv2Args.build(op, p, num_seqs=n, softmax_aux=aux, softmax_scale=scale)

    def value_rules(self, a: RaggedPageAttentionv2Args) -> list[ValueRule]:
        return ragged_index_rules(
            max_num_seqs=a.max_num_seqs,
            total_tokens=a.total_tokens,
            pages_per_seq=a.pages_per_seq,
            page_size=a.page_size,
            num_pages=a.num_pages,
            lens="context_lens",
            tables="block_tables",
        )

    def autotune_inputs(self, a: RaggedPageAttentionv2Args, seed: int = 0) -> RaggedPageAttentionv2Args:
        lens, tables, qsl, n = ragged_autotune_indices(
            a.context_lens,
            a.block_tables,
            a.query_start_loc,
            a.num_seqs,
            total_tokens=a.total_tokens,
            pages_per_seq=a.pages_per_seq,
            page_size=a.page_size,
            num_pages=a.num_pages,
            seed=seed,
        )
        return dataclasses.replace(
            a.random_like(seed), context_lens=lens, block_tables=tables, query_start_loc=qsl, num_seqs=n
        )
