"""The plain-JAX peers ``ejkernel bench`` times the XLA paths against compute what the ops compute:
each peer, on its benchmark's inputs (float32, a length that is not a whole number of chunks, GQA
heads and milder gates for the delta rule; for the serving ops, steps mixing decodes and chunks
at contexts that are not whole pages), equals the op's float32 reference."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

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
        # cuDNN takes no float32 inputs (on a GPU); its peer is the XLA one's with implementation= changed.
        for peer in (p for p in case.peers if "[cudnn]" not in p.name):
            got = jax.jit(peer.fn)(*peer.arrays)
            out.append((peer.name, case.check(peer.to_op(got) if peer.to_op else got)[0]))
    return out


SERVING = ["--h", "4", "--hk", "2", "--d", "16", "--page-size", "8"]
MIXED = ["--decodes", "3", "--context", "40", "--chunks", "2", "--chunk", "7", "--chunk-context", "33"]
DECODES = ["--decodes", "3", "--context", "37", "--chunks", "0"]
PROMPTS = ["--decodes", "0", "--chunks", "2", "--chunk", "20", "--chunk-context", "20"]


# The peers of each kind of step: the dense attention over the pre-gathered cache, then the same
# with the gather timed (the XLA path's peer).
DENSE = ["jax.nn[xla] dense", "jax.nn[xla] gather + dense"]
DECODE = ["page_attention", "jax.nn[xla] dense decode", "jax.nn[xla] gather + dense decode"]


@pytest.mark.parametrize(
    ("op", "step", "names"),
    [
        *(
            case
            for op in ("ragged_page_attention_v2", "unified_attention", "ragged_page_attention_v3")
            for case in ((op, MIXED, DENSE), (op, DECODES, DECODE))
        ),
        ("ragged_page_attention_v2", PROMPTS, [*DENSE, "flash_attention varlen"]),
        ("ragged_page_attention_v3", PROMPTS, [*DENSE, "flash_attention varlen"]),
        ("prefill_page_attention", ["--chunk", "9", "--context", "37"], DENSE),
        ("prefill_page_attention", ["--chunk", "37", "--context", "37"], [*DENSE, "flash_attention varlen"]),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_serving_peers_match_reference(op, step, names):
    """The gather + dense peers (and the kernels beside them) on a serving bench's step: for
    ``ragged_page_attention_v3``, the attention on the cache the step writes."""
    assert _bench_peers(op, step + SERVING) == [(n, "ok") for n in names]


def test_nsa_peer_matches_the_op():
    """The dense-masked NSA peer against the XLA implementation (gathered blocks): 200 tokens
    (a partial last block), 4 query heads over 2 kv heads, 3 selected blocks of 16, window 40."""
    import ejkernel
    from ejkernel.testing.plain_jax import nsa_dense

    rng = np.random.default_rng(3)
    n = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)  # noqa: E731
    q, k, v = n(2, 200, 4, 16), n(2, 200, 2, 16), n(2, 200, 2, 16)
    gates = [jnp.asarray(rng.random((2, 200, 4)), jnp.float32) for _ in range(3)]
    got = nsa_dense(q, k, v, *gates, block_count=3, block_size=16, window=40)
    want = ejkernel.native_sparse_attention(
        q, k, v, gates[0], gates[1], block_counts=3, g_swa=gates[2], block_size=16, window_size=40, platform="xla"
    )
    _close(got, want)


def test_page_attention_peers_match_reference():
    """The pre-gathered dense decode (a kernel's bar) and the gather + dense decode (the XLA
    path's peer: the gather timed), at a context that ends inside a page."""
    argv = ["--b", "3", "--h", "4", "--hk", "2", "--d", "16", "--context", "37", "--block-size", "8"]
    assert _bench_peers("page_attention", argv) == [
        ("jax.nn[xla] dense decode", "ok"),
        ("jax.nn[xla] gather + dense decode", "ok"),
    ]


@pytest.mark.parametrize(
    "options",
    [
        ["--shape", "2,40,48,4,2,16", "--causal", "both"],
        ["--shape", "1,48,40,4,4,16", "--causal", "yes"],  # the first 8 rows see no key
        ["--shape", "1,40,40,4,2,16", "--window", "6,2"],
    ],
    ids=["causal", "rows-without-keys", "window"],
)
def test_attention_peer_matches_reference_with_weights(options):
    """``plain softmax`` returns the op's pair: the output and the weights both match."""
    peers = _bench_peers("attention", options)
    assert peers and set(peers) == {("plain softmax", "ok")}


def test_ring_attention_peer_on_one_device():
    assert _bench_peers("ring_attention", ["--shape", "2,64,64,4,2,16", "--causal", "both"]) == [
        ("jax.nn[xla]", "ok"),
        ("jax.nn[xla]", "ok"),
    ]


def test_ring_attention_bench_over_a_mesh(tmp_path):
    """``--devices 2`` on two host devices: the ring under ``shard_map`` and the jax.nn peer on
    the same sequence-sharded inputs, both checked against the reference."""
    out = tmp_path / "r.json"
    argv = ["--impl", "xla", "--shape", "1,32,2,16", "--causal", "yes", "--fwd-only", "--repeats", "1"]
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, "-m", "ejkernel", "bench", "ring_attention", "--devices", "2", *argv, "--json", str(out)]
    subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=600)
    records = json.loads(out.read_text())
    assert {(r["impl"], r["devices"], r["check"]) for r in records} == {("xla", 2, "ok"), ("jax.nn[xla]", 2, "ok")}
