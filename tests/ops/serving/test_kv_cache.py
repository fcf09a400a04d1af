"""``ejkernel.write_kv_pages``: every layout against a token-by-token NumPy write (eager and under
``jit``), padding and out-of-range slots written nowhere, a round trip through each layout's
indexing, in-place updates under donation (the compiled HLO aliases the cache, with no copy of
it), bad inputs named, and ``ragged_page_attention_v2`` over the written cache against dense
attention of the same tokens."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.ops.kv_cache import KV_CACHE_LAYOUTS, OP_KV_CACHE_LAYOUTS
from ejkernel.ops.ragged_page_attention_v2.reference import ragged_page_attention_v2_reference

PAGES, PAGE_SIZE, HK, D, DV = 6, 4, 2, 8, 5
LAYOUTS = list(KV_CACHE_LAYOUTS)


def _shape(layout: str, d: int) -> tuple[int, ...]:
    return {
        "interleaved": (PAGES, PAGE_SIZE, 2 * HK, d),
        "blocks_tokens_heads": (PAGES, PAGE_SIZE, HK, d),
        "blocks_heads_tokens": (PAGES, HK, PAGE_SIZE, d),
        "heads_blocks_tokens": (HK, PAGES, PAGE_SIZE, d),
    }[layout]


def _caches(layout: str, rng: np.random.Generator) -> list[np.ndarray]:
    """The cache(s) in ``layout``, random; the value cache has its own head dim where it can."""
    if layout == "interleaved":
        return [rng.standard_normal(_shape(layout, D)).astype(np.float32)]
    return [rng.standard_normal(_shape(layout, d)).astype(np.float32) for d in (D, DV)]


def _cell(layout: str, cache: np.ndarray, slot: int, head: int) -> tuple:
    """The index of token ``slot``'s ``head`` in ``cache``, straight from the layout's definition."""
    page, off = divmod(slot, PAGE_SIZE)
    return {
        "interleaved": (page, off, head),
        "blocks_tokens_heads": (page, off, head),
        "blocks_heads_tokens": (page, head, off),
        "heads_blocks_tokens": (head, page, off),
    }[layout]


def _naive_write(layout: str, caches: list[np.ndarray], keys, values, slots) -> list[np.ndarray]:
    out = [c.copy() for c in caches]
    for t, slot in enumerate(np.asarray(slots)):
        if slot < 0:
            continue
        for h in range(HK):
            if layout == "interleaved":
                out[0][_cell(layout, out[0], slot, 2 * h)] = keys[t, h]
                out[0][_cell(layout, out[0], slot, 2 * h + 1)] = values[t, h]
            else:
                out[0][_cell(layout, out[0], slot, h)] = keys[t, h]
                out[1][_cell(layout, out[1], slot, h)] = values[t, h]
    return out


def _tokens(layout: str, slots, rng: np.random.Generator):
    n = len(slots)
    dv = D if layout == "interleaved" else DV
    keys = rng.standard_normal((n, HK, D)).astype(np.float32)
    values = rng.standard_normal((n, HK, dv)).astype(np.float32)
    return keys, values, np.asarray(slots, np.int32)


def _call(layout, caches, keys, values, slots, **kw):
    """``write_kv_pages`` with the cache(s) and the result as lists."""
    pair = KV_CACHE_LAYOUTS[OP_KV_CACHE_LAYOUTS.get(layout, layout)].pair
    cache = tuple(caches) if pair else caches[0]
    out = ejkernel.write_kv_pages(cache, keys, values, slots, layout=layout, **kw)
    return list(out) if pair else [out]


def _random_slots(rng: np.random.Generator, n_tokens: int, n_pad: int) -> np.ndarray:
    """Distinct slots and padding, never the cache's last slot: a padding slot (-1) that indexing
    wrapped to it would change it."""
    slots = np.concatenate([rng.permutation(PAGES * PAGE_SIZE - 1)[:n_tokens], np.full(n_pad, -1)])
    return rng.permutation(slots).astype(np.int32)


@pytest.mark.parametrize("mode", ["eager", "jit"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_matches_a_token_by_token_write(layout, mode):
    rng = np.random.default_rng(0)
    caches = _caches(layout, rng)
    keys, values, slots = _tokens(layout, _random_slots(rng, 9, 3), rng)
    slots[np.flatnonzero(slots == -1)[0]] = -7  # any negative slot is padding
    want = _naive_write(layout, caches, keys, values, slots)

    def f(*caches_and_tokens):
        *cs, k, v, s = caches_and_tokens
        return _call(layout, [jnp.asarray(c) for c in cs], k, v, s)

    got = (jax.jit(f) if mode == "jit" else f)(*map(jnp.asarray, caches), keys, values, slots)
    for g, w, c in zip(got, want, caches, strict=True):
        assert g.shape == c.shape and g.dtype == c.dtype
        np.testing.assert_array_equal(np.asarray(g), w)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_round_trip_through_block_tables(layout):
    """Two sequences' tokens written at their positions' slots read back through their block tables."""
    rng = np.random.default_rng(1)
    caches = [np.full_like(c, np.nan) for c in _caches(layout, rng)]
    tables = rng.permutation(PAGES).reshape(2, PAGES // 2)
    lens = [7, 10]
    positions = [(s, p) for s in range(2) for p in range(lens[s])]
    slots = [tables[s, p // PAGE_SIZE] * PAGE_SIZE + p % PAGE_SIZE for s, p in positions]
    keys, values, slots = _tokens(layout, slots, rng)
    out = [np.asarray(c) for c in _call(layout, caches, keys, values, slots)]
    for t, (s, p) in enumerate(positions):
        page, off = tables[s, p // PAGE_SIZE], p % PAGE_SIZE
        if layout == "interleaved":
            row = out[0][page, off]
            k, v = row[0::2], row[1::2]
        elif layout == "blocks_tokens_heads":
            k, v = out[0][page, off], out[1][page, off]
        elif layout == "blocks_heads_tokens":
            k, v = out[0][page, :, off], out[1][page, :, off]
        else:
            k, v = out[0][:, page, off], out[1][:, page, off]
        np.testing.assert_array_equal(k, keys[t])
        np.testing.assert_array_equal(v, values[t])
    # Nothing else was written: a key and a value row per token and kv head.
    assert sum(int(np.isfinite(o).all(axis=-1).sum()) for o in out) == 2 * HK * len(slots)


@pytest.mark.parametrize(("op", "layout"), list(OP_KV_CACHE_LAYOUTS.items()))
def test_an_op_name_stands_for_its_layout(op, layout):
    rng = np.random.default_rng(2)
    caches = _caches(layout, rng)
    keys, values, slots = _tokens(layout, [3, -1, 17], rng)
    for a, b in zip(_call(op, caches, keys, values, slots), _call(layout, caches, keys, values, slots), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_under_jit_slots_past_the_end_write_nothing(layout):
    rng = np.random.default_rng(3)
    caches = _caches(layout, rng)
    n = PAGES * PAGE_SIZE
    keys, values, slots = _tokens(layout, [5, n, n + PAGE_SIZE, 2**30], rng)
    got = jax.jit(lambda s: _call(layout, caches, keys, values, s))(slots)
    want = _naive_write(layout, caches, keys[:1], values[:1], slots[:1])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), w)


@pytest.mark.parametrize(
    ("slots", "words"),
    [
        ([3, PAGES * PAGE_SIZE], r"slot_mapping must be < num_pages \* page_size = 24.*slot_mapping\[1\] = 24"),
        ([3, -1, 3], r"slot_mapping must not repeat a slot.*repeated slots = 1"),
    ],
)
def test_concrete_bad_slots_raise(slots, words):
    rng = np.random.default_rng(4)
    caches = _caches("blocks_tokens_heads", rng)
    keys, values, slots = _tokens("blocks_tokens_heads", slots, rng)
    with pytest.raises(ValueError, match=words):
        _call("blocks_tokens_heads", caches, keys, values, slots)
    _call("blocks_tokens_heads", caches, keys[:2], values[:2], np.array([-1, -1], np.int32))  # padding may repeat


def test_traced_bad_slots_raise_with_checks_on():
    rng = np.random.default_rng(5)
    caches = _caches("interleaved", rng)
    keys, values, slots = _tokens("interleaved", [1, 99], rng)
    f = jax.jit(lambda s: _call("interleaved", caches, keys, values, s))
    with ejkernel.checks(), pytest.raises(Exception, match=r"slot_mapping must be < num_pages \* page_size = 24"):
        jax.block_until_ready(f(slots))


_KC = jnp.zeros((PAGES, PAGE_SIZE, HK, D))
_KV = jnp.zeros((PAGES, PAGE_SIZE, 2 * HK, D))
_K = jnp.zeros((3, HK, D))
_S = jnp.array([0, 1, 2], jnp.int32)


@pytest.mark.parametrize(
    ("args", "kw", "error", "words"),
    [
        ((_KV, _K, _K, _S), {"layout": "paged"}, ValueError, r"layout must be one of 'interleaved'.*got 'paged'"),
        ((_KV, _K, _K, _S), {"layout": 3}, TypeError, r"layout must be a str"),
        ((_KV, _K, _K, _S), {"layout": "page_attention"}, ValueError, r"'page_attention' is ambiguous"),
        ((_KV, _K, _K, _S), {"layout": "blocks_tokens_heads"}, TypeError, r"takes cache=\(key_cache, value_cache\)"),
        (((_KC, _KC), _K, _K, _S), {"layout": "interleaved"}, TypeError, r"takes cache=kv_pages, one"),
        (((_KC,), _K, _K, _S), {"layout": "blocks_tokens_heads"}, TypeError, r"a pair of arrays; got a tuple of 1"),
        (
            (jnp.zeros((PAGES, PAGE_SIZE, 3, D)), _K, _K, _S),
            {"layout": "interleaved"},
            ValueError,
            r"kv_pages' head axis must be even.*f32\[6,4,3,8\]",
        ),
        (
            (_KV[0], _K, _K, _S),
            {"layout": "interleaved"},
            ValueError,
            r"kv_pages must be 4-D \[num_pages, page_size, 2\*num_kv_heads, head_dim\], got shape \(4, 4, 8\)",
        ),
        (
            ((_KC, jnp.zeros((PAGES + 1, PAGE_SIZE, HK, D))), _K, _K, _S),
            {"layout": "blocks_tokens_heads"},
            ValueError,
            r"key_cache and value_cache must agree.*value_cache f32\[7,4,2,8\]",
        ),
        (
            (_KV, jnp.zeros((3, HK + 1, D)), _K, _S),
            {"layout": "interleaved"},
            ValueError,
            r"keys must be \[num_tokens, num_kv_heads, head_dim\] = \[3, 2, 8\].*got keys f32\[3,3,8\]",
        ),
        (
            (_KV, _K, _K, _S[:2]),
            {"layout": "interleaved"},
            ValueError,
            r"keys must be .* = \[2, 2, 8\] \(num_tokens from slot_mapping i32\[2\]",
        ),
        (
            ((_KC, _KC), _K, jnp.zeros((3, HK, D + 1)), _S),
            {"layout": "blocks_tokens_heads"},
            ValueError,
            r"values must be .* = \[3, 2, 8\].*value_cache f32\[6,4,2,8\]",
        ),
        (
            (_KV, _K.astype(jnp.bfloat16), _K, _S),
            {"layout": "interleaved"},
            TypeError,
            r"keys must have the dtype of kv_pages, float32.*got keys bf16\[3,2,8\]",
        ),
        (
            (_KV, _K, _K, _S.astype(jnp.float32)),
            {"layout": "interleaved"},
            TypeError,
            r"slot_mapping must have an integer dtype",
        ),
        ((_KV, _K, _K, _S[None]), {"layout": "interleaved"}, ValueError, r"slot_mapping must be 1-D \[num_tokens\]"),
        ((_KV, _K, _K, [0, 1, 2]), {"layout": "interleaved"}, TypeError, r"slot_mapping must be an array"),
        ((_KV, _K, _K, _S), {"layout": "interleaved", "donate": 1}, TypeError, r"donate must be a bool"),
        (
            ((_KC, _KC), _K, _K, _S),
            {"layout": "blocks_tokens_heads", "donate": True},
            ValueError,
            r"one array as both key_cache and value_cache would donate it twice",
        ),
    ],
)
def test_bad_inputs_are_named(args, kw, error, words):
    with pytest.raises(error, match=r"write_kv_pages: .*" + words):
        ejkernel.write_kv_pages(*args, **kw)


def _copies_of(hlo: str, size: int) -> list[str]:
    """The instructions of ``hlo`` that copy ``size`` elements or more."""
    out = []
    for line in hlo.splitlines():
        m = re.search(r"= \w+\[([\d,]*)\]\{[^}]*\} copy(?:-start)?\(", line)
        if m and np.prod([int(x) for x in m.group(1).split(",") if x]) >= size:
            out.append(line.strip())
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_donated_cache_is_updated_in_place_under_jit(layout):
    rng = np.random.default_rng(6)
    caches = [jnp.asarray(c) for c in _caches(layout, rng)]
    keys, values, slots = _tokens(layout, [0, 9, -1], rng)

    def step(*cs):
        return _call(layout, list(cs), keys, values, slots)

    donated = jax.jit(step, donate_argnums=tuple(range(len(caches)))).lower(*caches).compile().as_text()
    aliased = re.search(r"input_output_alias=\{ (.*?) \}", donated)
    assert aliased, donated[:2000]
    for i in range(len(caches)):
        assert re.search(rf"\({i}, \{{\}}, (may|must)-alias\)", aliased.group(1)), aliased.group(1)
    assert not _copies_of(donated, caches[0].size // 2)
    # Not donated, XLA copies the cache before the scatter: the search above finds such a copy.
    assert _copies_of(jax.jit(step).lower(*caches).compile().as_text(), caches[0].size // 2)


@pytest.mark.parametrize("donate", [False, True])
def test_eager_donation_is_opt_in(donate):
    rng = np.random.default_rng(7)
    caches = [jnp.asarray(c) for c in _caches("blocks_heads_tokens", rng)]
    want = [np.asarray(c) for c in caches]
    keys, values, slots = _tokens("blocks_heads_tokens", [4, 11], rng)
    want = _naive_write("blocks_heads_tokens", want, keys, values, slots)
    got = _call("blocks_heads_tokens", caches, keys, values, slots, donate=donate)
    for g, w, c in zip(got, want, caches, strict=True):
        np.testing.assert_array_equal(np.asarray(g), w)
        assert c.is_deleted() == donate


def _dense_attention(q, k, v):
    """Causal (bottom-right) attention of ``q[n, h, d]`` over ``k, v[L, hk, d]``, NumPy float64."""
    n, h, d = q.shape
    group = h // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    logits = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(d)
    pos = k.shape[0] - n + np.arange(n)[:, None]
    logits = np.where(np.arange(k.shape[0])[None] <= pos, logits, -np.inf)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    return np.einsum("hqk,khd->qhd", p / p.sum(-1, keepdims=True), v)


def test_ragged_page_attention_v2_reads_what_was_written():
    """Two steps of a batch: a prefill of every prompt, then a step mixing a decode with a prefill
    chunk, each writing its tokens first; the op over the cache matches dense attention of the
    tokens, and its reference over the same cache."""
    rng = np.random.default_rng(8)
    h, hk, d, ps, pages = 4, 2, 16, 4, 16
    kv = jnp.full((pages, ps, 2 * hk, d), jnp.nan)  # never-written slots are NaN: reading one shows
    tables = rng.permutation(pages)[:12].reshape(3, 4).astype(np.int32)
    keys_of = [np.zeros((0, hk, d), np.float32) for _ in range(3)]  # each sequence's tokens so far
    values_of = list(keys_of)
    lens = np.zeros(3, np.int32)
    for q_lens in ([5, 9, 3], [1, 4, 0]):
        qsl = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
        total = int(qsl[-1]) + 2  # two padding rows
        q = rng.standard_normal((total, h, d)).astype(np.float32)
        k = rng.standard_normal((total, hk, d)).astype(np.float32)
        v = rng.standard_normal((total, hk, d)).astype(np.float32)
        slots = np.full(total, -1, np.int32)
        for s, n in enumerate(q_lens):
            pos = lens[s] + np.arange(n)
            rows = slice(qsl[s], qsl[s + 1])
            slots[rows] = tables[s, pos // ps] * ps + pos % ps
            keys_of[s] = np.concatenate([keys_of[s], k[rows]])
            values_of[s] = np.concatenate([values_of[s], v[rows]])
        lens = lens + np.asarray(q_lens, np.int32)
        kv = ejkernel.write_kv_pages(kv, k, v, slots, layout="ragged_page_attention_v2")
        args = (q, kv, lens, tables, qsl, 3)
        out = np.asarray(ejkernel.ragged_page_attention_v2(*args, platform="xla"))
        for s in range(3):
            rows = slice(qsl[s], qsl[s + 1])
            want = _dense_attention(q[rows], keys_of[s], values_of[s])
            np.testing.assert_allclose(out[rows], want, atol=2e-5, rtol=2e-5)
        assert not out[qsl[-1] :].any()
        np.testing.assert_allclose(out, np.asarray(ragged_page_attention_v2_reference(*args)), atol=2e-5, rtol=2e-5)
