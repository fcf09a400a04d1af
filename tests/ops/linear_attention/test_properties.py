"""Gated linear attention beyond the shared cases: long sequences keep the state (no overflow, no
loss), memory grows linearly with the length, decode steps equal the chunked call, varlen equals a
loop of per-sequence calls, reverse equals flipping, bad input errors. XLA on the CPU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.ops.families.linear_attention import log_decay
from ejkernel.testing import reference_of

RNG = np.random.default_rng(0)


def _gla_inputs(b, t, h, d, dv, *, decay="mild", hk=None, seed=0):
    rng = np.random.default_rng(seed)
    hk = hk or h
    q = jnp.asarray(rng.standard_normal((b, t, h, d)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((b, t, hk, d)) / np.sqrt(d), jnp.float32)
    v = jnp.asarray(rng.standard_normal((b, t, hk, dv)), jnp.float32)
    g = jnp.asarray(log_decay(rng, (b, t, h, d), decay))
    return q, k, v, g


def _long_call(op, t, platform):
    """``(call args, options)`` of a T-token call at reduced width with an initial state. GLA's
    gates are weak (about -6e-6 per token: the initial state still weighs exp(-0.4) after 65536
    tokens); lightning's head 0 does not decay at all (its state only grows)."""
    q, k, v, g = _gla_inputs(1, t, 2, 8, 8, decay="weak")
    h0 = jnp.asarray(np.random.default_rng(7).standard_normal((1, 2, 8, 8)), jnp.float32)
    if op == "gla_attention":
        return (q, k, v, g, None, h0), {}
    return (q, k, v, h0), {"layer_idx": 0, "num_layers": 1}


def _cpu_reference(op, args, kw):
    """The token-by-token reference, run on the CPU: on a GPU, XLA's float32 scan strays from a
    float64 recurrence by 2e-4 of the output's scale at T = 65536 (H100, GLA: 0.079 of 359; the
    Triton kernels 0.003-0.004), beyond this test's tolerance."""
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        out, state = reference_of(op)(
            *(None if a is None else jax.device_put(a, cpu) for a in args), return_state=True, **kw
        )
    return np.asarray(out), np.asarray(state)


def _check_long(op, platform, tol):
    args, kw = _long_call(op, 65536, platform)
    out, state = jax.jit(lambda *a: getattr(ejkernel, op)(*a, return_state=True, platform=platform, **kw))(*args)
    out, state = np.asarray(out), np.asarray(state)
    ref_out, ref_state = _cpu_reference(op, args, kw)
    assert np.isfinite(out).all() and np.isfinite(state).all()
    scale = max(1.0, float(np.abs(ref_out).max()))
    assert float(np.abs(out - ref_out).max()) <= tol * scale
    sscale = max(1.0, float(np.abs(ref_state).max()))
    assert float(np.abs(state - ref_state).max()) <= tol * sscale
    # The initial state is not lost: without it the final state differs by its decayed value.
    args0 = (*args[:-1], jnp.zeros_like(args[-1]))
    _, ref_state0 = _cpu_reference(op, args0, kw)
    assert float(np.abs(ref_state - ref_state0).max()) > 10 * tol * sscale


@pytest.mark.parametrize("op", ["gla_attention", "lightning_attention"])
def test_65536_tokens_keep_the_state(op):
    """T = 65536 at reduced width (XLA): outputs and final state match the token-by-token
    recurrence (no overflow of the cumulated gates, no state lost across 1024 chunks)."""
    _check_long(op, "xla", 1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["gla_attention", "lightning_attention"])
def test_triton_65536_tokens_keep_the_state(op):
    """The same on the GPU in Triton (float32 inputs, IEEE products)."""
    _check_long(op, "triton", 1e-4)


def _temp_bytes(t: int, platform: str = "xla") -> int:
    spec = jax.ShapeDtypeStruct((1, t, 2, 32), jnp.float32)

    def loss(q, k, v, g):
        return jnp.sum(ejkernel.gla_attention(q, k, v, g, platform=platform))

    compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3))).lower(spec, spec, spec, spec).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


