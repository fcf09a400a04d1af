"""The forms of the XLA scan (``ejkernel.ops.recurrent_cell.scan``: the input projection as one
matmul first, each step projecting its own input, or the projection first with the stepwise
form's derivative), each forced against the float32 reference and against each other (outputs,
gradients, forward mode), and the rule that picks one (``scan_form``)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.ops.recurrent_cell import RecurrentCellArgs
from ejkernel.ops.recurrent_cell.cases import CASES
from ejkernel.ops.recurrent_cell.op import RecurrentCell
from ejkernel.ops.recurrent_cell.reference import recurrent_cell_reference
from ejkernel.ops.recurrent_cell.scan import (
    FORMS,
    STEPWISE_ANY_W_IH_BATCH,
    STEPWISE_MAX_W_IH_BYTES,
    STEPWISE_MIN_BATCH,
    recurrent_scan,
    scan_form,
)
from ejkernel.testing import conformance as C

OP = RecurrentCell()
# One compile per form and case (eager, every array op of the scan's set-up would compile apart).
_scan = jax.jit(recurrent_scan, static_argnames=("unroll", "form"))


def _bind(kw: dict) -> RecurrentCellArgs:
    return OP.bind(dict(kw))


# Checked against the reference below (every form).
REFERENCE_CASES = ("lstm-hc-odd", "rnn-bidirectional-relu")
# The other features: gru biases (none, split), both directions, bfloat16, a callable activation,
# no steps.
AGREE_CASES = (
    "gru-no-bias-zero-state",
    "gru-bidirectional-shared-state-bfloat16",
    "lstm-custom-activation",
    "lstm-empty-seq",
)


@pytest.mark.parametrize("case", [c for c in CASES if c.name in AGREE_CASES], ids=lambda c: c.name)
def test_forms_agree(case):
    """The conformance suite checks the default form here (a CPU's: stepwise or hoisted at these
    sizes) against the reference on every case; the forms must give the same outputs."""
    a = _bind(case.inputs(0))
    want = jax.tree.leaves(_scan(a, form="stepwise"))
    atol = 1e-5 if case.dtype == "float32" else 2 * C.ATOL[case.dtype]
    for form in ("projected", "hoisted"):
        for u, v in zip(jax.tree.leaves(_scan(a, form=form)), want, strict=True):
            assert u.dtype == v.dtype == jnp.dtype(case.dtype), form
            np.testing.assert_allclose(np.asarray(u, np.float32), np.asarray(v, np.float32), atol=atol, err_msg=form)


@pytest.mark.parametrize("case", [c for c in CASES if c.name in REFERENCE_CASES], ids=lambda c: c.name)
def test_each_form_matches_the_reference(case):
    kw = case.inputs(0)
    a = _bind(kw)
    ref32 = jax.tree.leaves(recurrent_cell_reference(**kw))
    ref_low = jax.tree.leaves(recurrent_cell_reference(**kw, dtype=jnp.dtype(case.dtype), precision=C.LOW_PRECISION))
    atol = {**C.ATOL, **OP.conformance_atol}
    for form in FORMS:
        out = jax.tree.leaves(_scan(a, form=form))
        for i, (o, r32, rl) in enumerate(zip(out, ref32, ref_low, strict=True)):
            assert o.dtype == jnp.dtype(case.dtype), (form, i, o.dtype)
            C.assert_close(f"{case.name}[{form}] output {i}", o, r32, rl, case.dtype, atol)


@pytest.mark.parametrize("case", [c for c in CASES if c.name == "gru-bidirectional-shared-state"], ids=lambda c: c.name)
def test_forms_have_the_same_gradients(case):
    """Every differentiable array (inputs, states, weights, biases) gets the same gradient from
    every form (JAX's derivative of the projected one, the others' own)."""
    a = _bind(case.inputs(0))
    shapes = jax.eval_shape(lambda a: recurrent_scan(a), a)
    rng = np.random.default_rng(1)
    cots = [jnp.asarray(rng.standard_normal(s.shape), jnp.float32) for s in jax.tree.leaves(shapes)]

    def loss(form):
        def f(a):
            outs = jax.tree.leaves(recurrent_scan(a, form=form))
            return sum(jnp.sum(o.astype(jnp.float32) * ct) for o, ct in zip(outs, cots, strict=True))

        return jax.jit(jax.grad(f))(a)

    want = jax.tree.leaves(loss("projected"))
    for form in ("stepwise", "hoisted"):
        for u, v in zip(jax.tree.leaves(loss(form)), want, strict=True):
            np.testing.assert_allclose(np.asarray(u), np.asarray(v), atol=1e-5, rtol=1e-5, err_msg=form)


def test_forms_agree_in_forward_mode_and_on_part_of_the_arguments():
    """The stepwise and hoisted forms' own derivative rule on an lstm with a cell state: forward
    mode, and reverse mode with tangents of the weights alone (the others symbolic zeros)."""
    case = next(c for c in CASES if c.name == "lstm-hc-odd")
    a = _bind(case.inputs(0))
    rng = np.random.default_rng(2)
    ta = jax.tree.map(lambda x: jnp.asarray(rng.standard_normal(x.shape), x.dtype), a)
    jvp = jax.jit(lambda a, ta, form: jax.jvp(lambda a: recurrent_scan(a, form=form), (a,), (ta,)), static_argnums=2)
    for u, v in zip(jax.tree.leaves(jvp(a, ta, "projected")), jax.tree.leaves(jvp(a, ta, "stepwise")), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), atol=1e-5, rtol=1e-5)

    def weights_grad(form):
        def f(w):
            out = recurrent_scan(dataclasses.replace(a, **w), form=form)[0]
            return jnp.sum(out * ta.inputs[..., :1])

        return jax.jit(jax.grad(f))({k: getattr(a, k) for k in ("w_ih", "w_hh", "b_ih", "b_hh")})

    for u, v in zip(jax.tree.leaves(weights_grad("projected")), jax.tree.leaves(weights_grad("stepwise")), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), atol=1e-5, rtol=1e-5)


def _args(batch: int, input_dim: int, hidden_dim: int = 8, dtype=jnp.float32) -> RecurrentCellArgs:
    g = 4 * hidden_dim
    w = {"w_ih": jnp.zeros((input_dim, g), dtype), "w_hh": jnp.zeros((hidden_dim, g), dtype)}
    return _bind({"inputs": jnp.zeros((batch, 2, input_dim), dtype), "hidden": None, "weights": w})


def test_the_form_rule():
    """Accelerators project first; a CPU steps from a few rows while one direction's ``w_ih`` is
    small enough to stay in cache (from many rows whatever its size), and hoists the projection
    otherwise."""
    # w_ih bytes = input_dim * 4 * hidden_dim(8) * itemsize
    at_limit = STEPWISE_MAX_W_IH_BYTES // (4 * 8 * 4)
    few, some, many = STEPWISE_MIN_BATCH - 1, STEPWISE_MIN_BATCH, STEPWISE_ANY_W_IH_BATCH
    assert scan_form(_args(16, 256), "cpu") == "stepwise"
    assert scan_form(_args(few, 256), "cpu") == "hoisted"
    assert scan_form(_args(some, at_limit), "cpu") == "stepwise"
    assert scan_form(_args(some, 2 * at_limit), "cpu") == "hoisted"
    assert scan_form(_args(many - 1, 2 * at_limit), "cpu") == "hoisted"
    assert scan_form(_args(many, 2 * at_limit), "cpu") == "stepwise"
    # bfloat16 weights take half the bytes
    assert scan_form(_args(some, 2 * at_limit, dtype=jnp.bfloat16), "cpu") == "stepwise"
    for platform in ("gpu", "tpu"):
        assert scan_form(_args(16, 256), platform) == "projected"
    with pytest.raises(ValueError, match="form must be one of"):
        recurrent_scan(_args(1, 4), form="fused")
