"""``ragged_decode_attention`` as users call it: eager and under ``jit`` against the reference, bad
inputs rejected with the argument and shapes named, and the XLA scan's memory bounded by one block
(no ``[batch, heads, kv_len]`` logits, no copy of the cache)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.ops import FwdParams
from ejkernel.ops.ragged_decode_attention import RaggedDecodeAttentionConfig
from ejkernel.ops.ragged_decode_attention.cases import RaggedDecodeCase
from ejkernel.ops.ragged_decode_attention.reference import ragged_decode_attention_reference


def _inputs(**kw):
    case = RaggedDecodeCase("api", ranges=((0, 30), (7, 8), (12, 12), (3, 41)), kv_len=41, h=4, hk=2, **kw)
    return case.inputs(3)


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_matches_reference(mode):
    kw = _inputs(window=9, sinks=2)
    arrays = [kw.pop(n) for n in ("query", "key", "value", "sequence_start", "sequence_end", "softmax_aux")]
    cfg = RaggedDecodeAttentionConfig(fwd_params=FwdParams(kv_blocksize=16))

    def f(*a):
        return ejkernel.ragged_decode_attention(*a, **kw, platform="xla", cfg=cfg)

    out = (jax.jit(f) if mode == "jit" else f)(*arrays)
    # The reference under jit (index arrays closed over): eager, it dispatches op by op.
    ref = jax.jit(lambda q, k, v, aux: ragged_decode_attention_reference(q, k, v, *arrays[3:5], aux, **kw))(
        *arrays[:3], arrays[5]
    )
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=2e-5, rtol=2e-5)
    assert not np.any(np.asarray(out[2]))  # the empty range
    assert np.all(np.isfinite(np.asarray(out)))


def _call(**over):
    kw = {**_inputs(), **over}
    return ejkernel.ragged_decode_attention(**kw, platform="xla")


@pytest.mark.parametrize(
    ("over", "error", "words"),
    [
        ({"sequence_end": jnp.array([30, 8, 12], jnp.int32)}, ValueError, r"sequence_end must have batch = 4.*\(3,\)"),
        (
            {"key": jnp.zeros((4, 41, 3, 32)), "value": jnp.zeros((4, 41, 3, 32))},
            ValueError,
            r"num_heads \(4\) must be a multiple of num_kv_heads \(3\)",
        ),
        ({"value": jnp.zeros((4, 40, 2, 32))}, ValueError, r"value must have kv_len = 41.*\(4, 40, 2, 32\)"),
        ({"query": jnp.zeros((4, 2, 4, 32))}, ValueError, r"4-D query must be \[batch, 1, num_heads, head_dim\]"),
        (
            {"sequence_start": jnp.array([0, 9, 12, 3], jnp.int32)},
            ValueError,
            r"sequence_start.*must be in \[0, sequence_end\]",
        ),
        ({"sequence_end": jnp.array([30, 8, 12, 42], jnp.int32)}, ValueError, r"sequence_end.*kv_len = 41"),
        ({"sequence_start": jnp.zeros((4,), jnp.float32)}, TypeError, r"sequence_start"),
    ],
)
def test_bad_inputs_are_named(over, error, words):
    with pytest.raises(error, match=words):
        _call(**over)


def test_xla_memory_is_one_block():
    b, h, hk, s, d, block = 2, 4, 2, 4096, 8, 256
    q = jnp.ones((b, h, d))
    k = v = jnp.ones((b, s, hk, d))
    lens = jnp.array([s, 100], jnp.int32)
    cfg = RaggedDecodeAttentionConfig(fwd_params=FwdParams(kv_blocksize=block))

    def f(q, k, v, end):
        return ejkernel.ragged_decode_attention(q, k, v, jnp.zeros_like(end), end, platform="xla", cfg=cfg)

    hlo = jax.jit(f).lower(q, k, v, lens).compile().as_text()
    big = []
    for line in hlo.splitlines():
        m = re.match(r"\s*(?:ROOT )?%\S+ = \w+\[([\d,]*)\]\S* ([\w-]+)\(", line)
        if m is None or m.group(2) in ("parameter", "bitcast", "get-tuple-element"):
            continue
        dims = [int(n) for n in m.group(1).split(",") if n]
        if dims and int(np.prod(dims)) >= b * h * s:  # as large as the whole context's logits
            big.append(line.strip())
    assert not big, big
