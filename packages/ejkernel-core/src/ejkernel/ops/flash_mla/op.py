"""The ``flash_mla`` op: multi-head latent attention (DeepSeek-V2/V3 MLA) over a latent KV."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from ..args import concrete, flag, is_traced, static_float
from ..checks import ValueRule
from ..config import OpConfig, tile
from ..families.attention import cu_seqlens_rule
from ..families.latent_attention import LATENT_FEATURES, LatentAttentionArgs, bind_latent
from ..op import Op

__all__ = ["FlashMLA", "FlashMLAArgs", "FlashMLAConfig"]


@dataclasses.dataclass(frozen=True)
class FlashMLAConfig(OpConfig):
    """Config of ``flash_mla``.

    Attributes:
        block_q: queries one step of the attention loop handles (XLA: the query tile of the
            blockwise absorbed attention, forward and backward).
        block_k: latent rows (keys) one step reads.
        num_warps: warps per program (GPU kernels).
        num_stages: software-pipelining depth of the key loop (GPU kernels).

    ``None`` fields are chosen by the implementation's heuristic (or by autotuning).
    """

    block_q: int | None = tile(power_of_two=True)
    block_k: int | None = tile(power_of_two=True)
    num_warps: int | None = tile(power_of_two=True, maximum=32)
    num_stages: int | None = tile()


class FlashMLAArgs(LatentAttentionArgs):
    """Canonical arguments of ``flash_mla`` (see :mod:`ejkernel.ops.families.latent_attention`)."""


def decline_unsupported_options(op: str, p: dict[str, Any]) -> None:
    """The spec's options no implementation honours, refused with the reason when they would
    change the result; removed from ``p``."""
    deterministic = flag(op, "deterministic", p.pop("deterministic", True))
    rng = p.pop("dropout_rng", None)
    if rng is not None and not isinstance(rng, (jax.Array, np.ndarray)) and not is_traced(rng):
        raise TypeError(f"{op}: dropout_rng must be a jax.random key (or None), got {type(rng).__name__}")
    prob = static_float(op, "dropout_prob", p.pop("dropout_prob", 0.0), positive=False, allow_none=False)
    assert prob is not None
    if not 0.0 <= prob < 1.0:
        raise ValueError(f"{op}: dropout_prob must be in [0, 1), got {prob}")
    if prob > 0 and not deterministic:
        raise ValueError(
            f"{op}: attention dropout (dropout_prob={prob}, deterministic=False) is not supported: MLA is used "
            "without attention dropout (DeepSeek-V2/V3); apply dropout to the output instead, or use "
            "flash_attention's dropout on materialized keys and values"
        )
    softmax_dtype = p.pop("softmax_dtype", None)
    if softmax_dtype is not None:
        try:
            ok = jnp.dtype(softmax_dtype) == jnp.float32
        except TypeError:
            raise TypeError(f"{op}: softmax_dtype must be a dtype, got {softmax_dtype!r}") from None
        if not ok:
            raise ValueError(
                f"{op}: softmax_dtype must be None or float32 (the softmax always runs in float32), got "
                f"{jnp.dtype(softmax_dtype).name}"
            )


class FlashMLA(Op):
    """The ``flash_mla`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "flash_mla"
    version = "1"
    aliases = ("mla_attention",)
    config_cls = FlashMLAConfig
    args_cls = FlashMLAArgs
    trainable = True
    output_axes = ("batch", "seq_q", "num_heads", "value_head_dim")
    features: ClassVar[dict[str, tuple[str, Any]]] = LATENT_FEATURES

    def canonicalize(self, p: dict[str, Any]) -> FlashMLAArgs:
        decline_unsupported_options(self.name, p)
        return bind_latent(self.name, p, FlashMLAArgs)

    def value_rules(self, a: FlashMLAArgs) -> list[ValueRule]:
        return [cu_seqlens_rule("cu_seqlens", a.seq_q)] if a.cu_seqlens is not None else []

    def autotune_inputs(self, a: FlashMLAArgs, seed: int = 0) -> FlashMLAArgs:
        out = a.random_like(seed)
        changes: dict[str, Any] = {}
        if a.cu_seqlens is not None and concrete(a.cu_seqlens) is None:  # traced: two equal halves
            n = a.seq_q
            changes["cu_seqlens"] = jnp.asarray([0, n // 2, n], jnp.int32)
        if a.attention_mask is not None and concrete(a.attention_mask) is None:  # traced: attend everything
            changes["attention_mask"] = jnp.ones(a.attention_mask.shape, bool)
        return dataclasses.replace(out, **changes)
