"""``MaskInfo``: one description of which queries may attend which keys.

Three equivalent encodings, with conversions between them:

- **segment ids** ``[batch, seq]`` int32: a query attends a key of the same segment; ``-1``
  marks padding (attends and is attended by nothing). Cheap, and what kernels prefer.
- **pairwise mask** ``[batch, heads or 1, seq_q, seq_k]`` bool: ``True`` = may attend. General.
- **cu_seqlens** ``[num_seqs + 1]``: cumulative lengths of sequences packed along one row.

On top of either, two patterns compose: ``causal`` (aligned bottom-right when ``seq_q != seq_k``:
query ``i`` sees keys ``j <= i + seq_k - seq_q``) and ``sliding_window=(left, right)`` (query ``i``
sees keys ``i + off - left <= j <= i + off + right``, ``off = seq_k - seq_q``).

Everything a MaskInfo holds combines with AND: segments, the stored pairwise mask and the
patterns. :attr:`MaskInfo.attention_mask` is that combination, computed when it is read;
:attr:`MaskInfo.stored_attention_mask` is the pairwise mask alone, as stored (``None`` if none).

``MaskInfo`` is a pytree (arrays are leaves, the patterns and axis names static), so it passes
through ``jit``.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._compat_loader import MASK_INFO_NAMES, Deferred
from ._mask_ops import (
    as_array,
    check_bool,
    check_int_array,
    check_mask_dtype,
    trace,
)

__all__ = ["MaskInfo", "canonical_window"]

_MISSING: Any = object()
_LEAVES = ("q_segment_ids", "kv_segment_ids", "_attention_mask", "q_positions", "kv_positions")
_STATIC = ("causal", "sliding_window", "batch_axis_name", "qheads_axis_name", "kvheads_axis_name", "sequence_axis_name")
_DEFAULT_AXES: dict[str, Any] = {
    "batch_axis_name": ("dp", "fsdp"),
    "qheads_axis_name": "tp",
    "kvheads_axis_name": "tp",
    "sequence_axis_name": "sp",
}


def canonical_window(window: Any, name: str = "sliding_window") -> tuple[int, int] | None:
    """``None``, ``w`` (→ ``(w, w)``) or ``(left, right)`` → ``(left, right)`` of ints ≥ 0."""
    if window is None:
        return None
    if isinstance(window, (int, np.integer)) and not isinstance(window, bool):
        if window < 0:
            raise ValueError(f"{name} must be >= 0, got {window}")
        return (int(window), int(window))
    if isinstance(window, (tuple, list)) and len(window) == 2:
        left, right = window
        for side, v in (("left", left), ("right", right)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name} {side} size must be an int, got {type(v).__name__} {v!r}")
            if v < 0:
                raise ValueError(f"{name} {side} size must be >= 0, got {v}")
        return (int(left), int(right))
    raise TypeError(f"{name} must be None, an int or a (left, right) pair of ints, got {window!r}")


def _concrete(x: Any) -> np.ndarray | None:
    """``x`` as a NumPy array if it is concrete, ``None`` under a trace."""
    if isinstance(x, jax.core.Tracer):
        return None
    return np.asarray(x)


def _is_arraylike(x: Any) -> bool:
    return hasattr(x, "dtype") and hasattr(x, "ndim")


def _check_segments(name: str, seg: Any) -> jax.Array:
    return check_int_array(name, seg, 2, "[batch, seq]")


def _check_axis_name(name: str, value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise TypeError(f"MaskInfo.{name} must be None, a mesh axis name or a tuple of names, got {value!r}")


def _pattern_mask(sq: int, sk: int, causal: bool, window: tuple[int, int] | None) -> jax.Array | None:
    """``[sq, sk]`` bool mask of the causal/window pattern (bottom-right aligned), or ``None``."""
    if not causal and window is None:
        return None
    i = jnp.arange(sq)[:, None] + (sk - sq)
    j = jnp.arange(sk)[None, :]
    m = jnp.ones((sq, sk), bool)
    if causal:
        m &= j <= i
    if window is not None:
        m &= (j >= i - window[0]) & (j <= i + window[1])
    return m


def _pair_segments(cu_q: Any, max_q: Any, cu_kv: Any, max_kv: Any) -> tuple[jax.Array, jax.Array]:
    """Padding segment ids ``[batch, max_len]`` of earlier releases' ``from_cu_seqlens``: one
    ``[start, end)`` pair of real tokens per example, ``[start_0, end_0, start_1, end_1, ...]``."""
    max_kv = max_q if max_kv is None else max_kv
    cu_kv = cu_q if cu_kv is None else cu_kv
    out = []
    for name, cu, n, len_name in (
        ("cu_seqlens_q", cu_q, max_q, "max_q_len"),
        ("cu_seqlens_kv", cu_kv, max_kv, "max_kv_len"),
    ):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise TypeError(f"from_cu_seqlens: {len_name} must be a non-negative int, got {n!r}")
        cu = jnp.asarray(cu)
        if not jnp.issubdtype(cu.dtype, jnp.integer):
            raise TypeError(f"from_cu_seqlens: {name} must have an integer dtype, got {cu.dtype}")
        if cu.ndim != 1 or cu.shape[0] % 2 or cu.shape[0] == 0:
            raise ValueError(
                f"from_cu_seqlens: with {len_name}= (earlier releases' form) {name} holds [start, end) pairs, "
                f"[start_0, end_0, start_1, end_1, ...] (length 2 x batch), got shape {tuple(cu.shape)}; packed "
                "sequence boundaries [num_seqs + 1] go without max_q_len (seq_len_q=, seq_len_k=)"
            )
        pairs = cu.astype(jnp.int32).reshape(-1, 2)
        t = jnp.arange(int(n), dtype=jnp.int32)[None, :]
        out.append(jnp.where((t >= pairs[:, :1]) & (t < pairs[:, 1:]), 0, -1).astype(jnp.int32))
    if out[0].shape[0] != out[1].shape[0]:
        raise ValueError(
            f"from_cu_seqlens: cu_seqlens_q and cu_seqlens_kv must hold a pair per example each, got "
            f"{out[0].shape[0]} and {out[1].shape[0]} examples"
        )
    return out[0], out[1]


@dataclasses.dataclass(frozen=True, init=False)
class MaskInfo:
    """Which queries attend which keys: segment ids and/or a pairwise mask, plus patterns.

    Build it with :meth:`from_segments`, :meth:`from_attention_mask` or :meth:`from_cu_seqlens`,
    add patterns with :meth:`with_causal` / :meth:`with_sliding_window`, and pass it to an op as
    ``mask_info=``. Example::

        seg = jnp.array([[1, 1, 2, 2, 2, -1]])        # two packed sequences and one pad token
        mi = MaskInfo.from_segments(seg).with_causal()
        out = ejkernel.flash_attention(q, k, v, mask_info=mi)

    Attributes:
        q_segment_ids: ``[batch, seq_q]`` int32 or ``None``.
        kv_segment_ids: ``[batch, seq_k]`` int32 or ``None`` (set whenever q_segment_ids is).
        attention_mask: (property) the full mask ``[batch, heads or 1, seq_q, seq_k]``: segments,
            stored mask and patterns combined; ``None`` for a MaskInfo of patterns alone.
        stored_attention_mask: the pairwise mask as stored, bool, or ``None``.
        q_positions, kv_positions: ``[batch, seq]`` int positions (for RoPE) or ``None``; they do
            not take part in the mask.
        causal: the causal pattern applies (bottom-right aligned).
        sliding_window: ``(left, right)`` or ``None``.
        batch_axis_name, qheads_axis_name, kvheads_axis_name, sequence_axis_name: mesh axis names
            (static; kept for code written for the older MaskInfo).

    The constructor also accepts ``_attention_mask=``, ``_q_segment_ids=``, ``_kv_segment_ids=``
    (the older field names).
    """

    q_segment_ids: jax.Array | None = None
    kv_segment_ids: jax.Array | None = None
    _attention_mask: jax.Array | None = None
    q_positions: jax.Array | None = None
    kv_positions: jax.Array | None = None
    causal: bool = False
    sliding_window: tuple[int, int] | None = None
    batch_axis_name: tuple[str, ...] | str | None = ("dp", "fsdp")
    qheads_axis_name: tuple[str, ...] | str | None = "tp"
    kvheads_axis_name: tuple[str, ...] | str | None = "tp"
    sequence_axis_name: tuple[str, ...] | str | None = "sp"

    def __init__(
        self,
        q_segment_ids: Any = None,
        kv_segment_ids: Any = None,
        attention_mask: Any = None,
        causal: bool = False,
        sliding_window: Any = None,
        *,
        q_positions: Any = None,
        kv_positions: Any = None,
        batch_axis_name: Any = _DEFAULT_AXES["batch_axis_name"],
        qheads_axis_name: Any = _DEFAULT_AXES["qheads_axis_name"],
        kvheads_axis_name: Any = _DEFAULT_AXES["kvheads_axis_name"],
        sequence_axis_name: Any = _DEFAULT_AXES["sequence_axis_name"],
        _attention_mask: Any = None,
        _q_segment_ids: Any = None,
        _kv_segment_ids: Any = None,
    ):
        for new, old, a, b in (
            ("attention_mask", "_attention_mask", attention_mask, _attention_mask),
            ("q_segment_ids", "_q_segment_ids", q_segment_ids, _q_segment_ids),
            ("kv_segment_ids", "_kv_segment_ids", kv_segment_ids, _kv_segment_ids),
        ):
            if a is not None and b is not None:
                raise TypeError(f"MaskInfo: pass {new} or {old} (its older name), not both")
        values = {
            "q_segment_ids": q_segment_ids if _q_segment_ids is None else _q_segment_ids,
            "kv_segment_ids": kv_segment_ids if _kv_segment_ids is None else _kv_segment_ids,
            "_attention_mask": attention_mask if _attention_mask is None else _attention_mask,
            "q_positions": q_positions,
            "kv_positions": kv_positions,
            "causal": causal,
            "sliding_window": canonical_window(sliding_window),
            "batch_axis_name": _check_axis_name("batch_axis_name", batch_axis_name),
            "qheads_axis_name": _check_axis_name("qheads_axis_name", qheads_axis_name),
            "kvheads_axis_name": _check_axis_name("kvheads_axis_name", kvheads_axis_name),
            "sequence_axis_name": _check_axis_name("sequence_axis_name", sequence_axis_name),
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)
        self._validate()

    def _validate(self) -> None:
        if (self.q_segment_ids is None) != (self.kv_segment_ids is None):
            raise ValueError("MaskInfo: q_segment_ids and kv_segment_ids must be given together")
        # Checked where the values are arrays (JAX also rebuilds a MaskInfo from other leaves,
        # e.g. PartitionSpecs or axis numbers, when it maps over it as a pytree); ranks only
        # outside transformations (under vmap a leaf has lost its batch axis).
        for name in ("q_segment_ids", "kv_segment_ids", "q_positions", "kv_positions"):
            x = getattr(self, name)
            if _is_arraylike(x):
                if x.ndim != 2 and not isinstance(x, jax.core.Tracer):
                    raise ValueError(f"MaskInfo.{name} must be 2-D [batch, seq], got shape {tuple(x.shape)}")
                if not jnp.issubdtype(x.dtype, jnp.integer):
                    hint = "(-1 = padding), " if "segment" in name else ""
                    raise TypeError(
                        f"MaskInfo.{name} must have an integer dtype {hint}got {x.dtype}; "
                        "build it with MaskInfo.from_segments"
                    )
        m = self._attention_mask
        if _is_arraylike(m):
            if m.ndim != 4 and not isinstance(m, jax.core.Tracer):
                raise ValueError(
                    f"MaskInfo.attention_mask must be 4-D [batch, heads or 1, seq_q, seq_k], got shape {tuple(m.shape)}; "
                    "MaskInfo.from_attention_mask takes 2-D padding masks and 3-D masks"
                )
            if m.dtype != jnp.bool_:
                raise TypeError(
                    f"MaskInfo.attention_mask must be a bool array (True = may attend), got {m.dtype}; "
                    "MaskInfo.from_attention_mask converts integer masks"
                )
        if not isinstance(self.causal, bool):
            raise TypeError(f"MaskInfo.causal must be a bool, got {self.causal!r}")
        lens = self.seq_lens if self._all_arrays() else None
        if lens is not None:
            for name, n, axis in (("q_positions", lens[0], "seq_q"), ("kv_positions", lens[1], "seq_k")):
                x = getattr(self, name)
                if _is_arraylike(x) and x.ndim == 2 and int(x.shape[1]) != n:
                    raise ValueError(f"MaskInfo.{name} {tuple(x.shape)} must be [batch, {axis}] with {axis}={n}")

    def _all_arrays(self) -> bool:
        leaves = [getattr(self, f) for f in _LEAVES]
        return all(
            x is None or (_is_arraylike(x) and not isinstance(x, jax.core.Tracer) and x.ndim >= 2) for x in leaves
        )

    def _evolve(self, **changes: Any) -> MaskInfo:
        """A copy with ``changes`` (field names; ``_attention_mask`` for the stored mask), validated."""
        fields = {f: getattr(self, f) for f in (*_LEAVES, *_STATIC)}
        fields.update(changes)
        return type(self)(**fields)

    # -- constructors -------------------------------------------------------------------------

    @classmethod
    @trace
    def from_segments(
        cls,
        q_segment_ids: Any,
        kv_segment_ids: Any | None = None,
        q_positions: Any | None = None,
        kv_positions: Any | None = None,
        batch_axis_name: Any = _DEFAULT_AXES["batch_axis_name"],
        qheads_axis_name: Any = _DEFAULT_AXES["qheads_axis_name"],
        kvheads_axis_name: Any = _DEFAULT_AXES["kvheads_axis_name"],
        sequence_axis_name: Any = _DEFAULT_AXES["sequence_axis_name"],
        is_attn_mask: bool = False,
    ) -> MaskInfo:
        """From segment ids ``[batch, seq]`` (``-1`` = padding); ``kv_segment_ids`` defaults to
        ``q_segment_ids`` (self-attention).

        Args:
            q_segment_ids, kv_segment_ids: ``[batch, q_len]`` / ``[batch, kv_len]`` integer ids;
                equal ids attend each other, ``-1`` is padding.
            q_positions, kv_positions: optional ``[batch, len]`` positions, carried along.
            batch_axis_name, qheads_axis_name, kvheads_axis_name, sequence_axis_name: mesh axis
                names, carried along.
            is_attn_mask: the ids are padding masks (nonzero = real token, 0 = padding; bool or
                integer): real tokens become segment 0 and padding ``-1``, so every real query
                attends every real key.

        The pairwise mask is not stored; :attr:`attention_mask` computes it when read.
        """
        is_attn_mask = check_bool("is_attn_mask", is_attn_mask)
        if is_attn_mask:

            def padding(name: str, x: Any) -> jax.Array:
                x = check_mask_dtype(name, x)
                if x.ndim != 2:
                    raise ValueError(f"{name} must be 2-D [batch, seq] (is_attn_mask=True), got shape {tuple(x.shape)}")
                return jnp.where(jnp.asarray(x) != 0, 0, -1).astype(jnp.int32)

            q = padding("q_segment_ids", q_segment_ids)
            kv = q if kv_segment_ids is None else padding("kv_segment_ids", kv_segment_ids)
        else:
            q = _check_segments("q_segment_ids", q_segment_ids)
            kv = q if kv_segment_ids is None else _check_segments("kv_segment_ids", kv_segment_ids)
        if q.shape[0] != kv.shape[0]:
            raise ValueError(
                f"q_segment_ids {tuple(q.shape)} and kv_segment_ids {tuple(kv.shape)} differ in batch size"
            )
        q_pos = None if q_positions is None else check_int_array("q_positions", q_positions, 2, "[batch, q_len]")
        kv_pos = None if kv_positions is None else check_int_array("kv_positions", kv_positions, 2, "[batch, kv_len]")
        for name, pos, ids in (("q_positions", q_pos, q), ("kv_positions", kv_pos, kv)):
            if pos is not None and tuple(pos.shape) != tuple(ids.shape):
                side = name.split("_")[0]
                raise ValueError(
                    f"{name} {tuple(pos.shape)} must have the shape of {side}_segment_ids {tuple(ids.shape)}"
                )
        return cls(
            q_segment_ids=q,
            kv_segment_ids=kv,
            q_positions=q_pos,
            kv_positions=kv_pos,
            batch_axis_name=batch_axis_name,
            qheads_axis_name=qheads_axis_name,
            kvheads_axis_name=kvheads_axis_name,
            sequence_axis_name=sequence_axis_name,
        )

    @classmethod
    @trace
    def from_attention_mask(
        cls,
        attention_mask: Any = _MISSING,
        q_positions: Any | None = None,
        kv_positions: Any | None = None,
        *,
        mask_is_valid: bool = True,
        batch_axis_name: Any = _DEFAULT_AXES["batch_axis_name"],
        qheads_axis_name: Any = _DEFAULT_AXES["qheads_axis_name"],
        kvheads_axis_name: Any = _DEFAULT_AXES["kvheads_axis_name"],
        sequence_axis_name: Any = _DEFAULT_AXES["sequence_axis_name"],
        mask: Any = _MISSING,
    ) -> MaskInfo:
        """From an attention mask (``True``/nonzero = attend).

        - 2-D ``[batch, seq]``: a padding mask; valid tokens form one segment, padding tokens are
          ``-1`` on both the query and the key side (their output rows are zeros). The pairwise
          mask is computed when :attr:`attention_mask` is read.
        - 3-D ``[batch, seq_q, seq_k]`` or 4-D ``[batch, heads or 1, seq_q, seq_k]``: pairwise,
          stored as bool (3-D gets a head axis); no segment ids are stored.

        Args:
            attention_mask: the mask, bool or integer.
            q_positions, kv_positions: optional ``[batch, len]`` positions, carried along.
            mask_is_valid: ``False`` if ``True`` marks *masked-out* entries (PyTorch style);
                the mask is inverted.
            batch_axis_name, qheads_axis_name, kvheads_axis_name, sequence_axis_name: mesh axis names.
            mask: deprecated name of ``attention_mask`` (a ``DeprecationWarning``).
        """
        if mask is not _MISSING:
            if attention_mask is not _MISSING:
                raise TypeError("from_attention_mask: pass attention_mask (mask= is its deprecated name), not both")
            warnings.warn(
                "MaskInfo.from_attention_mask(mask=...) is deprecated; the parameter is named attention_mask",
                DeprecationWarning,
                stacklevel=3,
            )
            attention_mask = mask
        if attention_mask is _MISSING:
            raise TypeError("from_attention_mask() missing required argument: 'attention_mask'")
        mask_is_valid = check_bool("mask_is_valid", mask_is_valid)
        m = as_array(attention_mask)
        if not (jnp.issubdtype(m.dtype, jnp.integer) or m.dtype == jnp.bool_):
            raise TypeError(f"attention mask must be bool or integer (nonzero = attend), got {m.dtype}")
        m = jnp.asarray(m).astype(bool)
        if not mask_is_valid:
            m = ~m
        axes = {
            "batch_axis_name": batch_axis_name,
            "qheads_axis_name": qheads_axis_name,
            "kvheads_axis_name": kvheads_axis_name,
            "sequence_axis_name": sequence_axis_name,
        }
        if m.ndim == 2:
            seg = jnp.where(m, 0, -1).astype(jnp.int32)
            return cls.from_segments(seg, None, q_positions, kv_positions, **axes)
        if m.ndim == 3:
            m = m[:, None]
        if m.ndim != 4:
            raise ValueError(
                "attention mask must be 2-D [batch, seq], 3-D [batch, seq_q, seq_k] or "
                f"4-D [batch, heads, seq_q, seq_k], got shape {tuple(m.shape)}"
            )
        q_pos = None if q_positions is None else check_int_array("q_positions", q_positions, 2, "[batch, q_len]")
        kv_pos = None if kv_positions is None else check_int_array("kv_positions", kv_positions, 2, "[batch, kv_len]")
        return cls(attention_mask=m, q_positions=q_pos, kv_positions=kv_pos, **axes)

    @classmethod
    @trace
    def from_cu_seqlens(
        cls,
        cu_seqlens_q: Any,
        cu_seqlens_k: Any | None = None,
        *,
        seq_len_q: int | None = None,
        seq_len_k: int | None = None,
        max_q_len: int | None = None,
        cu_seqlens_kv: Any | None = None,
        max_kv_len: int | None = None,
        q_positions: Any | None = None,
        kv_positions: Any | None = None,
        batch_axis_name: Any = _DEFAULT_AXES["batch_axis_name"],
        qheads_axis_name: Any = _DEFAULT_AXES["qheads_axis_name"],
        kvheads_axis_name: Any = _DEFAULT_AXES["kvheads_axis_name"],
        sequence_axis_name: Any = _DEFAULT_AXES["sequence_axis_name"],
    ) -> MaskInfo:
        """From cumulative sequence lengths of sequences packed in one row (batch 1).

        Tokens ``cu[s] <= t < cu[s+1]`` get segment ``s``; tokens past ``cu[-1]`` up to
        ``seq_len`` (default ``cu[-1]``, which needs concrete ``cu``) are padding (``-1``).

        **Earlier releases' form**, chosen by its keyword ``max_q_len`` (never by the array's
        shape): ``cu_seqlens_q`` holds one ``[start, end)`` pair per example,
        ``[start_0, end_0, start_1, end_1, ...]`` (length ``2 × batch``), and the result is a
        padding mask ``[batch, max_q_len]``: token ``t`` of example ``b`` is real iff
        ``start_b <= t < end_b``. ``cu_seqlens_kv`` / ``max_kv_len`` are the keys' (default: the
        queries'). ``q_positions``, ``kv_positions`` and the axis names are carried along.
        """
        if max_q_len is not None:
            if cu_seqlens_k is not None or seq_len_q is not None or seq_len_k is not None:
                raise TypeError(
                    "from_cu_seqlens: max_q_len= takes the earlier form (cu_seqlens_kv=, max_kv_len=); "
                    "cu_seqlens_k, seq_len_q and seq_len_k belong to the packed form"
                )
            q_seg, kv_seg = _pair_segments(cu_seqlens_q, max_q_len, cu_seqlens_kv, max_kv_len)
            return cls.from_segments(
                q_seg, kv_seg, q_positions, kv_positions, batch_axis_name=batch_axis_name,
                qheads_axis_name=qheads_axis_name, kvheads_axis_name=kvheads_axis_name,
                sequence_axis_name=sequence_axis_name,
            )  # fmt: skip
        if cu_seqlens_kv is not None or max_kv_len is not None:
            raise TypeError(
                "from_cu_seqlens: cu_seqlens_kv= and max_kv_len= belong to the earlier form with max_q_len= "
                "([start, end) pairs per example); for packed sequences pass cu_seqlens_k and seq_len_k"
            )
        extra = {
            "q_positions": q_positions,
            "kv_positions": kv_positions,
            "batch_axis_name": batch_axis_name,
            "qheads_axis_name": qheads_axis_name,
            "kvheads_axis_name": kvheads_axis_name,
            "sequence_axis_name": sequence_axis_name,
        }
        for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
            if cu is not None and not jnp.issubdtype(jnp.asarray(cu).dtype, jnp.integer):
                raise TypeError(f"from_cu_seqlens: {name} must have an integer dtype, got {jnp.asarray(cu).dtype}")
        cu_q = jnp.asarray(cu_seqlens_q, jnp.int32)
        cu_k = cu_q if cu_seqlens_k is None else jnp.asarray(cu_seqlens_k, jnp.int32)
        if cu_q.ndim != 1 or cu_k.ndim != 1 or cu_q.shape != cu_k.shape or cu_q.shape[0] < 2:
            raise ValueError(
                "cu_seqlens must be 1-D [num_seqs + 1] with the same number of sequences, got "
                f"{tuple(cu_q.shape)} and {tuple(cu_k.shape)}"
            )
        if seq_len_k is None and seq_len_q is not None and cu_seqlens_k is None:
            seq_len_k = seq_len_q
        for name, cu, n in (("cu_seqlens_q", cu_q, seq_len_q), ("cu_seqlens_k", cu_k, seq_len_k)):
            c = _concrete(cu)
            if c is None:
                continue
            if (np.diff(c) < 0).any() or c[0] < 0:
                raise ValueError(f"from_cu_seqlens: {name} must be non-negative and non-decreasing, got {c.tolist()}")
            if n is not None and n < int(c[-1]):
                raise ValueError(f"from_cu_seqlens: the sequence length {n} is shorter than {name}[-1] = {int(c[-1])}")

        def seg(cu: jax.Array, n: int | None, name: str) -> jax.Array:
            if n is None:
                c = _concrete(cu)
                if c is None:
                    raise ValueError(f"from_cu_seqlens: pass {name} when the cu_seqlens are traced")
                n = int(c[-1])
            t = jnp.arange(n)
            s = jnp.searchsorted(cu, t, side="right").astype(jnp.int32) - 1
            return jnp.where((t >= cu[0]) & (t < cu[-1]), s, -1)[None]

        return cls(
            q_segment_ids=seg(cu_q, seq_len_q, "seq_len_q"), kv_segment_ids=seg(cu_k, seq_len_k, "seq_len_k"), **extra
        )

    # -- composition --------------------------------------------------------------------------

    def with_causal(self, causal: bool = True) -> MaskInfo:
        return self._evolve(causal=bool(causal))

    def with_sliding_window(self, window: int | tuple[int, int] | None) -> MaskInfo:
        return self._evolve(sliding_window=canonical_window(window))

    # -- properties ---------------------------------------------------------------------------

    @property
    def attention_mask(self) -> jax.Array | None:
        """The full pairwise mask ``[batch, heads or 1, seq_q, seq_k]`` bool: segments, stored mask
        and patterns combined (computed on each read unless only a mask is stored); ``None`` for a
        MaskInfo of patterns alone."""
        if self.q_segment_ids is None and self.causal is False and self.sliding_window is None:
            return self._attention_mask
        if self.seq_lens is None:
            return None
        return self.to_attention_mask()

    @property
    def stored_attention_mask(self) -> jax.Array | None:
        """The pairwise mask as stored (bool, 4-D), or ``None``: what kernels receive besides the
        segment ids and patterns."""
        return self._attention_mask

    @property
    def has_segments(self) -> bool:
        return self.q_segment_ids is not None

    @property
    def has_pairwise(self) -> bool:
        """Whether a pairwise mask is stored (see :attr:`stored_attention_mask`)."""
        return self._attention_mask is not None

    @property
    def batch_size(self) -> int | None:
        for x in (self.q_segment_ids, self._attention_mask):
            if x is not None:
                return int(x.shape[0])
        return None

    @property
    def seq_lens(self) -> tuple[int, int] | None:
        """``(seq_q, seq_k)`` that the arrays describe, or ``None`` if it holds only patterns."""
        if self.q_segment_ids is not None:
            assert self.kv_segment_ids is not None
            return int(self.q_segment_ids.shape[1]), int(self.kv_segment_ids.shape[1])
        if self._attention_mask is not None:
            return int(self._attention_mask.shape[2]), int(self._attention_mask.shape[3])
        return None

    # -- conversions --------------------------------------------------------------------------

    def to_attention_mask(self, seq_len_q: int | None = None, seq_len_k: int | None = None) -> jax.Array:
        """The full pairwise mask ``[batch, heads or 1, seq_q, seq_k]`` (segments, mask, patterns).

        ``seq_len_q``/``seq_len_k`` are needed only for a MaskInfo of patterns alone (then the
        result has batch 1).
        """
        lens = self.seq_lens
        if lens is None:
            if seq_len_q is None or seq_len_k is None:
                raise ValueError("to_attention_mask: this MaskInfo holds only patterns; pass seq_len_q and seq_len_k")
            lens = (seq_len_q, seq_len_k)
        sq, sk = lens
        mask = jnp.ones((1, 1, sq, sk), bool)
        if self.q_segment_ids is not None:
            q, kv = self.q_segment_ids, self.kv_segment_ids
            assert kv is not None
            mask = mask & ((q[:, :, None] == kv[:, None, :]) & (q[:, :, None] >= 0))[:, None]
        if self._attention_mask is not None:
            mask = mask & self._attention_mask
        pattern = _pattern_mask(sq, sk, self.causal, self.sliding_window)
        if pattern is not None:
            mask = mask & pattern
        return mask

    def to_segment_ids(self, *, check: bool = True) -> tuple[jax.Array, jax.Array]:
        """``(q_segment_ids, kv_segment_ids)``.

        From a pairwise mask, this recovers segments when the mask *is* a segment mask (block
        structure: two queries see either the same keys or disjoint keys). Each row is labelled
        by its first visible key, each key by the label of the first row that sees it. With
        ``check`` and a concrete mask, a mask that segments cannot express raises ``ValueError``
        (under ``jit`` it cannot be checked). Patterns (causal, window) are not part of segments.
        A MaskInfo holding both segments and a pairwise mask raises: segments alone would drop
        the mask.
        """
        if self.q_segment_ids is not None and self._attention_mask is not None:
            raise ValueError(
                "to_segment_ids: this MaskInfo holds a pairwise mask besides segments; segments cannot express both"
            )
        if self.q_segment_ids is not None:
            assert self.kv_segment_ids is not None
            return self.q_segment_ids, self.kv_segment_ids
        if self._attention_mask is None:
            raise ValueError("to_segment_ids: this MaskInfo holds only patterns")
        m = self._attention_mask
        m0 = m[:, 0]
        row_any = m0.any(axis=2)
        q_lab = jnp.where(row_any, jnp.argmax(m0, axis=2), -1).astype(jnp.int32)
        col_any = m0.any(axis=1)
        first_row = jnp.argmax(m0, axis=1)
        kv_lab = jnp.where(col_any, jnp.take_along_axis(q_lab, first_row, axis=1), -1).astype(jnp.int32)
        if check:
            concrete = _concrete(m)
            if concrete is not None:
                rebuilt = MaskInfo.from_segments(q_lab, kv_lab).to_attention_mask()
                if not np.array_equal(np.broadcast_to(np.asarray(rebuilt), concrete.shape), concrete):
                    raise ValueError("to_segment_ids: this attention mask is not a segment mask")
        return q_lab, kv_lab

    def to_cu_seqlens(self) -> tuple[jax.Array, jax.Array]:
        """``(cu_seqlens_q, cu_seqlens_k)`` of segments packed in one row (concrete, batch 1).

        Each segment must be one contiguous run, in the same order on both sides; padding
        (``-1``) may only trail. Raises ``ValueError`` otherwise. Empty sequences leave no
        segment id behind, so they do not survive a round trip through segment ids.
        """
        q, kv = self.to_segment_ids()
        qc, kc = _concrete(q), _concrete(kv)
        if qc is None or kc is None:
            raise ValueError("to_cu_seqlens needs concrete segment ids (not under jit)")
        if qc.shape[0] != 1:
            raise ValueError(f"to_cu_seqlens needs batch 1 (packed sequences), got batch {qc.shape[0]}")

        def runs(s: np.ndarray, name: str) -> tuple[list[int], list[int]]:
            ids: list[int] = []
            cu = [0]
            n_valid = int((s >= 0).sum())
            if (s[:n_valid] < 0).any():
                raise ValueError(f"to_cu_seqlens: padding in {name} must come last")
            for t in range(n_valid):
                if t == 0 or s[t] != s[t - 1]:
                    if int(s[t]) in ids:
                        raise ValueError(f"to_cu_seqlens: segment {int(s[t])} of {name} is not contiguous")
                    ids.append(int(s[t]))
                    if t:
                        cu.append(t)
            if n_valid:
                cu.append(n_valid)
            return ids, cu

        ids_q, cu_q = runs(qc[0], "q_segment_ids")
        ids_k, cu_k = runs(kc[0], "kv_segment_ids")
        if ids_q != ids_k:
            raise ValueError(f"to_cu_seqlens: segments differ between queries {ids_q} and keys {ids_k}")
        return jnp.asarray(cu_q, jnp.int32), jnp.asarray(cu_k, jnp.int32)

    def __repr__(self) -> str:
        def d(x: Any) -> str:
            return "None" if x is None else f"{x.dtype}{list(x.shape)}"

        extra = "".join(
            f", {name}={d(getattr(self, name))}"
            for name in ("q_positions", "kv_positions")
            if getattr(self, name) is not None
        )
        return (
            f"MaskInfo(q_segment_ids={d(self.q_segment_ids)}, kv_segment_ids={d(self.kv_segment_ids)}, "
            f"stored_attention_mask={d(self._attention_mask)}, causal={self.causal}, sliding_window={self.sliding_window}"
            f"{extra})"
        )


# -- pytree -----------------------------------------------------------------------------------
# Arrays are children; the patterns and axis names are static (part of the tree structure).
# Unflattening does not validate: JAX rebuilds MaskInfo from other leaves (PartitionSpecs, axis
# numbers, None) when it maps over it.

_KEYS = tuple(jax.tree_util.GetAttrKey("stored_attention_mask" if f == "_attention_mask" else f) for f in _LEAVES)


def _flatten_with_keys(mi: MaskInfo) -> tuple[tuple[tuple[Any, Any], ...], tuple[Any, ...]]:
    return tuple(zip(_KEYS, (getattr(mi, f) for f in _LEAVES), strict=True)), tuple(getattr(mi, f) for f in _STATIC)


def _flatten(mi: MaskInfo) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    return tuple(getattr(mi, f) for f in _LEAVES), tuple(getattr(mi, f) for f in _STATIC)


def _unflatten(aux: tuple[Any, ...], children: Any) -> MaskInfo:
    mi = object.__new__(MaskInfo)
    for name, value in zip(_LEAVES, children, strict=True):
        object.__setattr__(mi, name, value)
    for name, value in zip(_STATIC, aux, strict=True):
        object.__setattr__(mi, name, value)
    return mi


jax.tree_util.register_pytree_with_keys(MaskInfo, _flatten_with_keys, _unflatten, _flatten)

# Earlier releases' members (``apply_causal``, ``get_or_compute_attention_mask``, ...) are defined by
# ejkernel.compat.mask_info, loaded when one of them is first read.
for _name in MASK_INFO_NAMES:
    setattr(MaskInfo, _name, Deferred(MaskInfo, _name))
del _name
