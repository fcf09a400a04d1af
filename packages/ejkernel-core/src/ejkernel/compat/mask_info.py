"""``MaskInfo`` members of earlier releases, installed on :class:`ejkernel.types.MaskInfo` when
:mod:`ejkernel.compat` loads (the first time code reads one of them).

The current API is :class:`~ejkernel.types.MaskInfo`'s own: ``from_segments``,
``from_attention_mask``, ``from_cu_seqlens``, ``with_causal``/``with_sliding_window``,
``attention_mask``, ``to_attention_mask``, ``to_segment_ids``, ``to_cu_seqlens``. The older
constructors, transformations (``apply_causal``, ``apply_sliding_window``, ``apply_chunked``) and
queries (``get_or_compute_*``, ``get_qkv_masks``, ``materialize_*``, ``q_len``, ``bias``, ...) are
defined here, on :class:`EarlierMaskInfo`, whose members :func:`install` copies onto ``MaskInfo``.
"""

from __future__ import annotations

from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from ..types._mask_ops import (
    as_array,
    check_bool,
    check_dtype,
    check_int_array,
    check_mask_dtype,
    mask_to_segment_ids,
    positions_from_segment_ids,
    trace,
)
from ..types.mask_info import _DEFAULT_AXES, MaskInfo, _concrete, _is_arraylike, canonical_window

__all__ = ["EarlierMaskInfo", "install"]


