"""The ``attention`` op: plain (materialized) multi-head attention that also returns the weights.

Earlier ejkernel releases' ``attention(query, key, value, bias, dropout_rng, softmax_aux, /, ...)``
returns ``(output, attention_weights)``; it shares the dense attention record and its
canonicalization (masks, windows, soft cap, sinks, GQA) with ``flash_attention``, plus its own
options: ``dropout_rng``/``deterministic`` (dropout as earlier releases applied it) and ``dtype``
(the dtype of the weights and the output).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from ..args import Args, static, static_float
from ..config import OpConfig
from ..families.attention import AttentionArgs, AttentionOp, bind_attention, earlier_attention_mask

__all__ = ["Attention", "AttentionConfig", "AttentionWeightsArgs", "dropout_seed_of"]


def _dtype(op: str, name: str, x: Any) -> Any:
    if x is None:
        return None
    try:
        dt = jnp.dtype(x)
    except TypeError:
        raise TypeError(f"{op}: {name} must be a dtype, got {x!r}") from None
    if not jnp.issubdtype(dt, jnp.floating):
        raise TypeError(f"{op}: {name} must be a floating dtype, got {dt.name}")
    return dt


class AttentionWeightsArgs(AttentionArgs):
    """The dense attention record plus the dtype of the returned weights and output."""

    weights_dtype: Any = static(None, parse=_dtype)


@dataclasses.dataclass(frozen=True)
class AttentionConfig(OpConfig):
    """Config of ``attention`` (nothing to tune: only the platform)."""


def dropout_seed_of(op: str, rng: Any) -> Any:
    """``dropout_rng`` as the dropout seed: a ``jax.random`` key gives ``jax.random.bits(key)``;
    an integer (or integer scalar array) is the seed itself."""
    if isinstance(rng, jax.Array) and jnp.issubdtype(rng.dtype, jax.dtypes.prng_key):
        if rng.ndim != 0:
            raise ValueError(f"{op}: dropout_rng must be one jax.random key, got shape {rng.shape}")
        return jax.random.bits(rng, dtype=jnp.uint32)
    if isinstance(rng, jax.Array | jnp.ndarray) and rng.shape == (2,) and rng.dtype == jnp.uint32:
        return jax.random.bits(jax.random.wrap_key_data(rng), dtype=jnp.uint32)  # a raw (legacy) PRNGKey
    return rng


class Attention(AttentionOp):
    """The ``attention`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "attention"
    version = "1"
    config_cls = AttentionConfig
    args_cls = AttentionWeightsArgs

    def output_axes_of(self, args: Args) -> Any:
        return (("batch", "seq_q", "num_heads", "value_head_dim"), ("batch", "num_heads", "seq_q", "seq_k"))

    def bind(self, params: dict[str, Any]) -> Args:
        params = dict(params)
        rng = params.pop("dropout_rng", None)
        deterministic = params.pop("deterministic", True)
        if not isinstance(deterministic, bool):
            raise TypeError(f"{self.name}: deterministic must be a bool, got {type(deterministic).__name__}")
        if deterministic:
            # Earlier releases apply dropout only when ``deterministic=False``; the probability is
            # still checked, so a bad value is reported whichever mode a call runs in.
            prob = static_float(
                self.name, "dropout_prob", params.get("dropout_prob", 0.0), positive=False, allow_none=False
            )
            assert prob is not None
            if not 0.0 <= prob < 1.0:
                raise ValueError(f"{self.name}: dropout_prob must be in [0, 1), got {prob}")
            params["dropout_prob"] = 0.0
        elif rng is not None:
            params["dropout_seed"] = dropout_seed_of(self.name, rng)
        softmax_dtype = params.pop("softmax_dtype", None)
        if softmax_dtype is not None and _dtype(self.name, "softmax_dtype", softmax_dtype) != jnp.float32:
            raise ValueError(
                f"{self.name}: softmax_dtype must be float32 or None (the softmax is computed in float32), "
                f"got {jnp.dtype(softmax_dtype).name}; the weights are returned in `dtype`"
            )
        params["weights_dtype"] = params.pop("dtype", jnp.bfloat16)
        mask = params.pop("attention_mask", None)
        if mask is not None:
            if params.get("mask_info") is not None:
                raise ValueError(f"{self.name}: pass attention_mask or mask_info, not both")
            params["mask_info"] = earlier_attention_mask(self.name, mask, params.get("query"), params.get("key"))
        return super().bind(params)

    def canonicalize(self, params: dict[str, Any]) -> AttentionArgs:
        return bind_attention(self.name, params, record=AttentionWeightsArgs)
