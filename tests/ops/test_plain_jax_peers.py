"""The plain-JAX peers ``ejkernel bench`` times the XLA paths against compute what the ops compute:
each peer, on its benchmark's inputs (float32, a length that is not a whole number of chunks, GQA
heads and milder gates for the delta rule; for the serving ops, steps mixing decodes and chunks
at contexts that are not whole pages), equals the op's float32 reference."""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.ops.gla_attention.bench import LinearShape, linear_inputs
from ejkernel.ops.gla_attention.bench import plain_jax_peer as linear_peer
from ejkernel.ops.kernel_delta_attention.bench import DeltaShape, delta_inputs
from ejkernel.ops.kernel_delta_attention.bench import plain_jax_peer as delta_peer
from ejkernel.ops.kernel_delta_attention.reference import delta_rule_reference
from ejkernel.ops.op import op_class


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("op", ["gla_attention", "lightning_attention", "recurrent_attention", "state_space_v2"])
def test_linear_peer_matches_reference(op):
    arrays, opts = linear_inputs(op, LinearShape(b=2, t=200, h=3, d=16, dv=8), jnp.float32, seed=1)
    peer = linear_peer(op, arrays, opts)
    got = peer.fn(*peer.arrays)
    got = peer.to_op(got) if peer.to_op else got
    want = op_class(op).get_reference()(*arrays, **opts)
    if op == "state_space_v2":
        got, want = got[0], want[0]
    assert got.shape == want.shape
    _close(got, want)


@pytest.mark.parametrize("op", ["kernel_delta_attention", "gated_delta_rule"])
def test_delta_peer_matches_reference(op):
    kda = op == "kernel_delta_attention"
    q, k, v, beta, gate = delta_inputs(DeltaShape(b=2, t=200, h=2, hv=4, d=16, dv=8), jnp.float32, kda, seed=1)
    gate = gate * 0.02  # mild decays: the state a chunk passes on still matters after 64 tokens
    peer = delta_peer(op, (q, k, v, beta, gate) if kda else (q, k, v, gate, beta))
    got = peer.fn(*peer.arrays)
    _close(got, delta_rule_reference(q, k, v, beta, gate, use_qk_l2norm=True))


def _bench_peers(op, argv):
    """``(peer name, check status)`` of every peer of ``ejkernel bench <op> argv``'s cases, each
    peer's output checked against the op's float32 reference by the bench's own check."""
    bench = op_class(op).get_bench()
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    ns = parser.parse_args(argv)
    ns.repeats = 1
    out = []
    for case in bench.cases(ns, "float32", peers=True, check=True):
        for peer in case.peers:
            got = jax.jit(peer.fn)(*peer.arrays)
            out.append((peer.name, case.check(peer.to_op(got) if peer.to_op else got)[0]))
    return out


SERVING = ["--h", "4", "--hk", "2", "--d", "16", "--page-size", "8"]
MIXED = ["--decodes", "3", "--context", "40", "--chunks", "2", "--chunk", "7", "--chunk-context", "33"]
DECODES = ["--decodes", "3", "--context", "37", "--chunks", "0"]
PROMPTS = ["--decodes", "0", "--chunks", "2", "--chunk", "20", "--chunk-context", "20"]


@pytest.mark.parametrize(
    ("op", "step", "names"),
    [
        ("ragged_page_attention_v2", MIXED, ["jax.nn[xla] dense"]),
        ("ragged_page_attention_v2", DECODES, ["page_attention", "jax.nn[xla] dense decode"]),
        ("ragged_page_attention_v2", PROMPTS, ["jax.nn[xla] dense", "flash_attention varlen"]),
        ("unified_attention", MIXED, ["jax.nn[xla] dense"]),
        ("unified_attention", DECODES, ["page_attention", "jax.nn[xla] dense decode"]),
        ("ragged_page_attention_v3", MIXED, ["jax.nn[xla] dense"]),
        ("ragged_page_attention_v3", DECODES, ["page_attention", "jax.nn[xla] dense decode"]),
        ("ragged_page_attention_v3", PROMPTS, ["jax.nn[xla] dense", "flash_attention varlen"]),
        ("prefill_page_attention", ["--chunk", "9", "--context", "37"], ["jax.nn[xla] dense"]),
        (
            "prefill_page_attention",
            ["--chunk", "37", "--context", "37"],
            ["jax.nn[xla] dense", "flash_attention varlen"],
        ),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_serving_peers_match_reference(op, step, names):
    """The gather + dense peers (and the kernels beside them) on a serving bench's step: for
    ``ragged_page_attention_v3``, the attention on the cache the step writes."""
    assert _bench_peers(op, step + SERVING) == [(n, "ok") for n in names]