def _check_offset(name: str, offset: Any, batch: int | None) -> int | jax.Array:
    """An int, or an int32 array of shape ``()`` or ``(batch,)`` (one offset per example)."""
    if isinstance(offset, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int or an integer array [batch], got a bool")
    if isinstance(offset, (int, np.integer)):
        return int(offset)
    if not _is_arraylike(offset):
        raise TypeError(f"{name} must be an int or an integer array [batch], got {type(offset).__name__} {offset!r}")
    if not jnp.issubdtype(offset.dtype, jnp.integer):
        raise TypeError(f"{name} must have an integer dtype, got {offset.dtype}")
    if offset.ndim > 1 or (offset.ndim == 1 and batch is not None and offset.shape[0] != batch):
        raise ValueError(f"{name} must be a scalar or one value per example [batch={batch}], got shape {offset.shape}")
    return jnp.asarray(offset, jnp.int32)


def _query_rows(sq: int, sk: int, offset: int | jax.Array) -> jax.Array:
    """Each query's position in key coordinates, ``[1 or batch, sq, 1]`` (bottom-right + offset)."""
    i = (jnp.arange(sq, dtype=jnp.int32) + (sk - sq))[None, :, None]
    if isinstance(offset, int):
        return i + offset
    return i + jnp.reshape(offset, (-1, 1, 1))


def _chunked_pattern(sq: int, sk: int, chunk_size: int, offset: int | jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(mask [1 or batch, sq, sk], query positions [1 or batch, sq])`` of chunked causal attention."""
    p = _query_rows(sq, sk, offset)
    j = jnp.arange(sk, dtype=jnp.int32)[None, None, :]
    return (p // chunk_size == j // chunk_size) & (j <= p), p[:, :, 0]


class EarlierMaskInfo:
    """The members of earlier releases' ``MaskInfo`` that are not the current API (``self`` is a
    :class:`~ejkernel.types.MaskInfo` once installed)."""

    def _and_mask(self, mask: jax.Array) -> MaskInfo:
        """A copy whose stored mask is ANDed with ``mask`` (4-D, broadcastable)."""
        stored = self._attention_mask
        return self._evolve(_attention_mask=mask if stored is None else stored & mask)

    def _need_lens(self, what: str) -> tuple[int, int]:
        lens = self.seq_lens
        if lens is None:
            raise ValueError(
                f"{what}: this MaskInfo holds only patterns, so its sizes are unknown; build it from segment ids "
                "or a mask (MaskInfo.from_segments / from_attention_mask)"
            )
        return lens

    @classmethod
    @trace
    def from_random(
        cls,
        batch_size: int,
        q_len: int,
        kv_len: int | None = None,
        sparsity: float = 0.5,
        seed: int = 0,
        q_positions: Any | None = None,
        kv_positions: Any | None = None,
        batch_axis_name: Any = _DEFAULT_AXES["batch_axis_name"],
        qheads_axis_name: Any = _DEFAULT_AXES["qheads_axis_name"],
        kvheads_axis_name: Any = _DEFAULT_AXES["kvheads_axis_name"],
        sequence_axis_name: Any = _DEFAULT_AXES["sequence_axis_name"],
    ) -> MaskInfo:
        """A random pairwise mask ``[batch_size, 1, q_len, kv_len]``, for tests.

        Each entry is ``True`` with probability ``1 - sparsity`` (``jax.random.bernoulli`` with
        ``jax.random.PRNGKey(seed)``); ``kv_len`` defaults to ``q_len``.
        """
        kv_len = q_len if kv_len is None else kv_len
        for name, v in (("batch_size", batch_size), ("q_len", q_len), ("kv_len", kv_len), ("seed", seed)):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"from_random: {name} must be an int, got {type(v).__name__} {v!r}")
        for name, v in (("batch_size", batch_size), ("q_len", q_len), ("kv_len", kv_len)):
            if v < 1:
                raise ValueError(f"from_random: {name} must be >= 1, got {v}")
        if isinstance(sparsity, (bool, np.bool_)) or not isinstance(sparsity, (int, float, np.integer, np.floating)):
            raise TypeError(f"from_random: sparsity must be a number in [0, 1], got {sparsity!r}")
        if not 0.0 <= float(sparsity) <= 1.0:
            raise ValueError(f"from_random: sparsity must be in [0, 1] (the fraction masked out), got {sparsity}")
        m = jax.random.bernoulli(
            jax.random.PRNGKey(int(seed)), p=1.0 - float(sparsity), shape=(int(batch_size), 1, int(q_len), int(kv_len))
        )
        q_pos = None if q_positions is None else check_int_array("q_positions", q_positions, 2, "[batch, q_len]")
        kv_pos = None if kv_positions is None else check_int_array("kv_positions", kv_positions, 2, "[batch, kv_len]")
        return cls(
            attention_mask=m,
            q_positions=q_pos,
            kv_positions=kv_pos,
            batch_axis_name=batch_axis_name,
            qheads_axis_name=qheads_axis_name,
            kvheads_axis_name=kvheads_axis_name,
            sequence_axis_name=sequence_axis_name,
        )

    @classmethod
    @trace
    def dynamic_init(
        cls,
        *,
        mask_info: MaskInfo | None = None,
        input_ids: Any | None = None,
        inputs_embeds: Any | None = None,
        attention_mask: Any | None = None,
    ) -> MaskInfo:
        """For model code: ``mask_info`` if given; else from ``attention_mask`` (2-D padding masks
        via :meth:`from_segments` with ``is_attn_mask=True``, others via
        :meth:`from_attention_mask`); else no padding, sized by ``input_ids [batch, seq]`` or
        ``inputs_embeds [batch, seq, dim]``. A non-bool ``attention_mask`` counts ``1`` as valid."""
        if mask_info is not None:
            if not isinstance(mask_info, MaskInfo):
                raise TypeError(f"dynamic_init: mask_info must be a MaskInfo, got {type(mask_info).__name__}")
            return mask_info
        if attention_mask is None:
            if input_ids is not None:
                input_ids = as_array(input_ids)
                if input_ids.ndim != 2:
                    raise ValueError(f"dynamic_init: input_ids must be [batch, seq], got shape {input_ids.shape}")
                b, s = input_ids.shape
            elif inputs_embeds is not None:
                inputs_embeds = as_array(inputs_embeds)
                if inputs_embeds.ndim != 3:
                    raise ValueError(
                        f"dynamic_init: inputs_embeds must be [batch, seq, dim], got shape {inputs_embeds.shape}"
                    )
                b, s, _ = inputs_embeds.shape
            else:
                raise ValueError("dynamic_init: pass one of mask_info, attention_mask, input_ids or inputs_embeds")
            am = jnp.ones((int(b), int(s)), bool)
        else:
            am = check_mask_dtype("attention_mask", attention_mask)
            am = jnp.asarray(am)
            if am.dtype != jnp.bool_:
                am = am == 1
        if am.ndim == 2:
            return cls.from_segments(am, is_attn_mask=True)
        return cls.from_attention_mask(am)

    @trace
    def replace(
        self,
        *,
        attention_mask: Any | None = None,
        q_segment_ids: Any | None = None,
        kv_segment_ids: Any | None = None,
        **kw: Any,
    ) -> MaskInfo:
        """A copy with the given fields replaced; ``None`` keeps a field as it is.

        ``attention_mask`` replaces the stored pairwise mask (4-D bool). Other keywords:
        ``q_positions``, ``kv_positions``, ``causal``, ``sliding_window`` and the axis names.
        The result is validated like the constructor's arguments.
        """
        allowed = {"q_positions", "kv_positions", "causal", "sliding_window", *_DEFAULT_AXES}
        unknown = sorted(set(kw) - allowed)
        if unknown:
            raise TypeError(
                f"replace: unknown field(s) {unknown}; fields: {sorted(allowed | {'attention_mask', 'q_segment_ids', 'kv_segment_ids'})}"
            )
        changes = {k: v for k, v in kw.items() if v is not None}
        if attention_mask is not None:
            changes["_attention_mask"] = attention_mask
        if q_segment_ids is not None:
            changes["q_segment_ids"] = q_segment_ids
        if kv_segment_ids is not None:
            changes["kv_segment_ids"] = kv_segment_ids
        return self._evolve(**changes)

    @trace
    def apply_causal(self, offset: int | Any = 0) -> MaskInfo:
        """Add causal masking: query ``i`` sees keys ``j <= i + (kv_len - q_len) + offset``.

        ``offset=0`` sets the :attr:`causal` pattern (kernels skip the masked blocks). Any other
        offset, or one offset per example (``Int[batch]``, traced is fine), is ANDed into the
        stored pairwise mask. Segment ids are kept.
        """
        off = _check_offset("offset", offset, self.batch_size)
        if isinstance(off, int) and off == 0:
            return self._evolve(causal=True)
        sq, sk = self._need_lens("apply_causal with a nonzero or per-example offset")
        j = jnp.arange(sk, dtype=jnp.int32)[None, None, :]
        return self._and_mask((j <= _query_rows(sq, sk, off))[:, None])

    @trace
    def apply_sliding_window(
        self,
        sliding_window: int | tuple[int, int],
        *,
        offset: int | Any = 0,
        mode: Literal["default", "decode", "prefill"] | None = None,
        index: int | Any | None = None,
    ) -> MaskInfo:
        """Add a sliding window: query ``i`` sees keys ``c - left <= j <= c + right`` with
        ``c = i + (kv_len - q_len) + offset``.

        Args:
            sliding_window: ``w`` (→ ``(w, w)``) or ``(left, right)``, ints >= 0.
            offset: an int or one per example (``Int[batch]``). With ``0`` the window becomes the
                :attr:`sliding_window` pattern (intersected with one already there); otherwise
                it is ANDed into the stored mask.
            mode: ``None``/``"default"``: the above. ``"prefill"``: then keep only the trailing
                ``min(left + right + 1, kv_len)`` keys (mask, kv segment ids and kv positions
                are cut). ``"decode"``: keep one query row, ``index``, and the
                ``min(left + right + 1, kv_len)`` keys of its window (start clipped into the
                keys); everything is baked into the stored mask, shapes become
                ``[batch, heads, 1, width]``, segment ids and positions are cut to match.
            index: the query row for ``mode="decode"`` (an int or ``Int[batch]``); ignored
                otherwise.
        """
        if sliding_window is None:
            raise TypeError("apply_sliding_window: sliding_window must be an int or a (left, right) pair, got None")
        window = canonical_window(sliding_window, "sliding_window")
        assert window is not None
        if mode not in (None, "default", "decode", "prefill"):
            raise ValueError(f"apply_sliding_window: mode must be None, 'default', 'decode' or 'prefill', got {mode!r}")
        off = _check_offset("offset", offset, self.batch_size)
        left, right = window
        if mode == "decode":
            return self._decode_window(window, off, index)
        if isinstance(off, int) and off == 0:
            old = self.sliding_window
            new = window if old is None else (min(old[0], left), min(old[1], right))
            out = self._evolve(sliding_window=new)
        else:
            sq, sk = self._need_lens("apply_sliding_window with a nonzero or per-example offset")
            c = _query_rows(sq, sk, off)
            j = jnp.arange(sk, dtype=jnp.int32)[None, None, :]
            out = self._and_mask(((j >= c - left) & (j <= c + right))[:, None])
        if mode == "prefill":
            _, sk = self._need_lens("apply_sliding_window(mode='prefill')")
            width = min(left + right + 1, sk)
            out = out._cut_keys(sk - width)
        return out

    def _cut_keys(self, start: int) -> MaskInfo:
        """Drop the first ``start`` keys (static). Bottom-right patterns keep their meaning."""
        changes: dict[str, Any] = {}
        if self.kv_segment_ids is not None:
            changes["kv_segment_ids"] = self.kv_segment_ids[:, start:]
        if self._attention_mask is not None:
            changes["_attention_mask"] = self._attention_mask[..., start:]
        if self.kv_positions is not None:
            changes["kv_positions"] = self.kv_positions[:, start:]
        return self._evolve(**changes)

    def _decode_window(self, window: tuple[int, int], off: int | jax.Array, index: Any) -> MaskInfo:
        sq, sk = self._need_lens("apply_sliding_window(mode='decode')")
        b = self.batch_size
        assert b is not None
        if index is None:
            raise ValueError("apply_sliding_window(mode='decode') needs index, the query row to keep")
        idx = _check_offset("index", index, b)
        if isinstance(idx, int):
            if not 0 <= idx < sq:
                raise ValueError(f"apply_sliding_window: index must be in [0, q_len={sq}), got {idx}")
        else:
            c = _concrete(idx)
            if c is not None and ((c < 0) | (c >= sq)).any():
                raise ValueError(f"apply_sliding_window: index must be in [0, q_len={sq}), got {c.tolist()}")
        left, right = window
        width = min(left + right + 1, sk)
        full = self.attention_mask
        assert full is not None
        c = _query_rows(sq, sk, off)
        j = jnp.arange(sk, dtype=jnp.int32)[None, None, :]
        full = full & ((j >= c - left) & (j <= c + right))[:, None]
        full = jnp.broadcast_to(full, (b, *full.shape[1:]))
        rows = jnp.broadcast_to(jnp.asarray(idx, jnp.int32), (b,))
        offs = jnp.broadcast_to(jnp.asarray(off, jnp.int32), (b,))
        starts = jnp.clip(rows + (sk - sq) + offs - left, 0, sk - width)

        def cut(x: jax.Array, axis: int, begin: jax.Array, size: int) -> jax.Array:
            return jax.vmap(lambda xb, s: jax.lax.dynamic_slice_in_dim(xb, s, size, axis=axis))(x, begin)

        mask = cut(cut(full, 1, rows, 1), 2, starts, width)
        changes: dict[str, Any] = {"_attention_mask": mask, "causal": False, "sliding_window": None}
        for name, begin, size in (
            ("q_segment_ids", rows, 1),
            ("kv_segment_ids", starts, width),
            ("q_positions", rows, 1),
            ("kv_positions", starts, width),
        ):
            x = getattr(self, name)
            if x is not None:
                changes[name] = cut(jnp.broadcast_to(x, (b, x.shape[1])), 0, begin, size)
        return self._evolve(**changes)

    @trace
    def apply_chunked(self, chunk_size: int, offset: int | Any = 0) -> MaskInfo:
        """Chunked causal attention: query ``i`` at key position ``p = i + (kv_len - q_len) + offset``
        sees keys ``j <= p`` of its chunk (``j // chunk_size == p // chunk_size``).

        The pattern is ANDed into the stored mask (with everything the MaskInfo held), and the
        segment ids are rewritten to chunk id + 1 (padding, and queries before the first key,
        are ``-1``), so segment-based consumers see the chunks.
        """
        if isinstance(chunk_size, (bool, np.bool_)) or not isinstance(chunk_size, (int, np.integer)):
            raise TypeError(f"apply_chunked: chunk_size must be an int, got {type(chunk_size).__name__} {chunk_size!r}")
        if chunk_size <= 0:
            raise ValueError(f"apply_chunked: chunk_size must be > 0, got {chunk_size}")
        off = _check_offset("offset", offset, self.batch_size)
        sq, sk = self._need_lens("apply_chunked")
        b = self.batch_size
        assert b is not None
        full = self.attention_mask
        assert full is not None
        chunk, p = _chunked_pattern(sq, sk, int(chunk_size), off)
        if self.q_segment_ids is not None:
            assert self.kv_segment_ids is not None
            q_pad, kv_pad = self.q_segment_ids < 0, self.kv_segment_ids < 0
        else:
            q_pad, kv_pad = ~full.any(axis=(1, 3)), ~full.any(axis=(1, 2))
        j = jnp.arange(sk, dtype=jnp.int32)[None, :]
        q_ids = jnp.where(q_pad | (p < 0), -1, p // chunk_size + 1)
        kv_ids = jnp.where(kv_pad, -1, j // chunk_size + 1)
        stored = full & chunk[:, None]
        return self._evolve(
            q_segment_ids=jnp.broadcast_to(q_ids, (b, sq)).astype(jnp.int32),
            kv_segment_ids=jnp.broadcast_to(kv_ids, (b, sk)).astype(jnp.int32),
            _attention_mask=stored,
        )

    @staticmethod
    @trace
    def create_chunked_attention_mask(
        chunk_size: int, q_len: int, kv_len: int | None = None, offset: int = 0, dtype: Any = jnp.bool_
    ) -> jax.Array:
        """The ``[q_len, kv_len]`` mask of :meth:`apply_chunked` (``kv_len`` defaults to ``q_len``)."""
        kv_len = q_len if kv_len is None else kv_len
        for name, v in (("chunk_size", chunk_size), ("q_len", q_len), ("kv_len", kv_len), ("offset", offset)):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"create_chunked_attention_mask: {name} must be an int, got {v!r}")
        if chunk_size <= 0:
            raise ValueError(f"create_chunked_attention_mask: chunk_size must be > 0, got {chunk_size}")
        if q_len < 0 or kv_len < 0:
            raise ValueError(f"create_chunked_attention_mask: lengths must be >= 0, got q_len={q_len}, kv_len={kv_len}")
        dtype = check_dtype("dtype", dtype)
        m, _ = _chunked_pattern(int(q_len), int(kv_len), int(chunk_size), int(offset))
        return m[0].astype(dtype)

    @property
    def q_len(self) -> int | None:
        """The query length, or ``None`` for a MaskInfo of patterns alone."""
        lens = self.seq_lens
        return None if lens is None else lens[0]

    @property
    def kv_len(self) -> int | None:
        """The key length, or ``None`` for a MaskInfo of patterns alone."""
        lens = self.seq_lens
        return None if lens is None else lens[1]

    @property
    def shape(self) -> tuple[int | None, int | None, int | None]:
        """``(batch_size, q_len, kv_len)`` (``None`` where unknown)."""
        return (self.batch_size, self.q_len, self.kv_len)

    @property
    def q_attention_mask(self) -> jax.Array:
        """``[batch, q_len]`` int32: 1 for real query tokens, 0 for padding."""
        q_ids, _ = self._padding_segments("q_attention_mask")
        return (q_ids >= 0).astype(jnp.int32)

    @property
    def q_position_ids(self) -> jax.Array:
        """``[batch, q_len]`` int32 positions from the query segment ids: they restart at 0 at each
        segment boundary; padding is -1 (stored ``q_positions`` are not consulted)."""
        q_ids, _ = self._padding_segments("q_position_ids")
        return positions_from_segment_ids(q_ids)

    @property
    def is_multi_sequence(self) -> jax.Array:
        """A JAX bool: some row holds two different segments (packed sequences). ``False`` without
        segment ids."""
        q = self.q_segment_ids
        if q is None:
            return jnp.array(False)
        valid = q >= 0
        hi = jnp.max(jnp.where(valid, q, jnp.iinfo(jnp.int32).min), axis=-1)
        lo = jnp.min(jnp.where(valid, q, jnp.iinfo(jnp.int32).max), axis=-1)
        return jnp.any(valid.any(axis=-1) & (hi != lo))

    @property
    def bias(self) -> jax.Array:
        """:meth:`create_bias` in float32."""
        return self.create_bias()

    @trace
    def get_or_compute_attention_mask(self, dtype: Any = jnp.bool_) -> jax.Array:
        """:attr:`attention_mask` as ``dtype`` (bool: ``True`` = may attend; numbers: 1 / 0).

        Raises ``ValueError`` for a MaskInfo of patterns alone (use :meth:`to_attention_mask`
        with the sequence lengths).
        """
        dtype = check_dtype("dtype", dtype)
        m = self.attention_mask
        if m is None:
            raise ValueError(
                "get_or_compute_attention_mask: this MaskInfo holds only patterns; "
                "use to_attention_mask(seq_len_q, seq_len_k)"
            )
        return m.astype(dtype)

    @trace
    def get_or_compute_segment_ids(self, per_head: bool = False) -> tuple[jax.Array, jax.Array]:
        """``(q_segment_ids, kv_segment_ids)``: the stored ones, or derived from
        :attr:`attention_mask` by :func:`~ejkernel.types.mask.mask_to_segment_ids` (identical rows /
        columns grouped; ``per_head`` gives ``[batch, heads, seq]``)."""
        per_head = check_bool("per_head", per_head)
        if self.q_segment_ids is not None:
            assert self.kv_segment_ids is not None
            return self.q_segment_ids, self.kv_segment_ids
        m = self.attention_mask
        if m is None:
            raise ValueError("get_or_compute_segment_ids: this MaskInfo holds only patterns (no segments, no mask)")
        return mask_to_segment_ids(m, per_head=per_head)

    def _padding_segments(self, what: str) -> tuple[jax.Array, jax.Array]:
        """Stored segment ids, or padding-style ids of the mask (0 = a token that attends / is
        attended by something, -1 = one that is not)."""
        if self.q_segment_ids is not None:
            assert self.kv_segment_ids is not None
            return self.q_segment_ids, self.kv_segment_ids
        m = self.attention_mask
        if m is None:
            raise ValueError(f"{what}: this MaskInfo holds only patterns (no segments, no mask)")
        q = jnp.where(m.any(axis=(1, 3)), 0, -1).astype(jnp.int32)
        kv = jnp.where(m.any(axis=(1, 2)), 0, -1).astype(jnp.int32)
        return q, kv

    @trace
    def get_or_compute_positions(self) -> tuple[jax.Array | None, jax.Array | None]:
        """``(q_positions, kv_positions)``: stored ones, else computed from the segment ids
        (restarting at 0 at each segment boundary, padding -1; for a MaskInfo without segment ids,
        from its padding: a token attending / attended by nothing is padding). ``(None, None)``
        for a MaskInfo of patterns alone."""
        q_pos, kv_pos = self.q_positions, self.kv_positions
        if (q_pos is not None and kv_pos is not None) or self.seq_lens is None:
            return q_pos, kv_pos
        q_ids, kv_ids = self._padding_segments("get_or_compute_positions")
        if q_pos is None:
            q_pos = positions_from_segment_ids(q_ids)
        if kv_pos is None:
            kv_pos = positions_from_segment_ids(kv_ids)
        return q_pos, kv_pos

    @trace
    def get_qkv_masks(self, dtype: Any = jnp.bool_) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(q_mask [batch, q_len], kv_mask [batch, kv_len], attention_mask)`` as ``dtype``.

        The per-token masks are true for tokens that are not padding (segment id >= 0; without
        segment ids, a token that attends / is attended by something); ``attention_mask`` is
        :attr:`attention_mask`.
        """
        dtype = check_dtype("dtype", dtype)
        q_ids, kv_ids = self._padding_segments("get_qkv_masks")
        m = self.get_or_compute_attention_mask(dtype)
        return (q_ids >= 0).astype(dtype), (kv_ids >= 0).astype(dtype), m

    @trace
    def materialize_attention_mask(self, dtype: Any = jnp.bool_) -> MaskInfo:
        """A copy that stores :attr:`attention_mask` (bool only; see :meth:`to_dtype`)."""
        if check_dtype("dtype", dtype) != np.dtype(bool):
            raise TypeError(
                f"materialize_attention_mask: MaskInfo stores bool masks, got dtype={dtype!r}; "
                "use get_or_compute_attention_mask(dtype) for a mask of another dtype"
            )
        m = self.get_or_compute_attention_mask()
        return self._evolve(_attention_mask=m)

    @trace
    def materialize_segment_ids(self, per_head: bool = False) -> MaskInfo:
        """A copy that stores segment ids: the stored ones, or padding-style ids of the mask
        (0 = real token, -1 = attends / is attended by nothing), which keep the mask's meaning
        (everything a MaskInfo holds combines with AND)."""
        if check_bool("per_head", per_head):
            raise ValueError(
                "materialize_segment_ids(per_head=True): MaskInfo holds [batch, seq] segment ids only; "
                "use mask_to_segment_ids(mask_info.attention_mask, per_head=True)"
            )
        if self.q_segment_ids is not None:
            return self
        q, kv = self._padding_segments("materialize_segment_ids")
        return self._evolve(q_segment_ids=q, kv_segment_ids=kv)

    def is_self_attention(self) -> bool | jax.Array:
        """Whether queries and keys are the same sequence: equal segment ids (a JAX bool when the
        ids are traced), else a square mask. ``False`` for a MaskInfo of patterns alone."""
        q, kv = self.q_segment_ids, self.kv_segment_ids
        if q is not None and kv is not None:
            if tuple(q.shape) != tuple(kv.shape):
                return False
            if q is kv:
                return True
            qc, kc = _concrete(q), _concrete(kv)
            if qc is not None and kc is not None:
                return bool(np.array_equal(qc, kc))
            return jnp.array_equal(q, kv)
        if self._attention_mask is not None:
            return int(self._attention_mask.shape[-2]) == int(self._attention_mask.shape[-1])
        return False

    @trace
    def to_dtype(self, dtype: Any) -> MaskInfo:
        """``self`` for ``bool``. MaskInfo stores bool masks only (kernels read ``True`` = may
        attend), so other dtypes raise ``TypeError``: use :meth:`get_or_compute_attention_mask`
        (``dtype``) for a numeric mask, :meth:`create_bias` for an additive bias."""
        if check_dtype("dtype", dtype) != np.dtype(bool):
            raise TypeError(
                f"to_dtype({dtype!r}): MaskInfo stores bool masks only; use "
                "mask_info.get_or_compute_attention_mask(dtype) for a mask of that dtype, or "
                "mask_info.create_bias(dtype) for an additive bias"
            )
        return self

    @trace
    def create_bias(self, dtype: Any = jnp.float32) -> jax.Array:
        """An additive bias of :attr:`attention_mask`: 0 where attention is allowed, the most
        negative finite ``dtype`` value where it is masked."""
        dt = check_dtype("dtype", dtype)
        if not jnp.issubdtype(dt, jnp.floating):
            raise TypeError(f"create_bias: dtype must be a floating dtype, got {dt}")
        m = self.get_or_compute_attention_mask()
        return jnp.where(m, jnp.zeros((), dt), jnp.asarray(jnp.finfo(dt).min, dt))


def install() -> None:
    """Put the members of :class:`EarlierMaskInfo` on :class:`~ejkernel.types.MaskInfo`, replacing
    the placeholders that load this package, under MaskInfo's name (which the debug trace prints)."""
    for name, member in vars(EarlierMaskInfo).items():
        if name.startswith("__"):
            continue
        fn = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
        while fn is not None:
            fn.__qualname__ = fn.__qualname__.replace("EarlierMaskInfo.", "MaskInfo.", 1)
            fn = getattr(fn, "__wrapped__", None)
        setattr(MaskInfo, name, member)
