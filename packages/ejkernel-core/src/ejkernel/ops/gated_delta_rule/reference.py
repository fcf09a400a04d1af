"""The reference of ``gated_delta_rule``: the delta-rule recurrence token by token (float32,
HIGHEST precision by default); see :mod:`ejkernel.ops.kernel_delta_attention.reference`."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..kernel_delta_attention.reference import HIGHEST, delta_rule_reference

__all__ = ["reference"]


def reference(
    query: Any,
    key: Any,
    value: Any,
    g: Any,
    beta: Any,
    initial_state: Any = None,
    cu_seqlens: Any = None,
    *,
    softmax_scale: float | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    return_state: bool = False,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
) -> Any:
    """The reference of ``gated_delta_rule``."""
    return delta_rule_reference(
        query, key, value, beta, g, initial_state, cu_seqlens,
        softmax_scale=softmax_scale, use_qk_l2norm=use_qk_l2norm_in_kernel, return_state=return_state,
        dtype=dtype, precision=precision,
    )  # fmt: skip
