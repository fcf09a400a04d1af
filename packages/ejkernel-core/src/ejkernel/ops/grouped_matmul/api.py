"""The public function ``grouped_matmul``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ..executor import define
from .op import GroupedMatmul

__all__ = ["grouped_matmul"]


@define(GroupedMatmul)
def grouped_matmul(
    lhs: Float[Array, "m k"],
    rhs: Float[Array, "groups k n"] | Float[Array, "groups n k"],
    group_sizes: Int[Array, "num_groups"],
    group_offset: Int[Array, ""] | int | None = None,
    existing_out: Float[Array, "m n"] | None = None,
    *,
    preferred_element_type: Any = jnp.float32,
    rhs_scale: Float[Array, "groups num_blocks 1 n"] | None = None,
    rhs_bias: Float[Array, "groups 1 n"] | None = None,
    transpose_rhs: bool = False,
    interpret: bool = False,
    do_padding: bool = True,
    precision: jax.lax.Precision | str | None = jax.lax.Precision.DEFAULT,
    use_v2: bool = False,
    use_v3: bool = False,
    out_shard_callback: Callable[..., Any] | None = None,
) -> Float[Array, "m n"]:
    """Grouped matmul (MoE experts): each group's rows of ``lhs`` times that group's matrix.

    The semantics of ``jax.lax.ragged_dot``: ``lhs`` holds the rows of every group back to back,
    ``group_sizes[j]`` of them for group ``j``, in order; row ``r`` of group ``j`` gives
    ``out[r] = lhs[r] @ rhs[j - group_offset]``. Empty groups are allowed. Rows past
    ``sum(group_sizes)`` are zeros.

    Expert parallelism: ``rhs`` may hold a slice of the groups, ``rhs.shape[0] = g <=
    len(group_sizes)``: the local groups are ``group_offset .. group_offset + g - 1``; rows of
    the other groups are zeros, or keep ``existing_out``'s values when it is given (so the
    shards' results can be summed, or written into one buffer). See
    ``examples/moe_expert_parallel.py`` for a ``shard_map`` over an expert axis.

    Differentiable in ``lhs``, ``rhs``, ``existing_out``, ``rhs_scale`` and ``rhs_bias``: ``dlhs``
    is a grouped matmul with ``rhsᵀ``, ``drhs`` the transposed grouped matmul (``lhsᵀ · dout`` per
    group).
    ``group_sizes`` and ``group_offset`` are integers, not differentiated.

    Args:
        lhs: ``[m, k]``.
        rhs: ``[groups, k, n]``, or ``[groups, n, k]`` with ``transpose_rhs=True``; lhs's dtype.
        group_sizes: ``[num_groups]`` int, each ``>= 0``, summing to at most ``m``
            (checked when concrete; under ``jit`` with :func:`ejkernel.checks` on).
        group_offset: int scalar (array or Python int) in ``[0, num_groups - groups]``; default 0.
        existing_out: ``[m, n]`` in the output dtype: the values of the rows outside the local groups.
        preferred_element_type: the output dtype (default float32; ``None``: lhs's dtype). The
            products accumulate in float32 whatever it is.
        rhs_scale: weight scales, as earlier releases applied them (quantized experts):
            ``[groups, num_blocks, 1, n]`` with ``num_blocks`` dividing ``k`` (``[groups, 1, n]``
            or ``[groups, n]``: one block). Group ``j``'s product is ``lhs[rows] @ (rhs[j] * S)``
            where row ``kk`` of ``S`` is ``rhs_scale[j, kk // (k / num_blocks), 0]``; the
            products are scaled in float32. One block: every implementation; several blocks:
            XLA (the GPU and TPU kernels decline them).
        rhs_bias: ``[groups, 1, n]`` (or ``[groups, n]``): added to every row of its group
            (after the scale).
        transpose_rhs: ``rhs`` is ``[groups, n, k]`` (read transposed, never copied by the GPU kernels).
        precision: for float32 inputs: ``DEFAULT`` (TF32 tensor cores on NVIDIA GPUs), ``HIGH``
            (3-pass TF32), ``HIGHEST`` (full float32). 16-bit inputs ignore it.
        out_shard_callback: not supported (``ValueError``): the earlier shard_map wrapper's hook;
            use ``mesh``/``in_specs``, or your own ``shard_map``.
        interpret, do_padding, use_v2, use_v3: accepted from earlier releases and ignored: they
            chose how the old kernels ran (Pallas interpret mode, padding ``m`` to the tile,
            kernel versions), not the result; the implementation is chosen by ``platform``
            (Pallas kernels run interpreted on CPU by themselves).
        platform, cfg: implementation and :class:`GroupedMatmulConfig`.
        mesh, in_specs, out_specs: run under ``shard_map``; only ``n`` (columns of ``rhs``,
            ``existing_out``, ``rhs_bias`` and the output) may be sharded. Experts are sharded
            by routing tokens, which the caller's ``shard_map`` does (see above).

    Returns:
        ``[m, n]`` in ``preferred_element_type``.

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> lhs = jax.random.normal(jax.random.key(0), (10, 16))
        >>> rhs = jax.random.normal(jax.random.key(1), (3, 16, 8))
        >>> out = ejkernel.grouped_matmul(lhs, rhs, jnp.array([4, 0, 5]))  # row 9 is past the groups
        >>> out.shape, bool((out[9] == 0).all())
        ((10, 8), True)
    """
    raise NotImplementedError  # define() supplies the body