@pytest.mark.parametrize("platform", ["xla", pytest.param("triton", marks=pytest.mark.gpu)])
def test_memory_grows_linearly(platform):
    """Forward+backward temp memory at T = 4k, 16k, 64k: each 4x step at most ~4x (plus slack),
    and a few times the inputs' size at most."""
    sizes = {t: _temp_bytes(t, platform) for t in (4096, 16384, 65536)}
    assert sizes[16384] <= 4 * 1.25 * sizes[4096], sizes
    assert sizes[65536] <= 4 * 1.25 * sizes[16384], sizes
    # The chunked form keeps arrays of the inputs' size (each chunk's own terms, the states
    # entering the chunks, their cotangents): 4-6 times the four inputs' 64 MiB at T = 64k with
    # the per-chunk terms of every chunk at once. A quadratic program would hold T² scores per
    # head: 32 GiB.
    inputs = 4 * 65536 * 2 * 32 * 4
    assert sizes[65536] <= 8 * inputs, sizes


def test_decode_steps_equal_the_chunked_call():
    """Feeding tokens one at a time (seq 1, state in, state out) gives the chunked call's outputs
    and final state."""
    q, k, v, g = _gla_inputs(2, 23, 4, 16, 8, hk=2)
    gamma = jnp.asarray(-np.exp(RNG.standard_normal(4) - 2), jnp.float32)
    full, full_state = ejkernel.gla_attention(q, k, v, g, gamma, return_state=True, platform="xla")
    state = jnp.zeros((2, 4, 16, 8), jnp.float32)
    outs = []
    for i in range(23):
        sl = slice(i, i + 1)
        o, state = ejkernel.gla_attention(
            q[:, sl], k[:, sl], v[:, sl], g[:, sl], gamma, state, return_state=True, platform="xla"
        )
        outs.append(o)
    np.testing.assert_allclose(np.concatenate(outs, axis=1), full, atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(state, full_state, atol=2e-5, rtol=1e-5)


@pytest.mark.slow
def test_varlen_equals_a_loop_of_calls_and_reverse_equals_flipping():
    lens = (5, 0, 17, 1, 9)
    cu = jnp.asarray(np.concatenate([[0], np.cumsum(lens)]), jnp.int32)
    q, k, v, g = _gla_inputs(1, sum(lens), 2, 8, 8)
    h0 = jnp.asarray(RNG.standard_normal((len(lens), 2, 8, 8)), jnp.float32)
    for reverse in (False, True):
        out, states = ejkernel.gla_attention(
            q, k, v, g, None, h0, cu, reverse=reverse, return_state=True, platform="xla", cfg=None
        )
        for i, (lo, hi) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True)):
            if hi == lo:
                np.testing.assert_array_equal(states[i], h0[i])  # an empty sequence keeps its state
                continue
            sl = slice(lo, hi)
            args = [x[:, sl] for x in (q, k, v, g)]
            if reverse:  # reverse == the forward recurrence on the flipped sequence
                args = [jnp.flip(x, 1) for x in args]
            o, s = ejkernel.gla_attention(*args, None, h0[i : i + 1], return_state=True, platform="xla")
            if reverse:
                o = jnp.flip(o, 1)
            np.testing.assert_allclose(out[:, sl], o, atol=2e-5, rtol=1e-5)
            np.testing.assert_allclose(states[i : i + 1], s, atol=2e-5, rtol=1e-5)


