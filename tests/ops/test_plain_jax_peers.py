"""The plain-JAX peers ``ejkernel bench`` times the XLA paths against compute what the ops compute:
each peer, on its benchmark's inputs (float32, a length that is not a whole number of chunks, GQA
heads and milder gates for the delta rule), equals the op's float32 reference."""

from __future__ import annotations

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
