"""Plain attention with the weights: the dense XLA kernel of ``scaled_dot_product_attention``."""

from __future__ import annotations

import jax

from ejkernel.ops.attention.op import AttentionWeightsArgs

from ..scaled_dot_product_attention._kernel import attend


def attention(args: AttentionWeightsArgs) -> tuple[jax.Array, jax.Array]:
    return attend(args, args.weights_dtype)
