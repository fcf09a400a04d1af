"""The XLA delta rule's scalar-gate form (``ejkernel_xla._delta.scalar_gate_delta_rule``, which
``gated_delta_rule`` and a per-head ``kernel_delta_attention`` decay take) against the per-channel
form on the same gates broadcast over the channels, its matmul inverse of ``I + A`` against a dense
inverse and the triangular solve's gradients, and its memory linear in the sequence."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel_xla._delta import unit_lower_inverse

from .test_properties import _inputs


@pytest.mark.parametrize("size", [16, 32, 64, 128])
def test_unit_lower_inverse_matches_a_dense_inverse(size):
    rng = np.random.default_rng(size)
    k = rng.standard_normal((3, size, 32))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    beta = 1 / (1 + np.exp(-rng.standard_normal((3, size, 1))))
    a = np.tril(beta * (k @ np.swapaxes(k, -1, -2)), -1)
    # And the worst conditioned case of the delta rule: equal keys, beta 1 (the inverse is I - shift).
    a = np.concatenate([a, np.tril(np.ones((1, size, size)), -1)])
    x = np.asarray(jax.jit(unit_lower_inverse)(jnp.asarray(a, jnp.float32)))
    ref = np.linalg.inv(np.eye(size) + a)
    np.testing.assert_allclose(x, ref, atol=2e-6)


def test_unit_lower_inverse_gradient_is_the_triangular_solves():
    rng = np.random.default_rng(0)
    size = 64
    a = jnp.asarray(np.tril(0.2 * rng.standard_normal((2, size, size)), -1), jnp.float32)
    ct = jnp.asarray(rng.standard_normal(a.shape), jnp.float32)
    eye = jnp.eye(size)

    def solve(a):
        lower = jax.lax.linalg.triangular_solve(
            eye + a, jnp.broadcast_to(eye, a.shape), left_side=True, lower=True, unit_diagonal=True
        )
        return jnp.tril(lower)

    g_ref = jax.grad(lambda a: jnp.sum(solve(a) * ct))(a)
    g = jax.grad(lambda a: jnp.sum(unit_lower_inverse(a) * ct))(a)
    # Only the strictly lower part of a is an input of the delta rule.
    np.testing.assert_allclose(np.tril(np.asarray(g), -1), np.tril(np.asarray(g_ref), -1), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("decay_shift", [0.0, -3.0], ids=["sigmoid-gates", "strong-decay"])
@pytest.mark.parametrize("varlen", [False, True], ids=["batch", "varlen"])
def test_scalar_gate_form_matches_the_per_channel_form(decay_shift, varlen):
    """A per-head decay (the scalar form) and the same decay on every channel (the per-channel
    form): outputs, final states and every gradient agree, with initial states, GVA, a partial
    last chunk, and with decays far beyond float32's range across a chunk."""
    b, t = (1, 150) if varlen else (2, 75)
    kw = _inputs(b, t, 2, 16, hv=4, per_channel=False, decay_shift=decay_shift, seed=1)
    decay = kw.pop("decay")
    cu = jnp.asarray([0, 40, 41, 150], jnp.int32) if varlen else None
    n = 3 if varlen else b
    h0 = jnp.asarray(np.random.default_rng(2).standard_normal((n, 4, 16, 16)), jnp.float32)
    ct = jnp.asarray(np.random.default_rng(3).standard_normal(kw["value"].shape), jnp.float32)

    def loss(q, k, v, beta, g, h0, *, channels):
        g = jnp.broadcast_to(g[..., None], (*g.shape, q.shape[-1])) if channels else g
        out, state = ejkernel.kernel_delta_attention(
            q, k, v, beta, g, h0, cu, use_qk_l2norm=True, return_state=True, chunk_size=16, platform="xla"
        )
        return jnp.sum(out * ct) + jnp.sum(state), (out, state)

    args = (kw["query"], kw["key"], kw["value"], kw["beta"], decay, h0)
    grad = jax.grad(loss, argnums=tuple(range(6)), has_aux=True)
    g_scalar, (o_scalar, s_scalar) = jax.jit(lambda *a: grad(*a, channels=False))(*args)
    g_chan, (o_chan, s_chan) = jax.jit(lambda *a: grad(*a, channels=True))(*args)
    np.testing.assert_allclose(np.asarray(o_scalar), np.asarray(o_chan), atol=1e-5)
    np.testing.assert_allclose(np.asarray(s_scalar), np.asarray(s_chan), atol=2e-5, rtol=2e-5)
    for name, x, y in zip(("q", "k", "v", "beta", "decay", "initial_state"), g_scalar, g_chan, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=2e-5, rtol=2e-5, err_msg=name)
        assert bool(jnp.all(jnp.isfinite(x))), name


def _temp_bytes(t: int) -> int:
    shapes = _inputs(1, 8, 2, 16, per_channel=False)  # shapes only
    specs = {k: jax.ShapeDtypeStruct((1, t, *v.shape[2:]), v.dtype) for k, v in shapes.items()}

    def loss(kw):
        return jnp.sum(
            ejkernel.gated_delta_rule(kw["query"], kw["key"], kw["value"], kw["decay"], kw["beta"], platform="xla")
        )

    compiled = jax.jit(jax.grad(loss)).lower(specs).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


@pytest.mark.slow
def test_scalar_gate_memory_is_linear_in_the_sequence():
    """As ``test_properties.test_memory_is_linear_in_the_sequence``, on the scalar-gate form."""
    sizes = {t: _temp_bytes(t) for t in (4096, 16384, 65536)}
    assert sizes[16384] / sizes[4096] <= 4 * 1.25, sizes
    assert sizes[65536] / sizes[16384] <= 4 * 1.25, sizes


@pytest.mark.parametrize("op", ["gated_delta_rule", "kernel_delta_attention"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_products_take_highest_precision_only_for_float32_inputs(op, dtype):
    """16-bit inputs: no ``HIGHEST`` product in the program (XLA's GPU backend autotuned those for
    minutes at the bench shape: ``delta_rule_math.product_precision``); float32 inputs keep them.
    The per-channel form's backward is left out: JAX's own derivative of its triangular solve
    multiplies at ``HIGHEST``."""
    kw = _inputs(1, 40, 2, 16, per_channel=op == "kernel_delta_attention")
    kw = {k: v.astype(dtype) for k, v in kw.items()}
    fn = getattr(ejkernel, op)

    def loss(q, k, v, beta, g):
        out = fn(q, k, v, g, beta, platform="xla") if op == "gated_delta_rule" else fn(q, k, v, beta, g, platform="xla")
        return jnp.sum(out.astype(jnp.float32))

    args = (kw["query"], kw["key"], kw["value"], kw["beta"], kw["decay"])
    program = jax.value_and_grad(loss, argnums=(0, 1, 2)) if op == "gated_delta_rule" else loss
    text = jax.jit(program).lower(*args).as_text()
    assert "dot_general" in text
    assert ("HIGHEST" in text) == (dtype == "float32")
