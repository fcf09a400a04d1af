"""``MaskInfo``: one description of which queries may attend which keys.

Three equivalent encodings, with conversions between them:

- **segment ids** ``[batch, seq]`` int32: a query attends a key of the same segment; ``-1``
  marks padding (attends and is attended by nothing). Cheap, and what kernels prefer.
- **pairwise mask** ``[batch, heads or 1, seq_q, seq_k]`` bool: ``True`` = may attend. General.
- **cu_seqlens** ``[num_seqs + 1]``: cumulative lengths of sequences packed along one row.

On top of either, two patterns compose: ``causal`` (aligned bottom-right when ``seq_q != seq_k``:
query ``i`` sees keys ``j <= i + seq_k - seq_q``) and ``sliding_window=(left, right)`` (query ``i``
sees keys ``i + off - left <= j <= i + off + right``, ``off = seq_k - seq_q``).

``MaskInfo`` is a pytree (arrays are leaves, the patterns static), so it passes through ``jit``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["MaskInfo", "canonical_window"]


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
    if not hasattr(seg, "shape") or not hasattr(seg, "dtype"):
        seg = jnp.asarray(seg)
    if seg.ndim != 2:
        raise ValueError(f"{name} must be 2-D [batch, seq], got shape {tuple(seg.shape)}")
    if not jnp.issubdtype(seg.dtype, jnp.integer):
        raise TypeError(f"{name} must have an integer dtype, got {seg.dtype}")
    return jnp.asarray(seg, jnp.int32)


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


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
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
        attention_mask: ``[batch, heads or 1, seq_q, seq_k]`` bool or ``None``.
        causal: the causal pattern applies (bottom-right aligned).
        sliding_window: ``(left, right)`` or ``None``.
    """

    q_segment_ids: jax.Array | None = None
    kv_segment_ids: jax.Array | None = None
    attention_mask: jax.Array | None = None
    causal: bool = dataclasses.field(default=False, metadata={"static": True})
    sliding_window: tuple[int, int] | None = dataclasses.field(default=None, metadata={"static": True})

    def __post_init__(self):
        if (self.q_segment_ids is None) != (self.kv_segment_ids is None):
            raise ValueError("MaskInfo: q_segment_ids and kv_segment_ids must be given together")
        # Checked where the values are arrays (JAX also rebuilds a MaskInfo from other leaves,
        # e.g. PartitionSpecs or axis numbers, when it maps over it as a pytree); ranks only
        # outside transformations (under vmap a leaf has lost its batch axis).
        for name in ("q_segment_ids", "kv_segment_ids"):
            x = getattr(self, name)
            if _is_arraylike(x):
                if x.ndim != 2 and not isinstance(x, jax.core.Tracer):
                    raise ValueError(f"MaskInfo.{name} must be 2-D [batch, seq], got shape {tuple(x.shape)}")
                if not jnp.issubdtype(x.dtype, jnp.integer):
                    raise TypeError(
                        f"MaskInfo.{name} must have an integer dtype (-1 = padding), got {x.dtype}; "
                        "build it with MaskInfo.from_segments"
                    )
        m = self.attention_mask
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
        object.__setattr__(self, "sliding_window", canonical_window(self.sliding_window))
        if not isinstance(self.causal, bool):
            raise TypeError(f"MaskInfo.causal must be a bool, got {self.causal!r}")

    # -- constructors -------------------------------------------------------------------------

    @classmethod
    def from_segments(cls, q_segment_ids: Any, kv_segment_ids: Any | None = None) -> MaskInfo:
        """From segment ids ``[batch, seq]`` (``-1`` = padding); ``kv_segment_ids`` defaults to
        ``q_segment_ids`` (self-attention)."""
        q = _check_segments("q_segment_ids", q_segment_ids)
        kv = q if kv_segment_ids is None else _check_segments("kv_segment_ids", kv_segment_ids)
        if q.shape[0] != kv.shape[0]:
            raise ValueError(
                f"q_segment_ids {tuple(q.shape)} and kv_segment_ids {tuple(kv.shape)} differ in batch size"
            )
        return cls(q_segment_ids=q, kv_segment_ids=kv)

    @classmethod
    def from_attention_mask(cls, mask: Any) -> MaskInfo:
        """From an attention mask (``True``/nonzero = attend).

        - 2-D ``[batch, seq]``: a padding mask; valid tokens form one segment, padding tokens are
          ``-1`` on both the query and the key side (their output rows are zeros).
        - 3-D ``[batch, seq_q, seq_k]`` or 4-D ``[batch, heads or 1, seq_q, seq_k]``: pairwise.
        """
        if not hasattr(mask, "ndim"):
            mask = jnp.asarray(mask)
        if not (jnp.issubdtype(mask.dtype, jnp.integer) or mask.dtype == jnp.bool_):
            raise TypeError(f"attention mask must be bool or integer (nonzero = attend), got {mask.dtype}")
        if mask.ndim == 2:
            seg = jnp.where(jnp.asarray(mask).astype(bool), 0, -1).astype(jnp.int32)
            return cls(q_segment_ids=seg, kv_segment_ids=seg)
        if mask.ndim == 3:
            mask = mask[:, None]
        if mask.ndim != 4:
            raise ValueError(
                "attention mask must be 2-D [batch, seq], 3-D [batch, seq_q, seq_k] or "
                f"4-D [batch, heads, seq_q, seq_k], got shape {tuple(mask.shape)}"
            )
        return cls(attention_mask=jnp.asarray(mask).astype(bool))

    @classmethod
    def from_cu_seqlens(
        cls,
        cu_seqlens_q: Any,
        cu_seqlens_k: Any | None = None,
        *,
        seq_len_q: int | None = None,
        seq_len_k: int | None = None,
    ) -> MaskInfo:
        """From cumulative sequence lengths of sequences packed in one row (batch 1).

        Tokens ``cu[s] <= t < cu[s+1]`` get segment ``s``; tokens past ``cu[-1]`` up to
        ``seq_len`` (default ``cu[-1]``, which needs concrete ``cu``) are padding (``-1``).
        """
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

        return cls(q_segment_ids=seg(cu_q, seq_len_q, "seq_len_q"), kv_segment_ids=seg(cu_k, seq_len_k, "seq_len_k"))

    # -- composition --------------------------------------------------------------------------

    def with_causal(self, causal: bool = True) -> MaskInfo:
        return dataclasses.replace(self, causal=bool(causal))

    def with_sliding_window(self, window: int | tuple[int, int] | None) -> MaskInfo:
        return dataclasses.replace(self, sliding_window=canonical_window(window))

    # -- properties ---------------------------------------------------------------------------

    @property
    def has_segments(self) -> bool:
        return self.q_segment_ids is not None

    @property
    def has_pairwise(self) -> bool:
        return self.attention_mask is not None

    @property
    def batch_size(self) -> int | None:
        for x in (self.q_segment_ids, self.attention_mask):
            if x is not None:
                return int(x.shape[0])
        return None

    @property
    def seq_lens(self) -> tuple[int, int] | None:
        """``(seq_q, seq_k)`` that the arrays describe, or ``None`` if it holds only patterns."""
        if self.q_segment_ids is not None:
            assert self.kv_segment_ids is not None
            return int(self.q_segment_ids.shape[1]), int(self.kv_segment_ids.shape[1])
        if self.attention_mask is not None:
            return int(self.attention_mask.shape[2]), int(self.attention_mask.shape[3])
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
        if self.attention_mask is not None:
            mask = mask & self.attention_mask
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
        if self.q_segment_ids is not None and self.attention_mask is not None:
            raise ValueError(
                "to_segment_ids: this MaskInfo holds a pairwise mask besides segments; segments cannot express both"
            )
        if self.q_segment_ids is not None:
            assert self.kv_segment_ids is not None
            return self.q_segment_ids, self.kv_segment_ids
        if self.attention_mask is None:
            raise ValueError("to_segment_ids: this MaskInfo holds only patterns")
        m = self.attention_mask
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

        return (
            f"MaskInfo(q_segment_ids={d(self.q_segment_ids)}, kv_segment_ids={d(self.kv_segment_ids)}, "
            f"attention_mask={d(self.attention_mask)}, causal={self.causal}, sliding_window={self.sliding_window})"
        )
