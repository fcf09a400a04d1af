"""Expert parallelism with ``ejkernel.grouped_matmul`` under ``jax.shard_map``.

``E`` experts are split over the mesh axis ``"ep"`` (``E / D`` consecutive experts per device).
Two ways to feed them, both returning ``y[t] = x[t] @ w[expert[t]]`` for every token:

* :func:`moe_all_to_all` (the usual one): tokens are sharded over ``"ep"`` too. Each device sorts
  its tokens by destination device, sends them with ``all_to_all`` (a fixed capacity of ``T_local``
  rows per destination, so shapes stay static), sorts what it receives by local expert, runs ONE
  ``grouped_matmul`` over its local experts (padding rows sit past ``sum(group_sizes)`` and come
  out zero), and sends the results back with a second ``all_to_all``.
* :func:`moe_group_offset`: every device sees all tokens sorted by expert (replicated) and
  computes only the rows of its own experts: ``rhs`` is its slice of the experts and
  ``group_offset = device * E_local`` says which; the other rows are zero, so a ``psum`` over
  ``"ep"`` assembles the result. Simpler, but every device holds every token.

Run it on 8 simulated CPU devices::

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python examples/moe_expert_parallel.py
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import ejkernel

__all__ = ["moe_all_to_all", "moe_group_offset", "moe_reference"]


def moe_reference(x: jax.Array, expert: jax.Array, w: jax.Array) -> jax.Array:
    """One device: ``y[t] = x[t] @ w[expert[t]]`` as one grouped matmul over tokens sorted by expert."""
    order = jnp.argsort(expert, stable=True)
    sizes = jnp.bincount(expert, length=w.shape[0]).astype(jnp.int32)
    y_sorted = ejkernel.grouped_matmul(x[order], w, sizes, preferred_element_type=x.dtype)
    return jnp.zeros_like(y_sorted).at[order].set(y_sorted)


def _local_all_to_all(x: jax.Array, expert: jax.Array, w_local: jax.Array, *, axis: str, num_devices: int):
    """The body of :func:`moe_all_to_all` on one device: ``x [T, h]``, ``expert [T]``, ``w_local [E_local, h, f]``."""
    t, _ = x.shape
    e_local = w_local.shape[0]
    cap = t  # worst case: every local token goes to one device
    dest = expert // e_local
    # 1. Sort by (destination, expert) and lay the tokens out as [D, cap] send slots.
    order = jnp.argsort(expert, stable=True)  # experts are grouped by device, so this sorts by destination too
    dest_sorted = dest[order]
    per_dest = jnp.bincount(dest, length=num_devices)
    first = jnp.cumsum(per_dest) - per_dest
    slot = jnp.arange(t) - first[dest_sorted]  # position inside its destination's slot
    send = jnp.zeros((num_devices, cap, x.shape[1]), x.dtype).at[dest_sorted, slot].set(x[order])
    counts = jnp.bincount(expert, length=num_devices * e_local).reshape(num_devices, e_local)
    # 2. Exchange tokens and per-expert counts.
    recv = jax.lax.all_to_all(send, axis, 0, 0, tiled=False)  # [D (source), cap, h]
    recv_counts = jax.lax.all_to_all(counts, axis, 0, 0, tiled=False)  # [D (source), E_local]
    # 3. Sort the received rows by local expert (then source); padding rows go last.
    pos = jnp.arange(cap)[None, :]
    ends = jnp.cumsum(recv_counts, axis=1)  # [D, E_local]
    local_expert = jnp.sum(pos[:, :, None] >= ends[:, None, :], axis=2)  # [D, cap]; E_local for padding
    src = jnp.arange(num_devices)[:, None]
    key = (local_expert * num_devices + src) * cap + pos
    perm = jnp.argsort(key.reshape(-1))
    rows = recv.reshape(num_devices * cap, -1)[perm]
    sizes = recv_counts.sum(axis=0).astype(jnp.int32)  # [E_local]
    # 4. One grouped matmul over the local experts; rows past sum(sizes) (padding) come out zero.
    y = ejkernel.grouped_matmul(rows, w_local, sizes, preferred_element_type=x.dtype)
    y = jnp.zeros_like(y).at[perm].set(y).reshape(num_devices, cap, -1)
    # 5. Send the results back and undo the sort.
    back = jax.lax.all_to_all(y, axis, 0, 0, tiled=False)  # [D (destination), cap, f]
    y_sorted = back[dest_sorted, slot]
    return jnp.zeros_like(y_sorted).at[order].set(y_sorted)


def moe_all_to_all(x: jax.Array, expert: jax.Array, w: jax.Array, mesh: Mesh, axis: str = "ep") -> jax.Array:
    """Tokens (``x [T, h]``, ``expert [T]``) and experts (``w [E, h, f]``) sharded over ``axis``."""
    d = mesh.shape[axis]
    body = functools.partial(_local_all_to_all, axis=axis, num_devices=d)
    return jax.shard_map(body, mesh=mesh, in_specs=(P(axis), P(axis), P(axis)), out_specs=P(axis))(x, expert, w)


def moe_group_offset(x: jax.Array, expert: jax.Array, w: jax.Array, mesh: Mesh, axis: str = "ep") -> jax.Array:
    """Tokens replicated, experts sharded over ``axis``: each device computes its experts' rows
    (``group_offset``), the others are zero, a ``psum`` adds the shards."""
    order = jnp.argsort(expert, stable=True)
    sizes = jnp.bincount(expert, length=w.shape[0]).astype(jnp.int32)

    def body(x_sorted: jax.Array, sizes: jax.Array, w_local: jax.Array) -> jax.Array:
        offset = jax.lax.axis_index(axis) * w_local.shape[0]
        y = ejkernel.grouped_matmul(x_sorted, w_local, sizes, offset, preferred_element_type=jnp.float32)
        return jax.lax.psum(y, axis).astype(x_sorted.dtype)

    y_sorted = jax.shard_map(body, mesh=mesh, in_specs=(P(), P(), P(axis)), out_specs=P())(x[order], sizes, w)
    return jnp.zeros_like(y_sorted).at[order].set(y_sorted)


if __name__ == "__main__":
    devices = np.array(jax.devices())
    if devices.size < 8:
        raise SystemExit("needs 8 devices: XLA_FLAGS=--xla_force_host_platform_device_count=8")
    mesh = Mesh(devices[:8], ("ep",))
    rng = np.random.default_rng(0)
    tokens, hidden, ffn, experts = 8 * 32, 64, 48, 16
    x = jnp.asarray(rng.standard_normal((tokens, hidden)), jnp.float32)
    expert = jnp.asarray(rng.integers(0, experts, tokens), jnp.int32)
    w = jnp.asarray(rng.standard_normal((experts, hidden, ffn)) / np.sqrt(hidden), jnp.float32)
    ref = moe_reference(x, expert, w)
    for f in (moe_all_to_all, moe_group_offset):
        y = jax.jit(f, static_argnums=(3,))(x, expert, w, mesh)
        print(f"{f.__name__}: max |y - one device| = {float(jnp.abs(y - ref).max()):.2e}")
