"""The public function ``state_space_v1``."""

from __future__ import annotations

from collections.abc import Callable

from jaxtyping import Array, Float

from ..executor import define
from .op import StateSpaceV1

__all__ = ["state_space_v1"]


@define(StateSpaceV1)
def state_space_v1(
    hidden_states: Float[Array, "batch seq intermediate"] | Float[Array, "batch intermediate"],
    A: Float[Array, "intermediate state"],
    B: Float[Array, "batch seq state"] | Float[Array, "batch state"],
    C: Float[Array, "batch seq state"] | Float[Array, "batch state"],
    D: Float[Array, "intermediate"],
    dt: Float[Array, "batch seq intermediate"] | Float[Array, "batch intermediate"],
    gate: Float[Array, "batch seq intermediate"] | Float[Array, "batch intermediate"] | None = None,
    initial_state: Float[Array, "batch intermediate state"] | None = None,
    conv_state: Float[Array, "batch intermediate d_conv"] | None = None,
    *,
    act_fn: Callable[[Array], Array] | None = None,
    return_state: bool = False,
) -> Float[Array, "batch seq intermediate"] | tuple[Float[Array, "batch seq intermediate"], Float[Array, "..."]]:
    """Mamba-1's selective scan (the S6 layer's state-space recurrence), with a custom VJP.

    Per batch element, with a state ``h [intermediate, state]`` (zeros, or ``initial_state``)::

        h_t = exp(dt_t[:, None] * A) * h_{t-1} + (dt_t * x_t)[:, None] * B_t[None, :]
        y_t = h_t @ C_t + D * x_t
        y_t = y_t * act_fn(gate_t)            # with a gate; act_fn defaults to SiLU

    This is ``mamba_ssm``'s ``selective_scan_fn(u=x, delta=dt, A, B, C, D, z=gate)`` with
    ``delta_softplus=False`` and no ``delta_bias``: ``dt`` is the time step *as used*, already
    biased and passed through softplus by the caller (Mamba: ``softplus(dt_proj(x) + dt_bias)``),
    and ``A`` is the real, usually negative, matrix (``-exp(A_log)``). B and C are shared by all
    channels (one group), as in Mamba-1.

    Sums and the state are float32 whatever the inputs' dtype; ``y`` has ``hidden_states``'
    dtype. Differentiable in every array; the backward keeps only the state at each chunk start
    (``StateSpaceV1Config.block_e`` tokens per chunk) and recomputes the rest.

    Args:
        hidden_states: ``x [batch, seq, intermediate]`` (after Mamba's convolution and SiLU), or
            ``[batch, intermediate]`` for one decode step (then ``B``, ``C``, ``dt``, ``gate``
            are 2-D as well and ``y`` is ``[batch, intermediate]``).
        A: ``[intermediate, state]``.
        B, C: ``[batch, seq, state]``.
        D: ``[intermediate]``, the skip connection.
        dt: ``[batch, seq, intermediate]``, the positive time step.
        gate: ``z [batch, seq, intermediate]`` (optional).
        initial_state: ``[batch, intermediate, state]`` (optional; a decode step's state in).
        conv_state: refused (``ValueError``): it is the convolution's cache, which the scan
            neither reads nor updates (earlier releases returned it unchanged).
        act_fn: the gate's activation (a JAX callable), SiLU when ``None``.
        return_state: also return the final state ``[batch, intermediate, state]`` (float32): the
            ``initial_state`` of the next call (or of the next decode step).
        platform, cfg: implementation and :class:`StateSpaceV1Config`.
        mesh, in_specs, out_specs: run under ``shard_map``; the batch may be sharded.

    Returns:
        ``y`` (``hidden_states``' shape and dtype), or ``(y, final_state)`` with ``return_state``.

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> ks = jax.random.split(jax.random.key(0), 6)
        >>> b, s, d, n = 2, 64, 32, 16
        >>> x = jax.random.normal(ks[0], (b, s, d))
        >>> A = -jnp.exp(jax.random.normal(ks[1], (d, n)))
        >>> B, C = jax.random.normal(ks[2], (b, s, n)), jax.random.normal(ks[3], (b, s, n))
        >>> dt = jax.nn.softplus(jax.random.normal(ks[4], (b, s, d)))
        >>> y, h = ejkernel.state_space_v1(x, A, B, C, jnp.ones((d,)), dt, return_state=True)
        >>> y.shape, h.shape
        ((2, 64, 32), (2, 32, 16))
        >>> y1, h = ejkernel.state_space_v1(x[:, 0], A, B[:, 0], C[:, 0], jnp.ones((d,)), dt[:, 0],
        ...                                 initial_state=h, return_state=True)  # one decode step
        >>> y1.shape
        (2, 32)
    """
    raise NotImplementedError  # define() supplies the body
