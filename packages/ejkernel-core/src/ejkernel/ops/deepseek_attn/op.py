"""The ``deepseek_attn`` op: DeepSeek sparse attention (DSA, DeepSeek-V3.2) over MLA: a lightning
indexer picks the top-k keys of each query, and multi-head latent attention attends only those."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import jax.numpy as jnp

from ..args import array, shape_str, static, static_float, static_int
from ..families.latent_attention import LATENT_FEATURES, LatentAttentionArgs, bind_latent
from ..flash_mla.op import FlashMLAConfig
from ..op import Op

__all__ = ["DeepSeekAttn", "DeepSeekAttnArgs", "DeepSeekAttnConfig"]


@dataclasses.dataclass(frozen=True)
class DeepSeekAttnConfig(FlashMLAConfig):
    __doc__ = "Config of ``deepseek_attn`` (the tiles of its latent attention). " + (FlashMLAConfig.__doc__ or "")


class DeepSeekAttnArgs(LatentAttentionArgs):
    """Canonical arguments of ``deepseek_attn``: the latent attention's (see
    :mod:`ejkernel.ops.families.latent_attention`) and the lightning indexer's inputs, which
    only select keys (no gradient reaches them)."""

    query_index: Any = array("batch", "seq_q", "index_heads", "index_head_dim")
    key_index: Any = array("batch", "seq_k", "index_head_dim")
    index_weights: Any = array("batch", "seq_q", "index_heads")
    index_topk: int = static(2048)
    index_softmax_scale: float = static(1.0, key="ignore")


FEATURES: dict[str, tuple[str, Any]] = {name: LATENT_FEATURES[name] for name in ("causal", "rope", "gqa", "cross")} | {
    "all_keys": ("index_topk covers every key (no sparsity)", lambda a: a.index_topk >= a.seq_k),
    # What GPU kernels may decline: their latent tiles in float32 outgrow a block's shared memory.
    "float32_wide_latent": (
        "float32 inputs with a latent row (kv_lora_rank + rope) above 128 lanes",
        lambda a: jnp.dtype(a.dtype) == jnp.float32 and a.kv_lora_rank + a.rope_dim > 128,
    ),
}


class DeepSeekAttn(Op):
    """The ``deepseek_attn`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "deepseek_attn"
    version = "1"
    config_cls = DeepSeekAttnConfig
    args_cls = DeepSeekAttnArgs
    trainable = True
    output_axes = ("batch", "seq_q", "num_heads", "value_head_dim")
    features: ClassVar[dict[str, tuple[str, Any]]] = FEATURES

    def canonicalize(self, p: dict[str, Any]) -> DeepSeekAttnArgs:
        op = self.name
        topk = static_int(op, "index_topk", p.get("index_topk", 2048), minimum=1, allow_none=False)
        qi = p["query_index"]
        scale = static_float(op, "index_softmax_scale", p.get("index_softmax_scale"))
        if scale is None:
            scale = 1.0 / math.sqrt(int(qi.shape[-1]))
        w = p["index_weights"]
        if tuple(w.shape) != tuple(qi.shape[:3]):
            raise ValueError(
                f"{op}: index_weights must be [batch, seq_q, index_heads] = {tuple(qi.shape[:3])} like query_index: "
                f"index_weights {shape_str(w)}, query_index {shape_str(qi)}"
            )
        return bind_latent(op, p, DeepSeekAttnArgs, index_topk=topk, index_softmax_scale=scale)
