"""The public function ``state_space_v2``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jaxtyping import Array, Float

from ..executor import define
from .op import StateSpaceV2

__all__ = ["state_space_v2"]


@define(StateSpaceV2)
def state_space_v2(
    x: Float[Array, "batch seq num_heads head_dim"],
    A: Float[Array, "num_heads"],
    B: Float[Array, "batch seq n_groups state_size"],
    C: Float[Array, "batch seq n_groups state_size"],
    D: Float[Array, "num_heads"],
    dt: Float[Array, "batch seq num_heads"],
    gate: Float[Array, "batch seq intermediate_size"] | None = None,
    initial_state: Float[Array, "batch num_heads head_dim state_size"] | None = None,
    conv_state: Float[Array, "batch conv_dim d_conv"] | None = None,
    *,
    n_groups: int = 1,
    act_fn: Callable[[Any], Any] | None = None,
    use_gated_rmsnorm: bool = False,
    rmsnorm_eps: float = 1e-5,
    precision: Any = None,
) -> tuple[
    Float[Array, "batch seq intermediate_size"],
    Float[Array, "batch num_heads head_dim state_size"],
    Float[Array, "batch conv_dim d_conv"] | None,
]:
    """Mamba-2's selective state space (SSD), chunked: memory linear in the length.

    Per head ``h``, with ``B``/``C`` of group ``h // (num_heads // n_groups)`` and the state
    ``S [head_dim, state_size]``::

        S_t = exp(A_h · dt_t) · S_{t-1} + dt_t · x_tᵀ B_t        y_t = S_t C_t + D_h · x_t

    then, with ``gate``: ``y = act_fn(gate) · y`` or, with ``use_gated_rmsnorm``,
    ``act_fn(gate) · rmsnorm(y)`` (over the ``num_heads * head_dim`` features, no weight).
    SSD is scalar-gated linear attention (``q = C``, ``k = B``, ``v = x · dt``, log gate
    ``A · dt``): it runs on the same chunked kernels as :func:`ejkernel.gla_attention`.

    Args:
        x: ``[batch, seq, num_heads, head_dim]``.
        A: ``[num_heads]`` (negative: ``-exp(A_log)``); the log decay per step is ``A · dt``.
        B, C: ``[batch, seq, n_groups, state_size]`` in x's dtype.
        D: ``[num_heads]`` skip connection.
        dt: ``[batch, seq, num_heads]`` step sizes (after softplus and bias).
        gate: ``[batch, seq, num_heads * head_dim]`` output gate.
        initial_state: ``[batch, num_heads, head_dim, state_size]``; zeros when absent.
        conv_state: the causal convolution's cache, returned unchanged (for decode loops).
        n_groups: groups of ``B``/``C`` (must equal ``B.shape[2]``).
        act_fn: the gate's activation (default ``jax.nn.silu``).
        use_gated_rmsnorm, rmsnorm_eps: RMSNorm of ``y`` before the gating.
        precision: accepted from earlier releases; the kernels choose their matmul precision.
        platform, cfg: implementation and :class:`StateSpaceV2Config`.
        mesh, in_specs, out_specs: run under ``shard_map``; only the batch may be sharded.

    Decode: one token is a call with ``seq == 1`` and ``initial_state`` (a single-step path).

    Returns:
        ``(y [batch, seq, num_heads * head_dim], final_state [batch, num_heads, head_dim,
        state_size], conv_state)``; ``final_state`` has the dtype of ``initial_state`` (else x's).

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> ks = jax.random.split(jax.random.key(0), 4)
        >>> x = jax.random.normal(ks[0], (2, 64, 4, 16))
        >>> B = C = jax.random.normal(ks[1], (2, 64, 1, 8))
        >>> dt = jax.nn.softplus(jax.random.normal(ks[2], (2, 64, 4)))
        >>> y, state, _ = ejkernel.state_space_v2(x, -jnp.ones(4), B, C, jnp.ones(4), dt)
        >>> y.shape, state.shape
        ((2, 64, 64), (2, 4, 16, 8))
    """
    raise NotImplementedError  # define() supplies the body
