"""Free functions on masks and segment ids, shared by :mod:`.mask_info` and :mod:`.mask`.

Conventions (those of :class:`~ejkernel.types.MaskInfo`): a segment id ``>= 0`` is a real token
and tokens with equal ids attend each other; ``-1`` (any negative id) is padding. Masks are
``True`` (or nonzero) where attention is allowed.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "get_debug_mode",
    "mask_to_segment_ids",
    "positions_from_segment_ids",
    "segment_ids_to_mask",
    "segment_ids_to_qkv_masks",
    "set_debug_mode",
]

_F = TypeVar("_F", bound=Callable[..., Any])

# -- debug tracing ----------------------------------------------------------------------------

_DEBUG_MODE = os.environ.get("EJKERNEL_MASK_DEBUG", "0").strip().lower() in ("1", "true", "yes", "on")


def set_debug_mode(enabled: bool) -> None:
    """Turn the tracing of MaskInfo calls on or off (the initial state is ``EJKERNEL_MASK_DEBUG=1``).

    When on, each constructor, transformation and conversion prints
    ``[MaskInfo Debug] Calling <name>()`` to stdout.
    """
    global _DEBUG_MODE
    if not isinstance(enabled, (bool, np.bool_)):
        raise TypeError(f"set_debug_mode: enabled must be a bool, got {type(enabled).__name__} {enabled!r}")
    _DEBUG_MODE = bool(enabled)


def get_debug_mode() -> bool:
    """Whether the tracing of MaskInfo calls is on (see :func:`set_debug_mode`)."""
    return _DEBUG_MODE


def trace(func: _F) -> _F:
    """Print ``[MaskInfo Debug] Calling <qualname>()`` before each call while debug mode is on."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _DEBUG_MODE:
            print(f"[MaskInfo Debug] Calling {func.__qualname__}()")
        return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


# -- argument checks --------------------------------------------------------------------------


def as_array(x: Any) -> Any:
    """``x`` unchanged if it is already an array (NumPy, JAX, tracer), else ``jnp.asarray(x)``."""
    if hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "ndim"):
        return x
    return jnp.asarray(x)


def check_int_array(name: str, x: Any, ndim: int, what: str) -> jax.Array:
    """``x`` as an int32 array of rank ``ndim``; ``TypeError``/``ValueError`` naming ``name``."""
    x = as_array(x)
    if x.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D {what}, got shape {tuple(x.shape)}")
    if not jnp.issubdtype(x.dtype, jnp.integer):
        raise TypeError(f"{name} must have an integer dtype, got {x.dtype}")
    return jnp.asarray(x, jnp.int32)


def check_mask_dtype(name: str, x: Any) -> Any:
    x = as_array(x)
    if not (x.dtype == jnp.bool_ or jnp.issubdtype(x.dtype, jnp.integer)):
        raise TypeError(f"{name} must be bool or integer (nonzero = attend), got {x.dtype}")
    return x


def check_dtype(name: str, dtype: Any) -> np.dtype:
    try:
        return np.dtype(jnp.dtype(dtype))
    except TypeError:
        raise TypeError(f"{name} must be a dtype (e.g. jnp.bool_, jnp.float32), got {dtype!r}") from None


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


# -- segment ids -> masks ---------------------------------------------------------------------


@trace
def segment_ids_to_mask(
    segment_ids: Any,
    dtype: Any = jnp.bool_,
    return_separate_masks: bool = False,
) -> Any:
    """The pairwise mask ``[batch, 1, q, kv]`` of segment ids (equal ids attend, negative = padding).

    Args:
        segment_ids: ``[batch, seq]`` ids (self-attention) or a pair ``(q_ids [batch, q], kv_ids [batch, kv])``.
        dtype: dtype of the returned masks (bool: ``True`` = may attend; numbers: 1 / 0).
        return_separate_masks: also return the per-token masks: ``(q_mask [batch, q],
            kv_mask [batch, kv], attention_mask)``, ``True`` where a token is not padding.

    Example::

        >>> segment_ids_to_mask(jnp.array([[1, 1, 2, 2, -1], [1, 1, 1, -1, -1]])).shape
        (2, 1, 5, 5)
    """
    if isinstance(segment_ids, (tuple, list)):
        if len(segment_ids) != 2:
            raise ValueError(
                f"segment_ids must be a [batch, seq] array or a (q_segment_ids, kv_segment_ids) pair, "
                f"got a sequence of {len(segment_ids)}"
            )
        q = check_int_array("q_segment_ids", segment_ids[0], 2, "[batch, q_len]")
        kv = check_int_array("kv_segment_ids", segment_ids[1], 2, "[batch, kv_len]")
        if q.shape[0] != kv.shape[0]:
            raise ValueError(
                f"q_segment_ids {tuple(q.shape)} and kv_segment_ids {tuple(kv.shape)} differ in batch size"
            )
    else:
        q = kv = check_int_array("segment_ids", segment_ids, 2, "[batch, seq]")
    dtype = check_dtype("dtype", dtype)
    check_bool("return_separate_masks", return_separate_masks)
    q_valid = q >= 0
    kv_valid = kv >= 0
    pair = (q[:, :, None] == kv[:, None, :]) & q_valid[:, :, None] & kv_valid[:, None, :]
    pair = pair[:, None].astype(dtype)
    if return_separate_masks:
        return q_valid.astype(dtype), kv_valid.astype(dtype), pair
    return pair


