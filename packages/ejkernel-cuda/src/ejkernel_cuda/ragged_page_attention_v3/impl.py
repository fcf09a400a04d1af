"""The CUDA ``ragged_page_attention_v3``: the step's new keys and values scattered into the packed
cache as every implementation does (``kv_cache.write_step``), then v2's decode-or-hand-on step
over the updated cache: unquantized, the packed rows ``[pages, page_size, 2 * kv_heads / packing,
packing, head_dim_padded]`` are exactly v2's interleaved cache ``[pages, page_size, 2 * kv_heads,
head_dim_padded]`` (a free reshape). A step with a prefill is handed to the best other
implementation of ``ragged_page_attention_v2`` over that view, so the cache is written once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax

from ejkernel.ops import DeviceInfo, OpConfig, bind, run_next
from ejkernel.ops.ragged_page_attention_v3 import RaggedPageAttentionv3Args, RaggedPageAttentionv3Config
from ejkernel.ops.ragged_page_attention_v3.kv_cache import write_step
from ejkernel.ops.ragged_page_attention_v3.op import QUANTIZED_KV_UNSUPPORTED

from ..ragged_page_attention_v2.impl import CudaRaggedPaged

__all__ = ["CudaRaggedPageAttentionv3"]


class CudaRaggedPageAttentionv3(CudaRaggedPaged):
    """The fused cache update and ragged paged attention whose decode-only steps run the CUDA
    paged decode over the packed cache in place."""

    unsupported: ClassVar[Mapping[str, str]] = {"quantized_kv_cache": QUANTIZED_KV_UNSUPPORTED}
    test_configs: ClassVar[dict[str, OpConfig]] = {
        "splits3": RaggedPageAttentionv3Config(num_splits=3, num_stages=2),
    }

    def decline(self, args: RaggedPageAttentionv3Args, device: DeviceInfo) -> str | None:
        if args.head_dim_padded != args.head_dim:
            return (
                f"needs head_dim_padded == head_dim (kv_cache pads head dim {args.head_dim} to "
                f"{args.head_dim_padded}): steps with a prefill read the cache as ragged_page_attention_v2's"
            )
        return None

    @staticmethod
    def tables(args: Any) -> jax.Array:
        return args.block_tables.reshape(args.max_num_seqs, args.pages_per_seq)

    @staticmethod
    def lens(args: Any) -> jax.Array:
        return args.kv_lens

    def run(self, args: RaggedPageAttentionv3Args, cfg: RaggedPageAttentionv3Config) -> tuple[jax.Array, jax.Array]:
        cache, _ = write_step(args)
        p, ps, _, _, dp = cache.shape
        pages = cache.reshape(p, ps, 2 * args.num_kv_heads, dp)
        as_v2 = bind(
            "ragged_page_attention_v2", args.queries, pages, args.kv_lens, self.tables(args), args.query_start_loc,
            args.num_seqs, softmax_aux=args.softmax_aux, softmax_scale=args.softmax_scale,
            logits_soft_cap=args.logits_soft_cap, sliding_window=args.sliding_window,
        )  # fmt: skip
        out = self.attend(args, cfg, pages, lambda: run_next(self, "ragged_page_attention_v2", as_v2))
        return out, cache
