"""The ``lightning_attention`` op: linear attention whose per-head decay depends on the layer (or
is given explicitly as ``decay``, the earlier releases' keyword)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..args import as_array, check_kind, concrete, shape_str, static_int
from ..families.linear_attention import LinearAttentionConfig, LinearAttentionOp, lightning_decay

__all__ = ["LightningAttention", "LightningAttentionConfig"]


@dataclasses.dataclass(frozen=True)
class LightningAttentionConfig(LinearAttentionConfig):
    __doc__ = "Config of ``lightning_attention``. " + (LinearAttentionConfig.__doc__ or "")


class LightningAttention(LinearAttentionOp):
    """The ``lightning_attention`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "lightning_attention"
    version = "1"
    config_cls = LightningAttentionConfig

    def gates(self, params: dict[str, Any]) -> dict[str, Any]:
        heads = int(params["query"].shape[2]) if params["query"].ndim == 4 else 1
        decay = params.get("decay")
        if decay is not None:
            # Explicit per-head decay rates (MiniMax's slopes): the log decay is -decay.
            if params.get("layer_idx") is not None or params.get("num_layers") is not None:
                raise ValueError(f"{self.name}: pass decay or layer_idx and num_layers, not both")
            decay = as_array(self.name, "decay", decay, ndim=1, layout="[num_heads]")
            check_kind(self.name, "decay", decay, "float")
            if int(decay.shape[0]) != heads:
                raise ValueError(
                    f"{self.name}: decay must be [num_heads = {heads}], got {shape_str(decay)} "
                    f"(query {shape_str(params['query'])})"
                )
            value = concrete(decay)
            if value is not None and not bool(np.all(value >= 0)):
                raise ValueError(f"{self.name}: decay holds decay rates and must be >= 0, got {value.tolist()}")
            return {"g_gamma": -decay.astype(jnp.float32)}
        given = [n for n in ("layer_idx", "num_layers") if params.get(n) is not None]
        if len(given) < 2:
            got = "neither" if not given else f"{given[0]}={params[given[0]]!r} alone"
            raise TypeError(
                f"{self.name}: the per-head decay comes from decay [num_heads = {heads}] (the rates) or from "
                f"layer_idx and num_layers (this layer's index in a model of num_layers layers); got {got}"
            )
        num_layers = static_int(self.name, "num_layers", params.get("num_layers"), minimum=1, allow_none=False)
        layer_idx = static_int(self.name, "layer_idx", params.get("layer_idx"), minimum=0, allow_none=False)
        assert num_layers is not None and layer_idx is not None
        if layer_idx >= num_layers:
            raise ValueError(f"{self.name}: layer_idx must be in [0, num_layers={num_layers}), got {layer_idx}")
        return {"g_gamma": jnp.asarray(lightning_decay(heads, layer_idx, num_layers))}
