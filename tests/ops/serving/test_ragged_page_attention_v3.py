"""``ragged_page_attention_v3`` as engines call it: eager (the cache consumed, as the TPU kernel's
``donate_argnames`` does) and under ``jit`` with a traced ``distribution`` against the
reference; the cache written only at the new tokens' slots, bit for bit elsewhere (NaN
included); under ``jit(donate_argnums=...)`` the cache aliased to the output and never copied;
the packed layout as documented; bad inputs rejected with the argument and shapes named; a
quantized cache declined."""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.errors import UnsupportedError
from ejkernel.ops import record_dispatches
from ejkernel.ops.ragged_page_attention_v3 import RaggedPageAttentionv3Config
from ejkernel.ops.ragged_page_attention_v3.cases import RaggedPageV3Case
from ejkernel.ops.ragged_page_attention_v3.reference import ragged_page_attention_v3_reference

_NAMES = ("queries", "keys", "values", "kv_cache", "kv_lens", "block_tables", "query_start_loc", "distribution")
CFG = RaggedPageAttentionv3Config(num_kv_pages_per_block=2)


def _case(**kw):
    return RaggedPageV3Case("api", seqs=((1, 20), (6, 30), (1, 3)), max_num_seqs=5, pad_tokens=3, **kw)


def _split(kw):
    kw = dict(kw)
    return [kw.pop(n) for n in _NAMES], kw


def _bits(x):
    x = np.asarray(x)
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


