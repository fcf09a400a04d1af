"""``prefill_page_attention`` as engines call it: eager and under ``jit`` against the reference,
a chunk equal to the last rows of the whole context's prefill, bad inputs rejected with the
argument and shapes named, and the XLA scan's memory bounded by one block of pages (no
``[chunk, context]`` logits)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.ops.prefill_page_attention import PrefillPageAttentionConfig
from ejkernel.ops.prefill_page_attention.cases import PrefillPageCase
from ejkernel.ops.prefill_page_attention.reference import prefill_page_attention_reference

_NAMES = ("query", "key_cache", "value_cache", "context_len", "page_indices")
CFG = PrefillPageAttentionConfig(block_k=16)
ATOL = 2e-5  # float32: the kernel and the reference differ only by summation order


def _inputs(**kw):
    return PrefillPageCase("api", chunk=10, context=37, h=4, hk=2, **kw).inputs(4)


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_matches_reference(mode):
    kw = _inputs(window=11, soft_cap=5.0)
    arrays = [kw.pop(n) for n in _NAMES]

    def f(*a):
        return ejkernel.prefill_page_attention(*a, **kw, platform="xla", cfg=CFG)

    out = (jax.jit(f) if mode == "jit" else f)(*arrays)
    # The reference under jit (index arrays closed over): eager, it dispatches op by op.
    ref = jax.jit(lambda q, k, v: prefill_page_attention_reference(q, k, v, *arrays[3:], **kw))(*arrays[:3])
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=ATOL, rtol=ATOL)
    assert np.all(np.isfinite(np.asarray(out)))


def test_a_chunk_is_the_last_rows_of_the_whole_context():
    kw = _inputs()
    whole = {**kw, "query": jnp.concatenate([jnp.ones((27, 4, 32)), kw["query"]])}
    f = jax.jit(lambda q, k, v, n, p: ejkernel.prefill_page_attention(q, k, v, n, p, platform="xla", cfg=CFG))
    chunk = f(*(kw[n] for n in _NAMES))
    rows = f(*(whole[n] for n in _NAMES))[27:]
    np.testing.assert_allclose(np.asarray(chunk), np.asarray(rows), atol=ATOL, rtol=ATOL)


def _call(**over):
    return ejkernel.prefill_page_attention(**{**_inputs(), **over}, platform="xla")


@pytest.mark.parametrize(
    ("over", "error", "words"),
    [
        ({"context_len": jnp.array([37, 37], jnp.int32)}, ValueError, r"context_len must be \[1\].*\(2,\)"),
        ({"context_len": jnp.array([9], jnp.int32)}, ValueError, r"context_len.*chunk_size = 10"),
        ({"context_len": jnp.array([60], jnp.int32)}, ValueError, r"context_len.*num_pages \* page_size = 56"),
        ({"page_indices": jnp.array([0, 1, 2, 99, 3, 4, 5], jnp.int32)}, ValueError, r"page_indices.*pages"),
        (
            {"key_cache": jnp.zeros((3, 8, 8, 32)), "value_cache": jnp.zeros((3, 8, 8, 32))},
            ValueError,
            r"num_heads \(4\) must be a multiple of num_kv_heads \(3\)",
        ),
        ({"value_cache": jnp.zeros((2, 9, 8, 32))}, ValueError, r"value_cache must have total_num_pages = 8"),
        ({"sliding_window": 0}, ValueError, r"sliding_window must be >= 1"),
        ({"mask_value": "big"}, TypeError, r"mask_value"),
        ({"attn_logits_soft_cap": -1.0}, ValueError, r"attn_logits_soft_cap must be > 0"),
    ],
)
def test_bad_inputs_are_named(over, error, words):
    with pytest.raises(error, match=words):
        _call(**over)


def test_mask_value_does_not_change_the_result():
    kw = {**_inputs(), "platform": "xla", "cfg": CFG}
    a = ejkernel.prefill_page_attention(**kw, mask_value=-1.0)
    b = ejkernel.prefill_page_attention(**kw)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_xla_memory_is_one_block():
    chunk, h, hk, d, ps, pages = 64, 2, 1, 8, 16, 64  # a 64-token chunk at the end of a 1024 context
    q = jnp.ones((chunk, h, d))
    kc = vc = jnp.ones((hk, pages, ps, d))
    cfg = PrefillPageAttentionConfig(block_k=2 * ps)

    def f(q, kc, vc):
        n, idx = jnp.array([pages * ps], jnp.int32), jnp.arange(pages, dtype=jnp.int32)
        return ejkernel.prefill_page_attention(q, kc, vc, n, idx, platform="xla", cfg=cfg)

    hlo = jax.jit(f).lower(q, kc, vc).compile().as_text()
    big = []
    for line in hlo.splitlines():
        m = re.match(r"\s*(?:ROOT )?%\S+ = \w+\[([\d,]*)\]\S* ([\w-]+)\(", line)
        if m is None or m.group(2) in ("parameter", "bitcast", "get-tuple-element", "constant"):
            continue
        dims = [int(n) for n in m.group(1).split(",") if n]
        if dims and int(np.prod(dims)) >= chunk * h * pages * ps // 2:  # half the whole context's logits
            big.append(line.strip())
    assert not big, big
