"""Delta-rule ops beyond the shared conformance cases: long sequences (no overflow, no lost
state), memory linear in the sequence length, decode (one token at a time, state in and out)
equal to one chunked call, bad inputs, the ``kda_attention`` alias."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.ops.gated_delta_rule.reference import reference as gdn_reference
from ejkernel.ops.kernel_delta_attention.reference import reference as kda_reference


def _inputs(b, t, h, d, *, hv=None, per_channel=True, decay_shift=0.0, seed=0):
    rng = np.random.default_rng(seed)
    hv = hv or h
    n = lambda *s: jnp.asarray(rng.standard_normal(s), jnp.float32)  # noqa: E731
    gshape = (b, t, hv, d) if per_channel else (b, t, hv)
    return dict(
        query=n(b, t, h, d),
        key=n(b, t, h, d),
        value=n(b, t, hv, d),
        beta=jax.nn.sigmoid(n(b, t, hv)),
        decay=jax.nn.log_sigmoid(n(*gshape) + decay_shift),
    )


@pytest.mark.parametrize("platform", ["xla", pytest.param("triton", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("decay_shift", [12.0, -3.0], ids=["state-persists", "strong-decay"])
def test_long_sequence_keeps_the_state_and_stays_finite(decay_shift, platform):
    """65536 tokens (1024 chunks) at reduced width (XLA on the CPU, Triton on the GPU): with a
    decay of ~6e-6 per token the first tokens still shape the final state; with ~-3 per token
    (ratios across a chunk far beyond float32) nothing overflows."""
    kw = _inputs(1, 65536, 1, 16, decay_shift=decay_shift)
    out, state = jax.jit(lambda kw: ejkernel.kernel_delta_attention(**kw, return_state=True, platform=platform))(kw)
    ref_out, ref_state = jax.jit(lambda kw: kda_reference(**kw, return_state=True))(kw)
    assert bool(jnp.all(jnp.isfinite(out))) and bool(jnp.all(jnp.isfinite(state)))
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref_out), atol=5e-5)
    np.testing.assert_allclose(np.asarray(state), np.asarray(ref_state), atol=5e-4, rtol=5e-4)


def _temp_bytes(t: int, platform: str) -> int:
    kw = _inputs(1, 8, 2, 16)  # shapes only
    specs = {k: jax.ShapeDtypeStruct((1, t, *v.shape[2:]), v.dtype) for k, v in kw.items()}

    def loss(kw):
        return jnp.sum(ejkernel.kernel_delta_attention(**kw, platform=platform))

    compiled = jax.jit(jax.grad(loss)).lower(specs).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


@pytest.mark.slow
@pytest.mark.parametrize("platform", ["xla", pytest.param("triton", marks=pytest.mark.gpu)])
def test_memory_is_linear_in_the_sequence(platform):
    """Forward+backward temp memory at 4k, 16k and 64k tokens grows ~4x per 4x (states are
    kept once per chunk, nothing quadratic)."""
    sizes = {t: _temp_bytes(t, platform) for t in (4096, 16384, 65536)}
    assert sizes[16384] / sizes[4096] <= 4 * 1.25, sizes
    assert sizes[65536] / sizes[16384] <= 4 * 1.25, sizes


@pytest.mark.slow
@pytest.mark.parametrize("op", ["kernel_delta_attention", "gated_delta_rule"])
def test_decode_steps_equal_one_chunked_call(op):
    """Feeding tokens one at a time (state out → state in; the step path) gives the outputs and
    final state of one chunked call over all of them."""
    t = 9
    kw = _inputs(2, t, 2, 16, hv=4, per_channel=op == "kernel_delta_attention")
    fn = getattr(ejkernel, op)
    gate = kw.pop("decay")

    def call(sl, state):
        args = [kw["query"][:, sl], kw["key"][:, sl], kw["value"][:, sl]]
        if op == "kernel_delta_attention":
            args += [kw["beta"][:, sl], gate[:, sl], state]
            return fn(*args, use_qk_l2norm=True, return_state=True)
        args += [gate[:, sl], kw["beta"][:, sl], state]
        return fn(*args, use_qk_l2norm_in_kernel=True, return_state=True)

    state0 = jnp.asarray(np.random.default_rng(1).standard_normal((2, 4, 16, 16)), jnp.float32)
    full, full_state = call(slice(None), state0)
    state, outs = state0, []
    for i in range(t):
        o, state = call(slice(i, i + 1), state)
        outs.append(o)
    np.testing.assert_allclose(np.asarray(jnp.concatenate(outs, 1)), np.asarray(full), atol=2e-5)
    np.testing.assert_allclose(np.asarray(state), np.asarray(full_state), atol=2e-5)


def test_gdn_matches_its_reference_with_gva():
    kw = _inputs(1, 50, 2, 16, hv=4, per_channel=False)
    g = kw.pop("decay")
    out = ejkernel.gated_delta_rule(kw["query"], kw["key"], kw["value"], g, kw["beta"], use_qk_l2norm_in_kernel=True)
    ref = gdn_reference(kw["query"], kw["key"], kw["value"], g, kw["beta"], use_qk_l2norm_in_kernel=True)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=2e-5)


def test_alias_and_bad_inputs():
    assert ejkernel.kda_attention is ejkernel.kernel_delta_attention
    kw = _inputs(2, 8, 2, 16)
    q, k, v, beta, decay = kw["query"], kw["key"], kw["value"], kw["beta"], kw["decay"]
    with pytest.raises(ValueError, match="decay"):
        ejkernel.kernel_delta_attention(q, k, v, beta, decay[..., :8])
    with pytest.raises(ValueError, match="initial_state"):
        ejkernel.kernel_delta_attention(q, k, v, beta, decay, jnp.zeros((3, 2, 16, 16)))
    with pytest.raises(ValueError, match="cu_seqlens"):
        ejkernel.kernel_delta_attention(q, k, v, beta, decay, None, jnp.array([0, 8], jnp.int32))
    with pytest.raises(ValueError, match="cu_seqlens"):
        ejkernel.kernel_delta_attention(q[:1], k[:1], v[:1], beta[:1], decay[:1], None, jnp.array([0, 3, 9], jnp.int32))
    with pytest.raises(ValueError, match="g"):
        ejkernel.gated_delta_rule(q, k, v, decay, beta)  # a per-channel gate: KDA's, not GDN's
    with pytest.raises(ValueError, match="chunk_size"):
        ejkernel.kernel_delta_attention(q, k, v, beta, decay, chunk_size=48)