def _new_slots(arrays):
    """(page, slot) of each live row's new token, from the concrete index arrays."""
    _, _, _, cache, lens, tables, qsl, dist = (np.asarray(a) for a in arrays)
    ps, tables = cache.shape[1], tables.reshape(lens.shape[0], -1)
    out = []
    for i in range(int(dist[2])):
        q_len = int(qsl[i + 1] - qsl[i])
        for j in range(q_len):
            p = int(lens[i]) - q_len + j
            out.append((int(qsl[i]) + j, int(tables[i, p // ps]), p % ps))
    return out


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_matches_reference_with_a_traced_distribution(mode):
    arrays, kw = _split(_case(window=7, sinks=2, soft_cap=5.0).inputs(5))
    ref_out, ref_cache = jax.jit(lambda q, k, v, c: ragged_page_attention_v3_reference(q, k, v, c, *arrays[4:], **kw))(
        *arrays[:4]
    )

    def f(*a):
        return ejkernel.ragged_page_attention_v3(*a, **kw, platform="xla", cfg=CFG)

    out, cache = (jax.jit(f) if mode == "jit" else f)(*arrays)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref_out), atol=2e-5, rtol=2e-5)
    assert not np.any(np.asarray(out[8:]))  # the padding rows
    assert np.all(np.isfinite(np.asarray(out)))
    assert np.array_equal(_bits(cache), _bits(ref_cache))
    # An eager call consumes the cache it was given (donated to the updated one); jit without
    # donate_argnums leaves it.
    assert arrays[3].is_deleted() == (mode == "eager")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_writes_only_the_new_tokens_slots(dtype):
    arrays, kw = _split(_case(d=40, dtype=dtype).inputs(2))
    before = np.array(arrays[3])
    slots = _new_slots(arrays)
    keys, values = np.asarray(arrays[1]), np.asarray(arrays[2])
    _, cache = ejkernel.ragged_page_attention_v3(*arrays, **kw, platform="xla", cfg=CFG)
    after = np.asarray(cache)
    written = np.zeros(before.shape[:2], bool)
    pack, d = before.shape[3], keys.shape[-1]
    for row, page, slot in slots:
        written[page, slot] = True
        combined = after[page, slot].reshape(-1, before.shape[-1])  # [combined heads, head_dim_padded]
        assert np.array_equal(combined[0::2, :d], keys[row]) and np.array_equal(combined[1::2, :d], values[row])
        assert not np.any(combined[:, d:])  # the padding lanes, NaN before the call, are zero
    assert pack == (1 if dtype == "float32" else 2) and len(slots) == 8
    assert np.isnan(before[written].astype(np.float32)).all()  # the cases start the new slots as NaN
    assert np.array_equal(_bits(after[~written]), _bits(before[~written]))  # NaN included


def test_donated_cache_is_aliased_and_never_copied():
    case = RaggedPageV3Case("big-cache", seqs=((1, 20), (6, 30), (1, 3)), max_num_seqs=5, pad_tokens=3, extra_pages=200)
    arrays, kw = _split(case.inputs(0))
    shape = ",".join(str(n) for n in arrays[3].shape)

    def f(*a):
        return ejkernel.ragged_page_attention_v3(*a, **kw, platform="xla", cfg=CFG)

    def cache_sized_ops(donate):
        hlo = jax.jit(f, donate_argnums=donate).lower(*arrays).compile().as_text()
        ops = []
        for line in hlo.splitlines():
            m = re.match(rf"\s*(?:ROOT )?%\S+ = \w+\[{shape}\]\S* ([\w-]+)\(", line)
            in_place = m and (m.group(1) == "scatter" or (m.group(1) == "fusion" and "scatter" in line))
            if m and not in_place and m.group(1) not in ("parameter", "bitcast", "get-tuple-element"):
                ops.append(line.strip()[:160])
        return hlo, ops

    hlo, ops = cache_sized_ops(3)
    assert re.search(r"input_output_alias=\{ \{1\}: \(3, \{\}", hlo), "the cache (argument 3) is not output 1's buffer"
    assert not ops, ops
    # Without donation XLA must keep the caller's cache: the check above sees that copy.
    assert cache_sized_ops(())[1]


def test_eager_calls_choose_outside_the_compiled_run():
    """The eager (donating) call compiles only the run: each call's config is chosen anew and recorded."""
    with record_dispatches() as log:
        for n in (1, 3):
            arrays, kw = _split(_case().inputs(0))
            ejkernel.ragged_page_attention_v3(
                *arrays, **kw, platform="xla", cfg=RaggedPageAttentionv3Config(num_kv_pages_per_block=n)
            )
    assert [d.config.num_kv_pages_per_block for d in log] == [1, 3]


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.int8])
def test_packed_layout(dtype):
    pack = {jnp.float32: 1, jnp.bfloat16: 2, jnp.int8: 4}[dtype]
    shape = ejkernel.ragged_page_attention_v3_cache_shape(3, 4, 3, 72, dtype)
    assert shape == (3, 4, -(-6 // pack), pack, 128)
    rng = np.random.default_rng(0)
    k, v = (jnp.asarray(rng.integers(1, 100, (3, 4, 3, 72)), dtype) for _ in range(2))
    cache = ejkernel.ragged_page_attention_v3_pack_cache(k, v)
    assert cache.shape == shape and cache.dtype == dtype
    c = np.asarray(cache)
    for head in range(6):  # combined head c: the key (even) or value (odd) of kv head c // 2
        want = np.asarray(k if head % 2 == 0 else v)[:, :, head // 2]
        assert np.array_equal(c[:, :, head // pack, head % pack, :72], want)
    assert not c[..., 72:].any()
    assert not c.reshape(3, 4, -1, 128)[:, :, 6:].any()  # combined-head padding (8-bit)
    k2, v2 = ejkernel.ragged_page_attention_v3_unpack_cache(cache, 3, 72)
    assert np.array_equal(np.asarray(k2), np.asarray(k)) and np.array_equal(np.asarray(v2), np.asarray(v))


def _call(**over):
    kw = _case().inputs(1)
    kw.update(over)
    return ejkernel.ragged_page_attention_v3(**kw, platform="xla")


@pytest.mark.parametrize(
    ("over", "error", "words"),
    [
        (
            {"kv_cache": jnp.zeros((18, 8, 2, 2, 128))},
            ValueError,
            r"kv_packing axis \(dim 3\) must be 1.*\(18, 8, 2, 2, 128\)",
        ),
        (
            {"kv_cache": jnp.zeros((18, 8, 4, 1, 96))},
            ValueError,
            r"head_dim_padded \(dim 4\) must be a multiple of 128",
        ),
        (
            {"kv_cache": jnp.zeros((18, 8, 3, 1, 128))},
            ValueError,
            r"2 kv heads.*in 4 packed rows \(dim 2\).*\(18, 8, 3, 1, 128\)",
        ),
        ({"kv_cache": jnp.zeros((18, 8, 4, 128))}, ValueError, r"kv_cache must be 5-D"),
        (
            {"kv_cache": jnp.zeros((18, 8, 2, 2, 128), jnp.bfloat16)},
            TypeError,
            r"kv_cache \(bfloat16\) must have the dtype of queries",
        ),
        ({"keys": jnp.zeros((11, 3, 32))}, ValueError, r"keys"),
        ({"values": jnp.zeros((11, 2, 32), jnp.bfloat16)}, TypeError, r"values \(bfloat16\) must have the dtype"),
        ({"block_tables": jnp.zeros((5, 4), jnp.int32)}, ValueError, r"block_tables must be 1-D"),
        ({"block_tables": jnp.zeros((21,), jnp.int32)}, ValueError, r"block_tables must be flattened.*\(21,\)"),
        ({"distribution": jnp.array([0, 3], jnp.int32)}, ValueError, r"distribution must be \[3\].*\(2,\)"),
        (
            {"distribution": jnp.array([2, 1, 3], jnp.int32)},
            ValueError,
            r"distribution must be 0 <= decode_end <= prefill_end",
        ),
        (
            {"distribution": jnp.array([0, 0, 6], jnp.int32)},
            ValueError,
            r"distribution.*max_num_seqs = 5.*got distribution\[2\] = 6",
        ),
        (
            {"query_start_loc": jnp.array([0, 1, 7], jnp.int32)},
            ValueError,
            r"query_start_loc must be \[max_num_seqs \+ 1\]",
        ),
        (
            {"kv_lens": jnp.array([20, 5, 3, 0, 0], jnp.int32)},
            ValueError,
            r"kv_lens.*at least each sequence's query count",
        ),
        ({"block_tables": jnp.full((20,), 99, jnp.int32)}, ValueError, r"block_tables.*pages"),
        ({"vmem_limit_bytes": 0}, ValueError, r"vmem_limit_bytes"),
    ],
)
def test_bad_inputs_are_named(over, error, words):
    with pytest.raises(error, match=words):
        _call(**over)


@pytest.mark.parametrize(
    "over",
    [
        {"k_scale": 0.5},
        {"q_scale": 2.0, "v_scale": 0.5},
        {"kv_cache": jnp.zeros((23, 8, 1, 4, 128), jnp.float8_e4m3fn)},
    ],
    ids=["k_scale", "q_v_scales", "fp8_cache"],
)
def test_quantized_cache_is_declined(over):
    with pytest.raises(UnsupportedError, match="fp8/quantized KV cache is not supported yet"):
        _call(**over)


def test_the_bench_loop_carries_the_cache_in_place():
    """``ejkernel bench ragged_page_attention_v3`` times steps that pass the updated cache on
    (``BenchCase.feedback``): the loop must update it in place, as a donating serving loop does,
    not copy it per step (the time would then be the copy's); without the feedback it is copied."""
    import argparse

    from ejkernel.ops.ragged_page_attention_v3.bench import BENCH
    from ejkernel.ops.timing import looped

    from .test_kv_cache import _copies_of

    ns = argparse.Namespace(
        decodes=2, context=200, chunks=1, chunk=8, chunk_context=40, h=4, hk=2, d=128, page_size=16, repeats=1
    )
    (case,) = BENCH.cases(ns, "float32", peers=False, check=False)
    assert case.feedback == {3: 1}
    fn = functools.partial(ejkernel.ragged_page_attention_v3, platform="xla", **case.options)
    cache = case.arrays[3]

    shape = f"[{','.join(map(str, cache.shape))}]"

    def copies_per_step(feedback):
        hlo = looped(fn, 2, feedback).lower(*case.arrays).compile().as_text()
        # The program's argument is copied once into the loop (it is not donated): not per step.
        copies = [c for c in _copies_of(hlo, cache.size) if shape in c.split("copy(")[0]]
        return [c for c in copies if not re.search(r"copy\(%(args|Arg|param)", c)]

    assert not copies_per_step(case.feedback)
    assert copies_per_step(None)