def test_bad_inputs_name_the_argument():
    q, k, v, g = _gla_inputs(2, 8, 2, 8, 8)
    with pytest.raises(ValueError, match="cu_seqlens packs sequences in one row"):
        ejkernel.gla_attention(q, k, v, g, cu_seqlens=jnp.asarray([0, 8, 16], jnp.int32))
    with pytest.raises(ValueError, match="initial_state must be"):
        ejkernel.gla_attention(q, k, v, g, initial_state=jnp.zeros((3, 2, 8, 8)))
    with pytest.raises(ValueError, match="cu_seqlens must start at 0"):
        ejkernel.gla_attention(q[:1], k[:1], v[:1], g[:1], cu_seqlens=jnp.asarray([0, 5, 7], jnp.int32))
    with pytest.raises(ValueError, match="g must have"):
        ejkernel.gla_attention(q, k, v, g[:, :, :, :4])
    with pytest.raises(ValueError, match="layer_idx must be in"):
        ejkernel.lightning_attention(q, k, v, layer_idx=4, num_layers=4)
    with pytest.raises(TypeError, match="num_layers"):
        ejkernel.lightning_attention(q, k, v, layer_idx=0, num_layers=None)
    x = jnp.ones((1, 4, 2, 8))
    b = jnp.ones((1, 4, 2, 4))
    with pytest.raises(ValueError, match="n_groups"):
        ejkernel.state_space_v2(x, -jnp.ones(2), b, b, jnp.ones(2), jnp.ones((1, 4, 2)))


@pytest.mark.slow
def test_earlier_keywords():
    """The spec's module examples: ``gla_attention(..., gate=g)``, ``lightning_attention(...,
    decay=rates)`` (explicit per-head rates λ: log decay -λ, differentiable) and
    ``out, new_state = recurrent_attention(..., state=s)``."""
    q, k, v, g = _gla_inputs(2, 19, 4, 8, 8, hk=2)
    h0 = jnp.asarray(RNG.standard_normal((2, 4, 8, 8)), jnp.float32)
    np.testing.assert_array_equal(ejkernel.gla_attention(q, k, v, gate=g), ejkernel.gla_attention(q, k, v, g))
    with pytest.raises(ValueError, match="pass g or its earlier name gate"):
        ejkernel.gla_attention(q, k, v, g, gate=g)

    rates = jnp.asarray([0.5, 0.25, 0.0, 2.0], jnp.float32)
    ref = reference_of("gla_attention")

    def loss(fn, rates, h0):
        o, s = fn(rates, h0)
        return jnp.sum(jnp.sin(o)) + jnp.sum(jnp.cos(s))

    def ours(rates, h0):
        return ejkernel.lightning_attention(q, k, v, h0, decay=rates, return_state=True, platform="xla")

    def theirs(rates, h0):
        return ref(q, k, v, None, -rates, h0, return_state=True)

    for a, b in zip(ours(rates, h0), theirs(rates, h0), strict=True):
        np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-5)
    g_ours = jax.grad(lambda r, s: loss(ours, r, s), argnums=(0, 1))(rates, h0)
    g_ref = jax.grad(lambda r, s: loss(theirs, r, s), argnums=(0, 1))(rates, h0)
    for a, b in zip(g_ours, g_ref, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="pass decay or layer_idx"):
        ejkernel.lightning_attention(q, k, v, decay=rates, layer_idx=0, num_layers=2)
    with pytest.raises(ValueError, match="decay must be"):
        ejkernel.lightning_attention(q, k, v, decay=rates[:2])
    with pytest.raises(ValueError, match="must be >= 0"):
        ejkernel.lightning_attention(q, k, v, decay=-rates)

    out, state = ejkernel.recurrent_attention(q, k, v, state=h0)
    want = ejkernel.recurrent_attention(q, k, v, initial_state=h0, return_state=True)
    np.testing.assert_array_equal(out, want[0])
    np.testing.assert_array_equal(state, want[1])
    with pytest.raises(ValueError, match="pass initial_state or its earlier name state"):
        ejkernel.recurrent_attention(q, k, v, initial_state=h0, state=h0)


def test_lightning_decay_is_flas():
    """fla-core's ``chunk_lightning_attn``: ``g_gamma = -(8/H)(1 - layer_idx/num_layers)·h``."""
    from ejkernel.ops.families.linear_attention import lightning_decay

    np.testing.assert_allclose(lightning_decay(4, 1, 4), [0.0, -1.5, -3.0, -4.5])
