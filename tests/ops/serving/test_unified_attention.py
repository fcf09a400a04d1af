"""``unified_attention`` as vLLM-style engines call it: eager and under ``jit`` against the
reference, the log-sum-exp (``-inf`` on padding rows) and a cascade merge (attention over two
halves of each context, merged by their log-sum-exps, is attention over the whole), bad inputs
rejected with the argument and shapes named, and the XLA scan's memory bounded by one block of
pages (no ``[tokens, context]`` logits)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.ops.unified_attention import UnifiedAttentionConfig
from ejkernel.ops.unified_attention.cases import UnifiedCase
from ejkernel.ops.unified_attention.reference import unified_attention_reference

_ARRAYS = ("queries", "key_cache", "value_cache", "kv_lens", "block_tables", "query_start_loc")
_OPTIONAL = ("alibi_slopes", "qq_bias", "softmax_aux")
CFG = UnifiedAttentionConfig(block_dim=16)
ATOL = 2e-5  # float32: the kernel and the reference differ only by summation order


def _inputs(**kw):
    return UnifiedCase("api", seqs=((1, 20), (6, 30), (0, 4), (1, 3)), pad_tokens=3, **kw).inputs(5)


def _split(kw):
    arrays = [kw.pop(n) for n in _ARRAYS] + [kw.pop(n, None) for n in _OPTIONAL]
    return arrays, kw


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_matches_reference(mode):
    arrays, kw = _split(_inputs(window=7, sinks=True, soft_cap=5.0, alibi=True, qq_bias=True, return_lse=True))

    def f(*a):
        return ejkernel.unified_attention(*a, **kw, seq_threshold_3d=2, platform="xla", cfg=CFG)

    out, lse = (jax.jit(f) if mode == "jit" else f)(*arrays)
    # The reference under jit (index arrays closed over): eager, it dispatches op by op.
    ref, ref_lse = jax.jit(lambda q, k, v, *opt: unified_attention_reference(q, k, v, *arrays[3:6], *opt, **kw))(
        *arrays[:3], *arrays[6:]
    )
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=ATOL, rtol=ATOL)
    np.testing.assert_allclose(np.asarray(lse), np.asarray(ref_lse), atol=ATOL, rtol=ATOL)
    assert lse.dtype == jnp.float32 and lse.shape == out.shape[:2]
    assert not np.any(np.asarray(out[8:])) and np.all(np.asarray(lse[8:]) == -np.inf)  # the padding rows
    assert np.all(np.isfinite(np.asarray(out))) and np.all(np.isfinite(np.asarray(lse[:8])))


def test_cascade_merge_by_lse_is_the_whole_attention():
    # Two sequences (a decode and a 6-token chunk); each context split at 16 tokens (2 blocks).
    kw = UnifiedCase("cascade", seqs=((1, 40), (6, 37)), h=4, hk=2, soft_cap=8.0, return_lse=True).inputs(6)
    q, kc, vc, lens, tables, qsl = (kw[n] for n in _ARRAYS)
    split = 2 * 8
    run = jax.jit(
        lambda q, lens, tables, qsl: ejkernel.unified_attention(
            q, kc, vc, lens, tables, qsl, logits_soft_cap=8.0, return_lse=True, platform="xla", cfg=CFG
        )
    )
    whole, whole_lse = run(q, lens, tables, qsl)
    # The first 16 tokens: every query is past them, so each row is a decode over a 16-token context.
    rows = jnp.array([0, 1, 1, 1, 1, 1, 1])
    head, head_lse = run(q, jnp.full((7,), split, jnp.int32), tables[rows], jnp.arange(8, dtype=jnp.int32))
    # The rest: the same sequences with their first two blocks dropped (positions shift alike).
    tail, tail_lse = run(q, lens - split, tables[:, 2:], qsl)
    lse = jnp.logaddexp(head_lse, tail_lse)
    merged = jnp.exp(head_lse - lse)[..., None] * head + jnp.exp(tail_lse - lse)[..., None] * tail
    np.testing.assert_allclose(np.asarray(merged), np.asarray(whole), atol=ATOL, rtol=ATOL)
    np.testing.assert_allclose(np.asarray(lse), np.asarray(whole_lse), atol=ATOL, rtol=ATOL)


def _call(**over):
    return ejkernel.unified_attention(**{**_inputs(), **over}, platform="xla")


@pytest.mark.parametrize(
    ("over", "error", "words"),
    [
        (
            {"query_start_loc": jnp.array([0, 1, 7], jnp.int32)},
            ValueError,
            r"query_start_loc must be \[num_seqs \+ 1\].*kv_lens \(4,\)",
        ),
        ({"causal": False}, ValueError, r"causal=False is not supported"),
        ({"sliding_window": 0}, ValueError, r"sliding_window must be >= 1"),
        ({"seq_threshold_3d": 0}, ValueError, r"seq_threshold_3d must be >= 1"),
        ({"alibi_slopes": jnp.ones((3,))}, ValueError, r"alibi_slopes must have num_heads = 4.*\(3,\)"),
        ({"softmax_aux": jnp.ones((4, 1))}, ValueError, r"softmax_aux must be 1-D"),
        ({"qq_bias": jnp.zeros((6, 5))}, ValueError, r"qq_bias must be square .*\(6, 5\)"),
        ({"qq_bias": jnp.zeros((5, 5))}, ValueError, r"query_start_loc.*qq_bias has rows \(5\)"),
        (
            {"key_cache": jnp.zeros((9, 8, 3, 32)), "value_cache": jnp.zeros((9, 8, 3, 32))},
            ValueError,
            r"num_heads \(4\) must be a multiple of num_kv_heads \(3\)",
        ),
        ({"kv_lens": jnp.array([20, 5, 4, 3], jnp.int32)}, ValueError, r"kv_lens.*at least each sequence's query"),
        (
            {"block_tables": jnp.full((4, 4), 99, jnp.int32)},
            ValueError,
            r"block_tables must index the cache's 12 pages",
        ),
        ({"query_start_loc": jnp.array([0, 1, 7, 7, 20], jnp.int32)}, ValueError, r"query_start_loc.*11 tokens"),
    ],
)
def test_bad_inputs_are_named(over, error, words):
    with pytest.raises(error, match=words):
        _call(**over)


def test_xla_memory_is_one_block():
    tokens, h, hk, d, bs, blocks = 64, 2, 1, 8, 16, 64  # one sequence: a 64-token chunk of a 1024 context
    q = jnp.ones((tokens, h, d))
    kc = vc = jnp.ones((blocks, bs, hk, d))
    tables = jnp.arange(blocks, dtype=jnp.int32)[None]
    cfg = UnifiedAttentionConfig(block_dim=2 * bs)

    def f(q, kc, vc):
        lens, qsl = jnp.array([blocks * bs], jnp.int32), jnp.array([0, tokens], jnp.int32)
        return ejkernel.unified_attention(
            q, kc, vc, lens, tables, qsl, jnp.ones((h,)), jnp.zeros((tokens, tokens)), platform="xla", cfg=cfg
        )

    hlo = jax.jit(f).lower(q, kc, vc).compile().as_text()
    big = []
    for line in hlo.splitlines():
        m = re.match(r"\s*(?:ROOT )?%\S+ = \w+\[([\d,]*)\]\S* ([\w-]+)\(", line)
        if m is None or m.group(2) in ("parameter", "bitcast", "get-tuple-element", "constant"):
            continue
        dims = [int(n) for n in m.group(1).split(",") if n]
        if dims and int(np.prod(dims)) >= tokens * h * blocks * bs // 2:  # half the whole context's logits
            big.append(line.strip())
    assert not big, big
