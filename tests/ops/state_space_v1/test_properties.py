"""``state_space_v1`` beyond the shared conformance cases: the final state, decode steps that
continue a scan, a long sequence, memory linear in the sequence, and the refusals."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.ops.state_space_v1 import StateSpaceV1Config
from ejkernel.ops.state_space_v1.cases import StateSpaceV1Case
from ejkernel.ops.state_space_v1.reference import state_space_v1_reference

NAMES = ("hidden_states", "A", "B", "C", "D", "dt", "gate", "initial_state")
SEQ = ("hidden_states", "B", "C", "dt", "gate")
CHUNK4 = StateSpaceV1Config(block_e=4)


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [None, CHUNK4], ids=["heuristic", "chunk4"])
def test_final_state_and_gradients_through_it(cfg):
    case = StateSpaceV1Case("fs", b=2, s=23, d=12, n=6, gate=True, initial_state=True, return_state=True)
    kw = case.inputs(seed=2)
    y, h = ejkernel.state_space_v1(**kw, platform="xla", cfg=cfg)
    ref_y, ref_h = state_space_v1_reference(**kw)
    assert h.dtype == jnp.float32 and h.shape == (2, 12, 6)
    np.testing.assert_allclose(np.asarray(y), np.asarray(ref_y), atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(np.asarray(h), np.asarray(ref_h), atol=2e-5, rtol=2e-5)

    rng = np.random.default_rng(0)
    wy, wh = (jnp.asarray(rng.standard_normal(a.shape), jnp.float32) for a in (y, h))

    def grads(fn):
        def loss(arrays):
            out_y, out_h = fn(**{**kw, **arrays})
            return jnp.sum(out_y * wy) + jnp.sum(out_h * wh)

        return jax.jit(jax.grad(loss))({n: kw[n] for n in NAMES})

    got = grads(lambda **k: ejkernel.state_space_v1(**k, platform="xla", cfg=cfg))
    want = grads(state_space_v1_reference)
    for n in NAMES:
        np.testing.assert_allclose(np.asarray(got[n]), np.asarray(want[n]), atol=1e-4, rtol=1e-4, err_msg=n)


def test_decode_steps_continue_the_scan():
    kw = StateSpaceV1Case("split", b=2, s=11, d=8, n=4, gate=True, return_state=True).inputs(seed=1)
    y_all, h_all = ejkernel.state_space_v1(**kw, platform="xla")
    y, h = ejkernel.state_space_v1(**{**kw, **{n: kw[n][:, :6] for n in SEQ}}, platform="xla")
    ys = [y]
    for t in range(6, 11):
        y_t, h = ejkernel.state_space_v1(**{**kw, **{n: kw[n][:, t] for n in SEQ}, "initial_state": h}, platform="xla")
        assert y_t.shape == (2, 8)
        ys.append(y_t[:, None])
    np.testing.assert_allclose(np.asarray(jnp.concatenate(ys, 1)), np.asarray(y_all), atol=3e-5, rtol=3e-5)
    np.testing.assert_allclose(np.asarray(h), np.asarray(h_all), atol=3e-5, rtol=3e-5)


def test_long_sequence_stays_finite_and_exact():
    """65536 tokens at a small width: no overflow of the decays or the state, the same result as
    the token-at-a-time reference."""
    kw = StateSpaceV1Case("long", b=1, s=65536, d=4, n=4, gate=True, initial_state=True).inputs(seed=4)
    kw["dt"] = kw["dt"] * 4  # strong decays (exp(dt A) underflows towards 0 at times)
    y = jax.jit(lambda k: ejkernel.state_space_v1(**k, platform="xla", return_state=True))(kw)
    ref = jax.jit(lambda k: state_space_v1_reference(**k, return_state=True))(kw)
    for got, want in zip(y, ref, strict=True):
        assert bool(jnp.all(jnp.isfinite(got)))
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=5e-5, rtol=5e-5)
    g = jax.jit(jax.grad(lambda x: jnp.sum(ejkernel.state_space_v1(**{**kw, "hidden_states": x}, platform="xla"))))(
        kw["hidden_states"]
    )
    assert bool(jnp.all(jnp.isfinite(g)))


def _temp_bytes(fn, s: int, d: int = 32, n: int = 16) -> int:
    b = 1
    f32 = jnp.float32
    specs = (
        jax.ShapeDtypeStruct((b, s, d), f32),
        jax.ShapeDtypeStruct((d, n), f32),
        jax.ShapeDtypeStruct((b, s, n), f32),
        jax.ShapeDtypeStruct((b, s, n), f32),
        jax.ShapeDtypeStruct((d,), f32),
        jax.ShapeDtypeStruct((b, s, d), f32),
    )
    compiled = jax.jit(jax.grad(lambda *a: jnp.sum(fn(*a)), argnums=tuple(range(6)))).lower(*specs).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


@pytest.mark.slow
def test_xla_memory_is_linear_and_keeps_no_per_token_state():
    """Forward+backward temp memory (compiled memory analysis) at 4k, 16k and 64k tokens grows at
    most linearly, and stays far below one float32 state per token (``[s, d, n]``), which the
    whole-sequence associative scan keeps."""
    from ejkernel.ops.state_space_v1.bench import associative_scan_formulation

    xla = {s: _temp_bytes(lambda *a: ejkernel.state_space_v1(*a, platform="xla"), s) for s in (4096, 16384, 65536)}
    naive = _temp_bytes(associative_scan_formulation, 8192)
    assert xla[16384] / xla[4096] <= 4 * 1.25, xla
    assert xla[65536] / xla[4096] <= 16 * 1.25, xla

    def per_token_states(s: int) -> int:
        return s * 32 * 16 * 4

    assert xla[65536] < per_token_states(65536) / 2, xla
    assert naive > per_token_states(8192)  # the peer does keep them: the bound above can fail


def test_conv_state_is_refused_and_forms_must_agree():
    kw = StateSpaceV1Case("r", b=1, s=5, d=4, n=2).inputs()
    with pytest.raises(ValueError, match=r"conv_state .* belongs to the causal convolution"):
        ejkernel.state_space_v1(**kw, conv_state=jnp.zeros((1, 4, 3)))
    with pytest.raises(ValueError, match="decode step: 2-D"):
        ejkernel.state_space_v1(**{**kw, "hidden_states": kw["hidden_states"][:, 0]})
    with pytest.raises(TypeError, match="act_fn must be a callable"):
        ejkernel.state_space_v1(**kw, act_fn="silu")
    with pytest.raises(ValueError, match="A must have intermediate = 4"):
        ejkernel.state_space_v1(**{**kw, "A": jnp.ones((5, 2))})


@pytest.mark.slow
def test_batch_sharded_matches_unsharded_with_gradients():
    """Under ``mesh``, the batch splits over devices; A and D (replicated) get the summed gradient."""
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    kw = StateSpaceV1Case("sh", b=4, s=9, d=6, n=3, gate=True, initial_state=True).inputs()
    mesh = Mesh(np.array(jax.devices()[:4]), ("b",))
    specs = (P("b"), P(), P("b"), P("b"), P(), P("b"), P("b"), P("b"))

    def loss(arrays, sharded):
        extra = {"mesh": mesh, "in_specs": specs} if sharded else {}
        return jnp.sum(ejkernel.state_space_v1(**{**kw, **arrays}, platform="xla", **extra) ** 2)

    arrays = {n: kw[n] for n in NAMES}
    got, want = (jax.grad(lambda a, s=s: loss(a, s))(arrays) for s in (True, False))
    for n in NAMES:
        np.testing.assert_allclose(np.asarray(got[n]), np.asarray(want[n]), atol=1e-5, rtol=1e-5, err_msg=n)
    with pytest.raises(ValueError, match="intermediate axis of hidden_states cannot be sharded"):
        ejkernel.state_space_v1(**kw, mesh=mesh, in_specs=(P(None, None, "b"),))
