"""Writing a step's new keys and values into a paged KV cache (:func:`write_kv_pages`).

The serving ops read a paged cache and, but for those that update it inside their call, never
write it: a serving step writes its tokens' keys and values with :func:`write_kv_pages` first,
then calls the op on the updated cache. Tokens are placed by a slot mapping, as in vLLM
(``slot = page * page_size + offset``; a negative slot is padding and is not written), in any of
the layouts below, read where they are (never transposed or copied to another layout).

| `layout` | cache | read by |
|---|---|---|
| `"interleaved"` | `kv_pages[num_pages, page_size, 2 * num_kv_heads, head_dim]`, keys at even heads, values at odd ones | `ragged_page_attention_v2` |
| `"blocks_tokens_heads"` | `(key_cache, value_cache)`, each `[num_pages, page_size, num_kv_heads, head_dim]` | `page_attention` (its default `cache_layout`), `unified_attention` (vLLM) |
| `"blocks_heads_tokens"` | each `[num_pages, num_kv_heads, page_size, head_dim]` | `page_attention(..., cache_layout="blocks_heads_tokens")` |
| `"heads_blocks_tokens"` | each `[num_kv_heads, num_pages, page_size, head_dim]` | `prefill_page_attention` (JetStream) |

An op's name may stand for its layout (``layout="ragged_page_attention_v2"``,
``"unified_attention"``, ``"prefill_page_attention"``), but for ``page_attention``, which reads
two layouts: pass its ``cache_layout`` value instead.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Int

from .args import as_array, check_kind, describe_array, is_traced, static_bool
from .checks import ValueRule, enforce
from .families.serving import unique_drop_index
from .page_attention.op import DEFAULT_CACHE_LAYOUT, EARLIER_CACHE_LAYOUT

__all__ = ["KV_CACHE_LAYOUTS", "OP_KV_CACHE_LAYOUTS", "KVCacheLayout", "write_kv_pages"]

_OP = "write_kv_pages"


@dataclasses.dataclass(frozen=True)
class KVCacheLayout:
    """A paged cache layout.

    Attributes:
        axes: the axes of one cache array, in order (``head_dim`` last).
        pair: separate key and value caches (``(key_cache, value_cache)``) rather than one
            K/V-interleaved array.
        read_by: the ops that read it.
    """

    axes: tuple[str, str, str, str]
    pair: bool
    read_by: str

    def describe(self) -> str:
        shape = f"[{', '.join(self.axes)}]"
        return f"(key_cache{shape}, value_cache{shape})" if self.pair else f"kv_pages{shape}"


#: ``layout`` name → the layout.
KV_CACHE_LAYOUTS: dict[str, KVCacheLayout] = {
    "interleaved": KVCacheLayout(
        ("num_pages", "page_size", "2*num_kv_heads", "head_dim"), False, "ragged_page_attention_v2"
    ),
    DEFAULT_CACHE_LAYOUT: KVCacheLayout(
        ("num_pages", "page_size", "num_kv_heads", "head_dim"),
        True,
        f"page_attention (cache_layout={DEFAULT_CACHE_LAYOUT!r}, its default), unified_attention",
    ),
    EARLIER_CACHE_LAYOUT: KVCacheLayout(
        ("num_pages", "num_kv_heads", "page_size", "head_dim"),
        True,
        f"page_attention (cache_layout={EARLIER_CACHE_LAYOUT!r})",
    ),
    "heads_blocks_tokens": KVCacheLayout(
        ("num_kv_heads", "num_pages", "page_size", "head_dim"), True, "prefill_page_attention"
    ),
}

#: An op's name → the layout it reads (the ops that read one layout).
OP_KV_CACHE_LAYOUTS: dict[str, str] = {
    "ragged_page_attention_v2": "interleaved",
    "unified_attention": DEFAULT_CACHE_LAYOUT,
    "prefill_page_attention": "heads_blocks_tokens",
}


def _parse_layout(layout: Any) -> str:
    if not isinstance(layout, str):
        raise TypeError(f"{_OP}: layout must be a str naming the cache layout, got {type(layout).__name__}")
    if layout in KV_CACHE_LAYOUTS:
        return layout
    if layout in OP_KV_CACHE_LAYOUTS:
        return OP_KV_CACHE_LAYOUTS[layout]
    if layout == "page_attention":
        raise ValueError(
            f"{_OP}: layout='page_attention' is ambiguous: page_attention reads two layouts; pass its "
            f"cache_layout, {DEFAULT_CACHE_LAYOUT!r} (its default, [num_pages, page_size, num_kv_heads, "
            f"head_dim]) or {EARLIER_CACHE_LAYOUT!r} ([num_pages, num_kv_heads, page_size, head_dim])"
        )
    known = ", ".join(f"{n!r} ({lay.read_by})" for n, lay in KV_CACHE_LAYOUTS.items())
    raise ValueError(
        f"{_OP}: layout must be one of {known}, or an op name of {tuple(OP_KV_CACHE_LAYOUTS)}; got {layout!r}"
    )


def _caches(cache: Any, name: str, lay: KVCacheLayout) -> tuple[Any, ...]:
    if lay.pair:
        if not isinstance(cache, (tuple, list)) or len(cache) != 2:
            got = (
                f"a {type(cache).__name__} of {len(cache)}"
                if isinstance(cache, (tuple, list))
                else type(cache).__name__
            )
            raise TypeError(f"{_OP}: layout {name!r} takes cache=(key_cache, value_cache), a pair of arrays; got {got}")
        names = ("key_cache", "value_cache")
        return tuple(
            as_array(_OP, n, c, ndim=4, layout=f"[{', '.join(lay.axes)}]") for n, c in zip(names, cache, strict=True)
        )
    if isinstance(cache, (tuple, list)):
        raise TypeError(
            f"{_OP}: layout {name!r} takes cache=kv_pages, one K/V-interleaved array; got a {type(cache).__name__}"
        )
    return (as_array(_OP, "kv_pages", cache, ndim=4, layout=f"[{', '.join(lay.axes)}]"),)


def _geometry(name: str, lay: KVCacheLayout, caches: tuple[Any, ...]) -> tuple[int, int, int]:
    """``(num_pages, page_size, num_kv_heads)`` of the caches (checked to agree)."""
    if not lay.pair:
        (kv,) = caches
        pages, size, heads2, _ = kv.shape
        if heads2 % 2:
            raise ValueError(
                f"{_OP}: kv_pages' head axis must be even (keys at even heads, values at odd ones) in layout "
                f"{name!r} {lay.describe()}; got kv_pages {describe_array(kv)}"
            )
        return pages, size, heads2 // 2
    kc, vc = caches
    dims = [dict(zip(lay.axes, c.shape, strict=True)) for c in caches]
    geometry = [tuple(d[a] for a in ("num_pages", "page_size", "num_kv_heads")) for d in dims]
    if geometry[0] != geometry[1]:
        raise ValueError(
            f"{_OP}: key_cache and value_cache must agree in num_pages, page_size and num_kv_heads in layout "
            f"{name!r} {lay.describe()}; got key_cache {describe_array(kc)}, value_cache {describe_array(vc)}"
        )
    return geometry[0]


def _check_tokens(name: str, lay: KVCacheLayout, caches: tuple[Any, ...], keys: Any, values: Any, slots: Any) -> int:
    """Checks keys, values and slot_mapping against the caches; returns the number of slots."""
    pages, size, heads = _geometry(name, lay, caches)
    # The cache each of keys and values goes to: the one K/V-interleaved array, or one of the pair.
    targets = (
        tuple(zip(caches * 2, ("kv_pages",) * 2, strict=True))
        if len(caches) == 1
        else tuple(zip(caches, ("key_cache", "value_cache"), strict=True))
    )
    tokens = slots.shape[0]
    for arg, x, (cache, cache_name) in zip(("keys", "values"), (keys, values), targets, strict=True):
        d = cache.shape[-1]
        if tuple(x.shape) != (tokens, heads, d):
            raise ValueError(
                f"{_OP}: {arg} must be [num_tokens, num_kv_heads, head_dim] = [{tokens}, {heads}, {d}] "
                f"(num_tokens from slot_mapping {describe_array(slots)}, the rest from {cache_name} "
                f"{describe_array(cache)} in layout {name!r} {lay.describe()}); got {arg} {describe_array(x)}"
            )
        if x.dtype != cache.dtype:
            raise TypeError(
                f"{_OP}: {arg} must have the dtype of {cache_name}, {cache.dtype} (cast it: the cache's dtype is "
                f"the caller's choice, never converted here); got {arg} {describe_array(x)}"
            )
    return pages * size


def _rules(num_slots: int) -> list[ValueRule]:
    def repeats(xp: Any, s: Any) -> Any:
        s = xp.sort(s)
        return ((s[1:] == s[:-1]) & (s[1:] >= 0)).sum()

    return [
        ValueRule(
            ("slot_mapping",),
            f"must be < num_pages * page_size = {num_slots} (a negative slot is padding)",
            lambda xp, s: s >= num_slots,
        ),
        ValueRule(
            ("slot_mapping",),
            "must not repeat a slot (two tokens written to one slot leave either)",
            lambda xp, s: repeats(xp, s) > 0,
            whole=("repeated slots", repeats),
        ),
    ]


def _slot_index(slots: Any, num_slots: int) -> Any:
    # A negative slot is moved past the end, where the scatter drops it (JAX's indexing would
    # otherwise wrap it to the cache's last slot), each to its own position: the scatters declare
    # their indices unique (a slot repeated under jit, where the rule cannot see it, is the
    # caller's error).
    return unique_drop_index(slots, slots >= 0, num_slots)


def _scatter(layout: str, cache: Any, new: Any, idx: Any) -> Any:
    """``cache`` with ``new[t]`` ([num_tokens, heads, d]) written at slot ``idx[t]``; slots past
    the end are dropped (``mode="drop"``), so a bad slot under ``jit`` writes nothing."""
    if layout == "heads_blocks_tokens":
        heads, pages, size, d = cache.shape
        flat = cache.reshape(heads, pages * size, d)
        return flat.at[:, idx].set(jnp.swapaxes(new, 0, 1), mode="drop", unique_indices=True).reshape(cache.shape)
    if layout == EARLIER_CACHE_LAYOUT:
        size = cache.shape[2]
        # The two advanced indices around the head slice put the token axis first: [tokens, heads, d].
        return cache.at[idx // size, :, idx % size].set(new, mode="drop", unique_indices=True)
    pages, size, heads, d = cache.shape  # interleaved, blocks_tokens_heads: a slot is a row
    return cache.reshape(pages * size, heads, d).at[idx].set(new, mode="drop", unique_indices=True).reshape(cache.shape)


def _write(layout: str, *arrays: Any) -> tuple[Any, ...]:
    if layout == "interleaved":
        kv, keys, values, slots = arrays
        pages, size, heads2, d = kv.shape
        both = jnp.stack([keys, values], axis=2).reshape(keys.shape[0], heads2, d)  # K at 2h, V at 2h + 1
        return (_scatter(layout, kv, both, _slot_index(slots, pages * size)),)
    kc, vc, keys, values, slots = arrays
    dims = dict(zip(KV_CACHE_LAYOUTS[layout].axes, kc.shape, strict=True))
    idx = _slot_index(slots, dims["num_pages"] * dims["page_size"])
    return _scatter(layout, kc, keys, idx), _scatter(layout, vc, values, idx)


@functools.cache
def _jitted(layout: str, num_caches: int, donate: bool) -> Callable[..., tuple[Any, ...]]:
    return jax.jit(functools.partial(_write, layout), donate_argnums=tuple(range(num_caches)) if donate else ())


def write_kv_pages(
    cache: Any,
    keys: Any,
    values: Any,
    slot_mapping: Int[Array, "num_tokens"],
    *,
    layout: str,
    donate: bool = False,
) -> Any:
    """Write a step's new keys and values into their pages of a paged KV cache.

    Token ``t`` goes to slot ``slot_mapping[t] = page * page_size + offset``: offset ``offset``
    of page ``page``, as in vLLM's ``slot_mapping`` (a sequence's token at position ``p`` has
    ``page = block_tables[seq, p // page_size]`` and ``offset = p % page_size``). A negative slot
    is padding: that token is not written. Nothing else of the cache changes.

    Args:
        cache: the cache in ``layout``: one array ``kv_pages`` for ``"interleaved"``, else the pair
            ``(key_cache, value_cache)`` (see :data:`KV_CACHE_LAYOUTS`).
        keys: ``[num_tokens, num_kv_heads, head_dim]`` in the (key) cache's dtype.
        values: ``[num_tokens, num_kv_heads, value_head_dim]`` in the (value) cache's dtype
            (``value_head_dim == head_dim`` for ``"interleaved"``).
        slot_mapping: ``[num_tokens]`` int. Slots are below ``num_pages * page_size`` and distinct
            (negative ones aside): checked when concrete (``ValueError``); under ``jit`` only with
            :func:`ejkernel.checks` on. Unchecked, a slot past the end is not written (the
            scatter drops it: no other page is touched); tokens sharing a slot leave either one.
        layout: the cache's layout, required (a shape often fits two layouts):
            ``"interleaved"`` (``ragged_page_attention_v2``), ``"blocks_tokens_heads"``
            (``page_attention``'s default, ``unified_attention``), ``"blocks_heads_tokens"``
            (``page_attention(cache_layout="blocks_heads_tokens")``) or ``"heads_blocks_tokens"``
            (``prefill_page_attention``); or the name of an op that reads one layout.
        donate: called eagerly (outside ``jit``), donate the cache arrays to the update so it is
            made in place, without copying the cache: the arrays passed in are then deleted
            (reading one raises ``RuntimeError: Array has been deleted``); keep only the returned
            cache. Off by default because it invalidates the caller's arrays, which a function
            returning a new value does not otherwise do. Under ``jit`` it has no effect: the
            update is in place when the jitted function donates the cache
            (``jax.jit(step, donate_argnums=...)``), and copies it once otherwise.

    Returns:
        The updated cache, in ``cache``'s structure: ``kv_pages``, or ``(key_cache, value_cache)``.

    Raises:
        TypeError: ``cache`` not in the layout's structure, a dtype that does not match, a
            non-integer ``slot_mapping``.
        ValueError: an unknown ``layout``, shapes that do not fit it, a concrete slot out of range
            or repeated.

    Example:
        >>> import jax.numpy as jnp, ejkernel
        >>> kv = jnp.zeros((4, 8, 2 * 2, 16))                    # 4 pages of 8 tokens, 2 kv heads
        >>> k = v = jnp.ones((3, 2, 16))
        >>> kv = ejkernel.write_kv_pages(kv, k, v, jnp.array([9, 10, -1]), layout="interleaved")
        >>> float(kv[1, 1].sum()), float(kv[1, 3].sum())         # page 1, offsets 1 and 2; -1 is padding
        (64.0, 0.0)
    """
    name = _parse_layout(layout)
    lay = KV_CACHE_LAYOUTS[name]
    donate = static_bool(_OP, "donate", donate)
    caches = _caches(cache, name, lay)
    keys = as_array(_OP, "keys", keys, ndim=3, layout="[num_tokens, num_kv_heads, head_dim]")
    values = as_array(_OP, "values", values, ndim=3, layout="[num_tokens, num_kv_heads, value_head_dim]")
    slots = as_array(_OP, "slot_mapping", slot_mapping, ndim=1, layout="[num_tokens]")
    check_kind(_OP, "slot_mapping", slots, "int")
    num_slots = _check_tokens(name, lay, caches, keys, values, slots)
    enforce(_OP, _rules(num_slots), {"slot_mapping": slots})
    arrays = (*caches, keys, values, slots)
    if any(is_traced(a) for a in arrays):
        out = _write(name, *arrays)  # traced into the caller's jit, which decides on donation
    else:
        if donate and len(caches) == 2 and caches[0] is caches[1]:
            raise ValueError(
                f"{_OP}: donate=True with one array as both key_cache and value_cache would donate it twice; "
                "pass two arrays"
            )
        out = _jitted(name, len(caches), donate)(*arrays)
    return out if lay.pair else out[0]
