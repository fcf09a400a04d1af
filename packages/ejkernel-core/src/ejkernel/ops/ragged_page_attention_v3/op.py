"""The ``ragged_page_attention_v3`` op: one serving step of packed query tokens that first writes
the step's new keys and values into a packed, K/V-interleaved paged cache, then attends it."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np

from ..args import Args, array, concrete, positive_float, shape_str, static, static_float, static_int, window
from ..checks import ValueRule
from ..config import OpConfig, tile
from ..families.serving import FEATURES as SERVING_FEATURES
from ..families.serving import ragged_autotune_indices, ragged_index_rules, sinks_per_head
from ..op import Op
from .kv_cache import LANES, kv_packing

__all__ = ["RaggedPageAttentionv3", "RaggedPageAttentionv3Args", "RaggedPageAttentionv3Config"]


@dataclasses.dataclass(frozen=True)
class RaggedPageAttentionv3Config(OpConfig):
    """Config of ``ragged_page_attention_v3``.

    Attributes:
        num_kv_pages_per_block: pages one step of the kernel attends (XLA: pages gathered per
            step of the online-softmax scan).
        num_queries_per_block: query tokens per tile (GPU/TPU kernels).
        num_warps: warps per program (GPU kernels).
        num_stages: software-pipelining depth (GPU kernels).
        chunk_prefill_size: query tokens of a prefill processed per pass (TPU kernel).
        num_splits: split-K of decode sequences (GPU kernels): programs per sequence and kv
            head, each attending one range of the context.
    """

    num_kv_pages_per_block: int | None = tile()
    num_queries_per_block: int | None = tile()
    num_warps: int | None = tile(power_of_two=True, maximum=32)
    num_stages: int | None = tile()
    chunk_prefill_size: int | None = tile()
    num_splits: int | None = tile()


class RaggedPageAttentionv3Args(Args, divides=[("num_kv_heads", "num_heads")]):
    """Canonical arguments of a ``ragged_page_attention_v3`` call.

    Sequence ``i < num_seqs`` (``num_seqs = distribution[2]``, a 0-D int array that may be
    traced) owns query rows ``query_start_loc[i] .. query_start_loc[i + 1] - 1`` (``q_len`` of
    them) and as many rows of ``keys``/``values``: the last ``q_len`` tokens of its
    ``kv_lens[i]``. Row ``j`` sits at position ``p = kv_lens[i] - q_len + j``; its key and value
    are written to page ``block_tables[i * pages_per_seq + p // page_size]``, slot ``p %
    page_size`` of ``kv_cache`` (packed: see :mod:`.kv_cache`), then its query attends the
    cached tokens up to ``p`` (with a window ``(left, right)``, only those ``>= p - left``).
    Rows past ``query_start_loc[num_seqs]`` are padding: they write nothing and come out zero.
    """

    queries: Any = array("total_tokens", "num_heads", "head_dim")
    keys: Any = array("total_tokens", "num_kv_heads", "head_dim", same_dtype_as="queries")
    values: Any = array("total_tokens", "num_kv_heads", "head_dim", same_dtype_as="queries")
    kv_cache: Any = array("num_pages", "page_size", "num_packed_heads", "kv_packing", "head_dim_padded")
    kv_lens: Any = array("max_num_seqs", kind="int")
    block_tables: Any = array("table_entries", kind="int")
    query_start_loc: Any = array(None, kind="int")
    distribution: Any = array(None, kind="int")
    num_seqs: Any = array(kind="int", ranks=(0,))  # distribution[2]
    softmax_aux: Any = array("num_heads", "num_sinks", optional=True, ranks=(1, 2))
    softmax_scale: float = static(1.0, key="ignore")
    logits_soft_cap: float | None = static(None, key="presence", parse=positive_float)
    sliding_window: tuple[int, int] | None = static(None, parse=window)
    q_scale: float | None = static(None, key="presence", parse=positive_float)
    k_scale: float | None = static(None, key="presence", parse=positive_float)
    v_scale: float | None = static(None, key="presence", parse=positive_float)

    @property
    def pages_per_seq(self) -> int:
        return self.table_entries // self.max_num_seqs

    @property
    def num_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def dtype(self) -> Any:
        return self.queries.dtype

    @property
    def quantized(self) -> bool:
        """An 8-bit cache or a quantization scale: what no implementation supports yet."""
        scales = (self.q_scale, self.k_scale, self.v_scale)
        return jnp.dtype(self.kv_cache.dtype).itemsize == 1 or any(s is not None for s in scales)


# Keys and values share one head dim in the interleaved cache.
FEATURES: dict[str, tuple[str, Any]] = {
    **{k: v for k, v in SERVING_FEATURES.items() if k != "value_head_dim"},
    "quantized_kv_cache": ("an fp8/int8 KV cache, or q_scale/k_scale/v_scale", lambda a: a.quantized),
}

#: The decline of the quantized cache (``FEATURES["quantized_kv_cache"]``) every implementation gives.
QUANTIZED_KV_UNSUPPORTED = "fp8/quantized KV cache is not supported yet"


class RaggedPageAttentionv3(Op):
    """The ``ragged_page_attention_v3`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "ragged_page_attention_v3"
    config_cls = RaggedPageAttentionv3Config
    args_cls = RaggedPageAttentionv3Args
    features: ClassVar[dict[str, tuple[str, Any]]] = FEATURES
    # Engines hand the cache over each step (the TPU kernel is jitted with donate_argnames=kv_cache):
    # an eager call updates it in place instead of copying a cache that may fill the device.
    donate: ClassVar[tuple[str, ...]] = ("kv_cache",)

    def canonicalize(self, p: dict[str, Any]) -> RaggedPageAttentionv3Args:
        op = self.name
        # A TPU kernel's tuning option, type-checked and ignored (see the function's docstring).
        static_int(op, "vmem_limit_bytes", p.pop("vmem_limit_bytes", None), minimum=1)
        q, cache = p["queries"], p["kv_cache"]
        d, cdt = int(q.shape[2]), jnp.dtype(cache.dtype)
        if cdt != q.dtype and cdt.itemsize != 1:
            raise TypeError(
                f"{op}: kv_cache ({cdt.name}) must have the dtype of queries ({jnp.dtype(q.dtype).name}), "
                "or be an 8-bit (fp8/int8) cache; cast one of them"
            )
        layout = "[num_pages, page_size, ceil(2 * num_kv_heads / kv_packing), kv_packing, head_dim_padded]"
        pack = kv_packing(cdt)
        if int(cache.shape[3]) != pack:
            raise ValueError(
                f"{op}: kv_cache {layout} packs {pack} {cdt.name} values per 32-bit word: its kv_packing axis "
                f"(dim 3) must be {pack}, got kv_cache {shape_str(cache)}"
            )
        dp = int(cache.shape[4])
        if dp % LANES or dp < d:
            raise ValueError(
                f"{op}: kv_cache's head_dim_padded (dim 4) must be a multiple of {LANES} and at least the "
                f"head dim {d} of queries: kv_cache {shape_str(cache)}, queries {shape_str(q)}"
            )
        hk = int(p["keys"].shape[1])
        if int(cache.shape[2]) != -(-2 * hk // pack):
            raise ValueError(
                f"{op}: kv_cache {layout} holds keys and values of {hk} kv heads (those of keys) in "
                f"{-(-2 * hk // pack)} packed rows (dim 2), got kv_cache {shape_str(cache)}, keys {shape_str(p['keys'])}"
            )
        lens, qsl, tables, dist = p["kv_lens"], p["query_start_loc"], p["block_tables"], p["distribution"]
        m = int(lens.shape[0])
        if qsl.shape[0] != m + 1:
            raise ValueError(
                f"{op}: query_start_loc must be [max_num_seqs + 1] for kv_lens [max_num_seqs]: "
                f"query_start_loc {shape_str(qsl)}, kv_lens {shape_str(lens)}"
            )
        if tables.ndim != 1 or m == 0 or tables.shape[0] % m:
            raise ValueError(
                f"{op}: block_tables must be flattened [max_num_seqs * pages_per_seq] for kv_lens [max_num_seqs]: "
                f"block_tables {shape_str(tables)}, kv_lens {shape_str(lens)}"
            )
        if tuple(dist.shape) != (3,):
            raise ValueError(
                f"{op}: distribution must be [3] (decode_end, prefill_end, num_seqs), got {shape_str(dist)}"
            )
        dist = dist.astype(jnp.int32)
        aux = sinks_per_head(p.get("softmax_aux"), int(q.shape[1]))
        scale = static_float(op, "softmax_scale", p.get("softmax_scale"))
        return RaggedPageAttentionv3Args.build(
            op,
            p,
            distribution=dist,
            num_seqs=dist[2],
            softmax_aux=aux,
            softmax_scale=1.0 if scale is None else scale,
        )

    def value_rules(self, a: RaggedPageAttentionv3Args) -> list[ValueRule]:
        m = a.max_num_seqs

        def bad_distribution(xp: Any, dist: Any) -> Any:
            previous = xp.concatenate([xp.zeros((1,), dist.dtype), dist[:-1]])
            return (dist < previous) | (dist > m)

        return [
            ValueRule(
                ("distribution",),
                f"must be 0 <= decode_end <= prefill_end <= num_seqs <= max_num_seqs = {m}",
                bad_distribution,
            ),
            *ragged_index_rules(
                max_num_seqs=m,
                total_tokens=a.total_tokens,
                pages_per_seq=a.pages_per_seq,
                page_size=a.page_size,
                num_pages=a.num_pages,
                lens="kv_lens",
                tables="block_tables",
                table_rows=lambda t: t.reshape(m, -1),
            ),
        ]

    def output_axes_of(self, a: RaggedPageAttentionv3Args) -> Any:
        return (("total_tokens", "num_heads", "head_dim"), a.axes_of("kv_cache"))

    def autotune_inputs(self, a: RaggedPageAttentionv3Args, seed: int = 0) -> RaggedPageAttentionv3Args:
        lens, tables, qsl, n = ragged_autotune_indices(
            a.kv_lens,
            a.block_tables,
            a.query_start_loc,
            a.num_seqs,
            total_tokens=a.total_tokens,
            pages_per_seq=a.pages_per_seq,
            page_size=a.page_size,
            num_pages=a.num_pages,
            seed=seed,
        )
        dist = concrete(a.distribution)
        if dist is None or int(dist[2]) != int(n):
            dist = np.array([0, 0, int(n)], np.int32)
        return dataclasses.replace(
            a.random_like(seed),
            kv_lens=lens,
            block_tables=tables,
            query_start_loc=qsl,
            distribution=jnp.asarray(dist, jnp.int32),
            num_seqs=n,
        )
