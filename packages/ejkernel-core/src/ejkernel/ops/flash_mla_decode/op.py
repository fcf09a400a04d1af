"""The ``flash_mla_decode`` op: MLA decode (the absorbed form) over a paged latent cache."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax.numpy as jnp

from ..args import Args, ShardPlan, array, flag, shape_str, static, static_float, static_int
from ..checks import ValueRule
from ..config import OpConfig, tile
from ..families.serving import paged_autotune_indices, paged_decode_rules
from ..op import Op

__all__ = ["FlashMLADecode", "FlashMLADecodeArgs", "FlashMLADecodeConfig"]


@dataclasses.dataclass(frozen=True)
class FlashMLADecodeConfig(OpConfig):
    """Config of ``flash_mla_decode``.

    Attributes:
        block_n: latent rows (cached tokens) one step attends (Triton: the key tile; XLA: tokens
            gathered per step, rounded down to whole pages, at least one).
        block_h: query rows (query tokens × heads, flattened) one program holds (Triton): every
            latent tile a program reads serves all of them.
        num_splits: split-K: each sequence's context is cut into this many parts, merged in a
            second pass (Triton; the XLA scan takes ``None`` or 1).
        num_warps: warps per program (Triton).
        num_stages: software-pipelining depth of the key loop (Triton).

    ``None`` fields are chosen by the implementation's heuristic (or by autotuning).
    """

    block_n: int | None = tile(power_of_two=True)
    block_h: int | None = tile(power_of_two=True)
    num_splits: int | None = tile()
    num_warps: int | None = tile(power_of_two=True, maximum=32)
    num_stages: int | None = tile()


class FlashMLADecodeArgs(
    Args,
    shardable=("batch", "num_heads"),
    shard_reasons={
        "num_pages": "the page pool is shared by every sequence",
        "page_size": "a page is read whole",
        "max_pages": "a sequence's page table is read whole",
        "seq_q": "a sequence's query tokens attend one causal range together",
        "head_dim": "the latent row is one dot product",
    },
):
    """Canonical arguments of a paged latent decode call.

    Sequence ``b`` has ``context_lens[b]`` cached latent rows; row ``t`` is slot
    ``t % page_size`` of page ``block_tables[b, t // page_size]``. Its ``seq_q`` query tokens
    are the last of its context: token ``i`` sits at position ``context_lens[b] - seq_q + i``
    and, when ``causal``, attends rows up to it (else every row). The first ``kv_lora_rank``
    lanes of a latent row are its value; all ``head_dim`` lanes are its key.
    """

    query: Any = array("batch", "seq_q", "num_heads", "head_dim")
    latent_cache: Any = array("num_pages", "page_size", "head_dim", same_dtype_as="query")
    context_lens: Any = array("batch", kind="int")
    block_tables: Any = array("batch", "max_pages", kind="int")
    kv_lora_rank: int = static()
    softmax_scale: float = static(1.0, key="ignore")
    causal: bool = static(True, parse=flag)
    return_lse: bool = static(False, parse=flag)

    @property
    def rope_dim(self) -> int:
        """The rotary lanes after the latent (``head_dim - kv_lora_rank``; 64 in DeepSeek-V3)."""
        return self.head_dim - self.kv_lora_rank

    @property
    def dtype(self) -> Any:
        return self.query.dtype


#: The features an implementation may decline (GPU kernels: a wide float32 latent row).
FEATURES: dict[str, tuple[str, Any]] = {
    "float32_wide_latent": (
        "float32 inputs with a latent row (kv_lora_rank + rope) above 128 lanes",
        lambda a: jnp.dtype(a.dtype) == jnp.float32 and a.head_dim > 128,
    ),
}


class FlashMLADecode(Op):
    """The ``flash_mla_decode`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "flash_mla_decode"
    config_cls = FlashMLADecodeConfig
    args_cls = FlashMLADecodeArgs
    features: ClassVar[dict[str, tuple[str, Any]]] = FEATURES
    output_axes: ClassVar[tuple[str | None, ...]] = ("batch", "seq_q", "num_heads", None)

    def output_axes_of(self, a: FlashMLADecodeArgs) -> Any:
        return (self.output_axes, ("batch", "seq_q", "num_heads")) if a.return_lse else self.output_axes

    def canonicalize(self, p: dict[str, Any]) -> FlashMLADecodeArgs:
        op = self.name
        q = p["query"]
        d = int(q.shape[-1])
        rank = static_int(op, "kv_lora_rank", p.pop("kv_lora_rank", None), minimum=1, allow_none=False)
        assert rank is not None
        if rank > d:
            raise ValueError(
                f"{op}: kv_lora_rank ({rank}) must be at most the query's last dim (kv_lora_rank + rope dim = "
                f"{d}): query {shape_str(q)}, latent_cache {shape_str(p['latent_cache'])}"
            )
        scale = static_float(op, "softmax_scale", p.get("softmax_scale"))
        if scale is None:
            scale = d**-0.5 if d else 1.0
        return FlashMLADecodeArgs.build(op, p, kv_lora_rank=rank, softmax_scale=scale)

    def shard_plan(self, a: FlashMLADecodeArgs, in_specs: Any, mesh: Any) -> ShardPlan:
        # The specs of query and latent_cache are needed; context_lens and block_tables follow the batch.
        return a.shard_plan(self.name, in_specs, mesh, self.positional_arrays(), required=2)

    def value_rules(self, a: FlashMLADecodeArgs) -> list[ValueRule]:
        return paged_decode_rules(
            capacity=a.max_pages * a.page_size, page_size=a.page_size, num_pages=a.num_pages, unit="page"
        )

    def autotune_inputs(self, a: FlashMLADecodeArgs, seed: int = 0) -> FlashMLADecodeArgs:
        lens, tables = paged_autotune_indices(
            a.context_lens, a.block_tables, capacity=a.max_pages * a.page_size, num_pages=a.num_pages, seed=seed
        )
        return dataclasses.replace(a.random_like(seed), context_lens=lens, block_tables=tables)
