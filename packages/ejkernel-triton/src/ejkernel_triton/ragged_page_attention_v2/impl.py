"""The Triton ``ragged_page_attention_v2`` implementation: what it declares, its configs, its entry point."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from ejkernel.ops import DeviceInfo, KernelImpl, Need, OpConfig
from ejkernel.ops.op import op_class
from ejkernel.ops.ragged_page_attention_v2 import RaggedPageAttentionv2Args, RaggedPageAttentionv2Config

from .._launch import gpu_availability
from . import heuristics as H
from .heuristics import Tiles, _pow2


def shape_of(args: RaggedPageAttentionv2Args) -> H.Shape:
    g = args.num_groups
    return H.Shape(
        tokens=args.total_tokens,
        max_seqs=args.max_num_seqs,
        kv_heads=args.num_kv_heads,
        groups=g,
        head_dim=args.head_dim,
        value_head_dim=args.head_dim,
        page_size=args.page_size,
        max_context=args.pages_per_seq * args.page_size,
        itemsize=jnp.dtype(args.dtype).itemsize,
        # With no more tokens than a decode takes, no sequence can be a prefill.
        prefill=args.total_tokens > H.decode_q(g),
    )


def tiles_of(cfg: RaggedPageAttentionv2Config, args: RaggedPageAttentionv2Args) -> Tiles:
    """The kernel's tiles: the key step is ``num_kv_pages_per_block`` pages rounded up to a power
    of two of tokens (any page size works: each token finds its page)."""
    assert cfg.num_kv_pages_per_block and cfg.num_queries_per_block and cfg.num_warps and cfg.num_stages
    assert cfg.num_splits
    return Tiles(
        block_n=_pow2(cfg.num_kv_pages_per_block * args.page_size),
        block_q=cfg.num_queries_per_block,
        decode_q=H.decode_q(args.num_groups),
        num_splits=cfg.num_splits,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


def config_of(t: Tiles, page_size: int, cls: type = RaggedPageAttentionv2Config) -> RaggedPageAttentionv2Config:
    """The op's config of ``t`` (``cls``: v2's or v3's, the same fields)."""
    return cls(
        num_kv_pages_per_block=max(1, t.block_n // page_size),
        num_queries_per_block=t.block_q,
        num_warps=t.num_warps,
        num_stages=t.num_stages,
        num_splits=t.num_splits,
    )


class TritonPaged(KernelImpl):
    """What every op on the Triton paged attention kernel declares: the devices and dtypes it
    runs on (the subclasses add their op's limits and configs)."""

    device_requirement = "an NVIDIA GPU"
    dtypes = ("float16", "bfloat16", "float32")
    # Measured: Triton 3.6 asked for 262144 B of shared memory on an H200 (232448 B per block) for
    # float32 at d 136 with 32-key steps and 2 stages, beyond what the smem model predicts.
    unsupported: ClassVar[Mapping[str, str]] = {
        "float32_wide_heads": "float32 with a head dim above 128 needs more shared memory than a GPU block has"
    }

    def available(self, device: DeviceInfo) -> str | None:
        return gpu_availability(device)

    # The op's view of the kernel: its shape, the tiles of a config, the config of tiles.
    def shape(self, args: Any) -> H.Shape:
        raise NotImplementedError

    def tiles(self, cfg: Any, args: Any) -> Tiles:
        raise NotImplementedError

    def config(self, t: Tiles, args: Any) -> Any:
        raise NotImplementedError

    def heuristic_cfg(self, args: Any, device: DeviceInfo) -> Any:
        s, cc = self.shape(args), device.compute_capability
        # Through the op's config and back (its granularity, e.g. whole pages), then fitted.
        t = self.tiles(self.config(H.heuristic(s, cc), args), args)
        return self.config(H.fit(s, t, cc), args)

    def candidate_cfgs(self, args: Any, device: DeviceInfo) -> list[Any]:
        return list(
            dict.fromkeys(self.config(t, args) for t in H.candidates(self.shape(args), device.compute_capability))
        )

    def validate_cfg(self, cfg: Any, args: Any, device: DeviceInfo) -> None:
        H.check(self.tiles(cfg, args))

    def resources(self, cfg: Any, args: Any, device: DeviceInfo) -> list[Need]:
        return H.needs(self.shape(args), self.tiles(cfg, args))


class TritonRaggedPageAttentionv2(TritonPaged):
    """Ragged paged attention in one Triton launch for NVIDIA GPUs: split-K decode tiles (a GQA
    group's heads as the rows) and FlashAttention-2 prefill tiles, reading the interleaved cache
    in place through the block table; the decode splits are merged in XLA."""

    max_sizes: ClassVar[Mapping[str, int]] = {"head_dim": 256}
    # One page per key step (many steps, page-crossing windows), 2-token prefill tiles (several
    # tiles per chunk) and 3 splits: every path of the kernel on the small cases.
    test_configs: ClassVar[Mapping[str, OpConfig]] = {
        "page1-q2-split3": RaggedPageAttentionv2Config(
            num_kv_pages_per_block=1, num_queries_per_block=2, num_warps=4, num_stages=1, num_splits=3
        )
    }

    def shape(self, args: RaggedPageAttentionv2Args) -> H.Shape:
        return shape_of(args)

    def tiles(self, cfg: RaggedPageAttentionv2Config, args: RaggedPageAttentionv2Args) -> Tiles:
        return tiles_of(cfg, args)

    def config(self, t: Tiles, args: RaggedPageAttentionv2Args) -> RaggedPageAttentionv2Config:
        return config_of(t, args.page_size, op_class(self.op_name).config_cls)

    def run(self, args: RaggedPageAttentionv2Args, cfg: RaggedPageAttentionv2Config) -> jax.Array:
        from ._call import interleaved_view, paged_attention

        view = interleaved_view(args.kv_pages)
        return paged_attention(
            args.queries, args.kv_pages, args.kv_pages, view, args.context_lens, args.block_tables,
            args.query_start_loc, args.num_seqs, args.softmax_aux,
            num_kv_heads=args.num_kv_heads, scale=args.softmax_scale, soft_cap=args.logits_soft_cap,
            window_left=None if args.sliding_window is None else args.sliding_window[0],
            tiles=tiles_of(cfg, args), prefill=shape_of(args).prefill,
        )  # fmt: skip
