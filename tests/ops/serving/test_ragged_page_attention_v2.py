"""``ragged_page_attention_v2`` as engines call it: eager and under ``jit`` with a traced
``num_seqs`` against the reference, bad inputs rejected with the argument and shapes named, and
the XLA scan's memory bounded by one block of pages (no ``[tokens, context]`` logits)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.ops.ragged_page_attention_v2 import RaggedPageAttentionv2Config
from ejkernel.ops.ragged_page_attention_v2.cases import RaggedPageCase
from ejkernel.ops.ragged_page_attention_v2.reference import ragged_page_attention_v2_reference

_NAMES = ("queries", "kv_pages", "context_lens", "block_tables", "query_start_loc", "num_seqs")


def _inputs(**kw):
    case = RaggedPageCase("api", seqs=((1, 20), (6, 30), (1, 3)), max_num_seqs=5, pad_tokens=3, **kw)
    return case.inputs(5)


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_matches_reference_with_a_traced_num_seqs(mode):
    kw = _inputs(window=7, sinks=2, soft_cap=5.0)
    arrays = [kw.pop(n) for n in _NAMES]
    kw["softmax_aux"] = kw.pop("softmax_aux")
    cfg = RaggedPageAttentionv2Config(num_kv_pages_per_block=2)

    def f(*a):
        return ejkernel.ragged_page_attention_v2(*a, **kw, platform="xla", cfg=cfg)

    out = (jax.jit(f) if mode == "jit" else f)(*arrays)
    # The reference under jit (index arrays closed over): eager, it dispatches op by op.
    ref = jax.jit(lambda q, kv: ragged_page_attention_v2_reference(q, kv, *arrays[2:], **kw))(*arrays[:2])
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=2e-5, rtol=2e-5)
    assert not np.any(np.asarray(out[8:]))  # the padding rows
    assert np.all(np.isfinite(np.asarray(out)))


def _call(**over):
    return ejkernel.ragged_page_attention_v2(**{**_inputs(), **over}, platform="xla")


@pytest.mark.parametrize(
    ("over", "error", "words"),
    [
        ({"kv_pages": jnp.zeros((18, 8, 3, 32))}, ValueError, r"head axis must be even.*\(18, 8, 3, 32\)"),
        ({"kv_pages": jnp.zeros((18, 8, 6, 32))}, ValueError, r"4 heads, not a multiple of kv_pages' 3 kv heads"),
        (
            {"query_start_loc": jnp.array([0, 1, 7], jnp.int32)},
            ValueError,
            r"query_start_loc must be \[num_seqs \+ 1\]",
        ),
        ({"num_seqs": jnp.array([3, 3], jnp.int32)}, ValueError, r"num_seqs must be an int"),
        ({"num_seqs": 6}, ValueError, r"num_seqs.*max_num_seqs = 5"),
        (
            {"query_start_loc": jnp.array([0, 1, 0, 8, 8, 8], jnp.int32)},
            ValueError,
            r"query_start_loc.*not decrease",
        ),
        (
            {"context_lens": jnp.array([20, 5, 3, 0, 0], jnp.int32)},
            ValueError,
            r"context_lens.*at least each sequence's query count",
        ),
        ({"block_tables": jnp.full((5, 4), 99, jnp.int32)}, ValueError, r"block_tables.*pages"),
    ],
)
def test_bad_inputs_are_named(over, error, words):
    with pytest.raises(error, match=words):
        _call(**over)


def test_xla_memory_is_one_block():
    tokens, h, hk, d, ps, pages = 64, 2, 1, 8, 16, 64  # one sequence: a 64-token chunk of a 1024 context
    q = jnp.ones((tokens, h, d))
    kv = jnp.ones((pages, ps, 2 * hk, d))
    tables = jnp.arange(pages, dtype=jnp.int32)[None]
    cfg = RaggedPageAttentionv2Config(num_kv_pages_per_block=2)

    def f(q, kv):
        lens, qsl = jnp.array([pages * ps], jnp.int32), jnp.array([0, tokens], jnp.int32)
        return ejkernel.ragged_page_attention_v2(q, kv, lens, tables, qsl, 1, platform="xla", cfg=cfg)

    hlo = jax.jit(f).lower(q, kv).compile().as_text()
    big = []
    for line in hlo.splitlines():
        m = re.match(r"\s*(?:ROOT )?%\S+ = \w+\[([\d,]*)\]\S* ([\w-]+)\(", line)
        if m is None or m.group(2) in ("parameter", "bitcast", "get-tuple-element", "constant"):
            continue
        dims = [int(n) for n in m.group(1).split(",") if n]
        if dims and int(np.prod(dims)) >= tokens * h * pages * ps // 2:  # half the whole context's logits
            big.append(line.strip())
    assert not big, big
