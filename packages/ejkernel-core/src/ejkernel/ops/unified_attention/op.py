"""The ``unified_attention`` op: vLLM's unified attention, packed query tokens of many sequences
over one paged cache of separate keys and values."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

from ..args import Args, array, flag, positive_float, shape_str, static, static_bool, static_float, static_int
from ..checks import ValueRule
from ..config import OpConfig, tile
from ..families.serving import FEATURES as SERVING_FEATURES
from ..families.serving import last_tokens_window, ragged_autotune_indices, ragged_index_rules
from ..op import Op

__all__ = ["UnifiedAttention", "UnifiedAttentionArgs", "UnifiedAttentionConfig"]


@dataclasses.dataclass(frozen=True)
class UnifiedAttentionConfig(OpConfig):
    """Config of ``unified_attention``.

    Attributes:
        seq_threshold_3d: at most this many sequences, all decoding, run the segmented ("3D")
            kernel, whose programs split each context into softmax segments (GPU kernels; the
            call's ``seq_threshold_3d`` sets it).
        num_par_softmax_segments: softmax segments per context in the segmented kernel (GPU).
        block_dim: cached tokens one step of the kernel attends (XLA: ``block_dim // block_size``
            whole pages per step of the online-softmax scan, at least one).
        num_warps: warps per program (GPU kernels).
        num_stages: software-pipelining depth (GPU kernels).
    """

    seq_threshold_3d: int | None = tile()
    num_par_softmax_segments: int | None = tile(power_of_two=True)
    block_dim: int | None = tile()
    num_warps: int | None = tile(power_of_two=True, maximum=32)
    num_stages: int | None = tile()


class UnifiedAttentionArgs(Args, divides=[("num_kv_heads", "num_heads")]):
    """Canonical arguments of a unified attention call.

    Sequence ``i`` owns query rows ``query_start_loc[i] .. query_start_loc[i + 1] - 1`` (``q_len``
    of them), the last ``q_len`` tokens of its ``kv_lens[i]``: row ``j`` of it sits at position
    ``context_len + j`` (``context_len = kv_lens[i] - q_len``) and attends the cached tokens up to
    it (with a window ``(left, 0)``, only those ``>= position - left``). Token ``t`` lives in block
    ``block_tables[i, t // block_size]`` at slot ``t % block_size`` of both caches. The logits of
    key ``t`` are scaled, soft-capped, then biased by ``alibi_slopes[h] * (t - context_len)`` and,
    for ``0 <= t - context_len < q_len``, by ``qq_bias[j, t - context_len]``. Rows past
    ``query_start_loc[num_seqs]`` are padding (zero output, ``-inf`` log-sum-exp).
    """

    queries: Any = array("total_tokens", "num_heads", "head_dim")
    key_cache: Any = array("num_blocks", "block_size", "num_kv_heads", "head_dim", same_dtype_as="queries")
    value_cache: Any = array("num_blocks", "block_size", "num_kv_heads", "head_dim", same_dtype_as="queries")
    kv_lens: Any = array("num_seqs", kind="int")
    block_tables: Any = array("num_seqs", "max_blocks_per_seq", kind="int")
    query_start_loc: Any = array(None, kind="int")
    alibi_slopes: Any = array("num_heads", optional=True)
    qq_bias: Any = array("num_query_tokens", "num_query_tokens", optional=True)
    softmax_aux: Any = array("num_heads", optional=True)
    softmax_scale: float = static(1.0, key="ignore")
    logits_soft_cap: float | None = static(None, key="presence", parse=positive_float)
    sliding_window: tuple[int, int] | None = static(None)
    return_lse: bool = static(False, parse=flag)

    @property
    def num_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def dtype(self) -> Any:
        return self.queries.dtype


# Keys and values share one head dim, as in vLLM's caches.
FEATURES: dict[str, tuple[str, Any]] = {
    **{k: v for k, v in SERVING_FEATURES.items() if k != "value_head_dim"},
    "alibi_slopes": (
        "ALiBi: slope · (key position - context length) added to the logits",
        lambda a: a.alibi_slopes is not None,
    ),
    "qq_bias": ("a bias between the step's query tokens", lambda a: a.qq_bias is not None),
    "return_lse": ("also return the log-sum-exp", lambda a: a.return_lse),
}


class UnifiedAttention(Op):
    """The ``unified_attention`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "unified_attention"
    config_cls = UnifiedAttentionConfig
    args_cls = UnifiedAttentionArgs
    features: ClassVar[dict[str, tuple[str, Any]]] = FEATURES
    output_axes: ClassVar[tuple[str | None, ...]] = ("total_tokens", "num_heads", "head_dim")

    def output_axes_of(self, a: UnifiedAttentionArgs) -> Any:
        return (self.output_axes, ("total_tokens", "num_heads")) if a.return_lse else self.output_axes

    def config_hints(self, p: dict[str, Any]) -> dict[str, Any]:
        threshold = static_int(self.name, "seq_threshold_3d", p.pop("seq_threshold_3d", None), minimum=1)
        return {} if threshold is None else {"seq_threshold_3d": threshold}

    def canonicalize(self, p: dict[str, Any]) -> UnifiedAttentionArgs:
        op = self.name
        if not static_bool(op, "causal", p.pop("causal", True)):
            raise ValueError(
                f"{op}: causal=False is not supported: as in vLLM, each sequence's queries are the last tokens of "
                "its context and attend the tokens up to their own position (causal=True)"
            )
        window = last_tokens_window(op, "sliding_window", p.pop("sliding_window", None))
        q, lens, qsl = p["queries"], p["kv_lens"], p["query_start_loc"]
        if qsl.shape[0] != lens.shape[0] + 1:
            raise ValueError(
                f"{op}: query_start_loc must be [num_seqs + 1] for kv_lens [num_seqs]: "
                f"query_start_loc {shape_str(qsl)}, kv_lens {shape_str(lens)}"
            )
        qq = p.get("qq_bias")
        if qq is not None and qq.shape[0] != qq.shape[1]:
            raise ValueError(
                f"{op}: qq_bias must be square [num_query_tokens, num_query_tokens] (query token by query token), "
                f"got {shape_str(qq)}"
            )
        scale = static_float(op, "softmax_scale", p.get("softmax_scale"))
        if scale is None:
            scale = 1.0 / math.sqrt(int(q.shape[2])) if q.shape[2] else 1.0
        return UnifiedAttentionArgs.build(op, p, softmax_scale=scale, sliding_window=window)

    def value_rules(self, a: UnifiedAttentionArgs) -> list[ValueRule]:
        rules = ragged_index_rules(
            max_num_seqs=a.num_seqs,
            total_tokens=a.total_tokens,
            pages_per_seq=a.max_blocks_per_seq,
            page_size=a.block_size,
            num_pages=a.num_blocks,
            lens="kv_lens",
            tables="block_tables",
            num_seqs=None,
        )
        if a.qq_bias is not None:
            n = a.num_query_tokens

            def too_many(xp: Any, qsl: Any) -> Any:
                return xp.concatenate([qsl[:1] != qsl[:1], qsl[1:] - qsl[:-1] > n])

            rules.append(
                ValueRule(
                    ("query_start_loc",),
                    f"must give no sequence more query tokens than qq_bias has rows ({n})",
                    too_many,
                )
            )
        return rules

    def autotune_inputs(self, a: UnifiedAttentionArgs, seed: int = 0) -> UnifiedAttentionArgs:
        lens, tables, qsl, _ = ragged_autotune_indices(
            a.kv_lens,
            a.block_tables,
            a.query_start_loc,
            a.num_seqs,
            total_tokens=a.total_tokens,
            pages_per_seq=a.max_blocks_per_seq,
            page_size=a.block_size,
            num_pages=a.num_blocks,
            seed=seed,
        )
        return dataclasses.replace(a.random_like(seed), kv_lens=lens, block_tables=tables, query_start_loc=qsl)