@trace
def segment_ids_to_qkv_masks(
    q_segment_ids: Any, kv_segment_ids: Any | None = None, dtype: Any = jnp.bool_
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(q_mask [batch, q], kv_mask [batch, kv], attention_mask [batch, 1, q, kv])`` of segment ids.

    ``kv_segment_ids`` defaults to ``q_segment_ids`` (self-attention). The per-token masks are
    ``True`` where the token is not padding.
    """
    if kv_segment_ids is None:
        kv_segment_ids = q_segment_ids
    return segment_ids_to_mask((q_segment_ids, kv_segment_ids), dtype=dtype, return_separate_masks=True)


# -- masks -> segment ids ---------------------------------------------------------------------


def _pack_rows(rows: jax.Array) -> jax.Array:
    """``[n, m]`` bool → ``[n, ceil(m / 32)]`` uint32 (equal rows ⇔ equal words)."""
    n, m = rows.shape
    w = -(-m // 32)
    padded = jnp.pad(rows, ((0, 0), (0, w * 32 - m))).reshape(n, w, 32).astype(jnp.uint32)
    return jnp.sum(padded << jnp.arange(32, dtype=jnp.uint32), axis=-1, dtype=jnp.uint32)


def _group_rows(rows: jax.Array) -> jax.Array:
    """Ids ``[n]`` grouping identical rows of ``rows [n, m]``: contiguous ``0..G-1`` in order of first
    appearance; all-false rows get ``-1``."""
    n = rows.shape[0]
    if n == 0:
        return jnp.zeros((0,), jnp.int32)
    words = _pack_rows(rows)

    def step(k: Any, eq: jax.Array) -> jax.Array:
        col = jax.lax.dynamic_index_in_dim(words, k, axis=1, keepdims=False)
        return eq & (col[:, None] == col[None, :])

    eq = jax.lax.fori_loop(0, words.shape[1], step, jnp.ones((n, n), bool))
    anchor = jnp.argmax(eq, axis=1).astype(jnp.int32)  # the first row equal to each row
    pad = ~rows.any(axis=1)
    is_anchor = (anchor == jnp.arange(n, dtype=jnp.int32)) & ~pad
    group = jnp.cumsum(is_anchor.astype(jnp.int32)) - 1
    return jnp.where(pad, -1, group[anchor]).astype(jnp.int32)


def _mask_to_segments_2d(m: jax.Array) -> tuple[jax.Array, jax.Array]:
    return _group_rows(m), _group_rows(m.T)


@trace
def mask_to_segment_ids(mask: Any, per_head: bool = False) -> tuple[jax.Array, jax.Array]:
    """Segment ids of an attention mask (JIT-friendly).

    Queries whose mask rows are identical share an id, and so do keys whose columns are
    identical; the ids are the group anchors (first row / column of each group) compressed into
    contiguous ``0, 1, ...`` in order of first appearance, and a row (column) with no ``True`` is
    ``-1``. Query and key ids are numbered independently: for a mask that is not a segment mask
    (causal, for one) they do not rebuild it. :meth:`MaskInfo.to_segment_ids` gives ids that do,
    for masks that segments can express.

    Args:
        mask: ``[q, kv]``, ``[batch, q, kv]`` or ``[batch, heads, q, kv]``, bool or integer.
        per_head: for a 4-D mask, ids per head (``[batch, heads, seq]``); otherwise head 0 decides.

    Returns:
        ``(q_ids, kv_ids)``: ``[q], [kv]`` / ``[batch, q], [batch, kv]`` /
        ``[batch, heads, q], [batch, heads, kv]`` (4-D with ``per_head``), int32.
    """
    m = check_mask_dtype("mask", mask)
    check_bool("per_head", per_head)
    m = jnp.asarray(m).astype(bool)
    if m.ndim == 2:
        return _mask_to_segments_2d(m)
    if m.ndim == 3:
        return jax.vmap(_mask_to_segments_2d)(m)
    if m.ndim == 4:
        if per_head:
            return jax.vmap(jax.vmap(_mask_to_segments_2d))(m)
        return jax.vmap(_mask_to_segments_2d)(m[:, 0])
    raise ValueError(f"mask must be [q, kv], [batch, q, kv] or [batch, heads, q, kv], got shape {tuple(m.shape)}")


def positions_from_segment_ids(segment_ids: jax.Array) -> jax.Array:
    """Positions ``[batch, seq]`` int32 that restart at 0 at each segment boundary; padding gets -1.

    A boundary is a change of id or a token after padding. Example: ids
    ``[-1, -1, 0, 0, 0, 1, 1, -1]`` → ``[-1, -1, 0, 1, 2, 0, 1, -1]``.
    """
    seg = jnp.asarray(segment_ids, jnp.int32)
    b, s = seg.shape
    valid = seg >= 0
    t = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
    prev_seg = jnp.concatenate([jnp.full((b, 1), -2, jnp.int32), seg[:, :-1]], axis=1)
    prev_valid = jnp.concatenate([jnp.zeros((b, 1), bool), valid[:, :-1]], axis=1)
    start = valid & (~prev_valid | (seg != prev_seg))
    run_start = jax.lax.cummax(jnp.where(start, t, 0), axis=1) if s else t
    return jnp.where(valid, t - run_start, -1).astype(jnp.int32)
