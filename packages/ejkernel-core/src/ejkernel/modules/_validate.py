"""Argument checks shared by the op definitions: each names the op, the argument and the shapes."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..ops.kernel import is_traced


def shape_str(x: Any) -> str:
    return str(tuple(int(d) for d in x.shape))


def as_array(op: str, name: str, x: Any, *, ndim: int | tuple[int, ...] | None = None, layout: str = "") -> Any:
    """``x`` as a JAX array (or tracer); ``TypeError``/``ValueError`` if it is not one of the
    right rank."""
    if isinstance(x, (jax.Array, np.ndarray, np.generic)) or is_traced(x):
        arr = x if isinstance(x, jax.Array) else jnp.asarray(x)
    else:
        raise TypeError(f"{op}: {name} must be an array{(' ' + layout) if layout else ''}, got {type(x).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else ndim
        if arr.ndim not in allowed:
            rank = " or ".join(f"{r}-D" for r in allowed)
            raise ValueError(
                f"{op}: {name} must be {rank}{(' ' + layout) if layout else ''}, got shape {shape_str(arr)}"
            )
    return arr


def check_float(op: str, name: str, x: Any) -> None:
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"{op}: {name} must have a floating dtype, got {x.dtype}")


def check_int(op: str, name: str, x: Any) -> None:
    if not jnp.issubdtype(x.dtype, jnp.integer):
        raise TypeError(f"{op}: {name} must have an integer dtype, got {x.dtype}")


def static_float(op: str, name: str, x: Any, *, positive: bool = True, allow_none: bool = True) -> float | None:
    """A Python float option (not an array: options are static)."""
    if x is None:
        if allow_none:
            return None
        raise TypeError(f"{op}: {name} is required")
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"{op}: {name} must be a Python float (a static option), got {type(x).__name__}")
    value = float(x)
    if not math.isfinite(value):
        raise ValueError(f"{op}: {name} must be finite, got {value}")
    if positive and value <= 0:
        raise ValueError(f"{op}: {name} must be > 0, got {value}")
    return value


def static_bool(op: str, name: str, x: Any) -> bool:
    if not isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{op}: {name} must be a bool, got {type(x).__name__}")
    return bool(x)


def concrete(x: Any) -> np.ndarray | None:
    """NumPy value of ``x`` if it is concrete (checks on values happen only then)."""
    if x is None or is_traced(x):
        return None
    return np.asarray(x)


def softmax_aux(op: str, aux: Any, num_heads: int) -> Any:
    """``[num_heads]`` or ``[num_heads, num_sinks]`` → ``[num_heads, num_sinks]``."""
    if aux is None:
        return None
    aux = as_array(op, "softmax_aux", aux, ndim=(1, 2), layout="[num_heads] or [num_heads, num_sinks]")
    check_float(op, "softmax_aux", aux)
    if aux.shape[0] != num_heads:
        raise ValueError(
            f"{op}: softmax_aux {shape_str(aux)} must have num_heads={num_heads} rows "
            "([num_heads] or [num_heads, num_sinks])"
        )
    return aux[:, None] if aux.ndim == 1 else aux


def mesh_axis_size(mesh: Any, entry: Any) -> int:
    if entry is None:
        return 1
    names = entry if isinstance(entry, tuple) else (entry,)
    size = 1
    for n in names:
        if n not in mesh.shape:
            raise ValueError(f"mesh has no axis {n!r} (axes: {tuple(mesh.shape)})")
        size *= int(mesh.shape[n])
    return size


def check_batch_head_shards(op: str, batch: int, heads: int, kv_heads: int, mesh: Any, qb: Any, qh: Any) -> None:
    """``ValueError`` unless batch and both head counts divide over the mesh axes sharding them."""
    nb, nh = mesh_axis_size(mesh, qb), mesh_axis_size(mesh, qh)
    if batch % nb:
        raise ValueError(f"{op}: batch {batch} is not divisible by the {nb} shards of mesh axis {qb!r}")
    if heads % nh or kv_heads % nh:
        raise ValueError(
            f"{op}: num_heads {heads} and num_kv_heads {kv_heads} must be divisible by the {nh} shards of "
            f"mesh axis {qh!r}"
        )


def spec_entries(op: str, name: str, spec: Any, ndim: int) -> tuple[Any, ...]:
    """A PartitionSpec padded with ``None`` to ``ndim`` entries."""
    from jax.sharding import PartitionSpec

    if not isinstance(spec, PartitionSpec):
        raise TypeError(f"{op}: the in_specs entry of {name} must be a PartitionSpec, got {spec!r}")
    entries = tuple(spec)
    if len(entries) > ndim:
        raise ValueError(f"{op}: the PartitionSpec of {name} has {len(entries)} entries for a {ndim}-D array")
    return entries + (None,) * (ndim - len(entries))
