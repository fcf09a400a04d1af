"""The Triton ``state_space_v1`` kernels with their host wrappers in Triton's interpreter (CPU).

Run by ``nox -s triton_interpret`` (``TRITON_INTERPRET=1``). The conformance cases go through
``check_impl`` on a pretend Hopper GPU (output and the gradient of every input against the float32
reference; the interpreter poisons unwritten outputs with NaN), with tiny tiles (many chunks and
channel blocks, ragged tails) and with the heuristic's; the final state (``return_state``) and the
decode step are checked directly. float16 stands in for bfloat16 (NumPy has no bfloat16).
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.ops import DeviceInfo, kernel_registry, run_impl
from ejkernel.ops.state_space_v1 import StateSpaceV1Config
from ejkernel.ops.state_space_v1.cases import CASES as SSM_CASES
from ejkernel.ops.state_space_v1.cases import StateSpaceV1Case
from ejkernel.ops.state_space_v1.reference import state_space_v1_reference
from ejkernel.testing import conformance as C

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("run with TRITON_INTERPRET=1 (nox -s triton_interpret)", allow_module_level=True)

from ejkernel_triton._launch import interpreted
from ejkernel_triton.state_space_v1 import TritonStateSpaceV1

pytestmark = pytest.mark.interpret

OP = "state_space_v1"
GPU = DeviceInfo(platform="gpu", kind="interpreter", compute_capability=(9, 0))
IMPL = kernel_registry.get(OP, platform="triton")
CONFIGS = {
    "e4-d8": StateSpaceV1Config(block_d=8, block_e=4, num_warps=2, num_stages=1),
    "e8-d4": StateSpaceV1Config(block_d=4, block_e=8, num_warps=1, num_stages=1),
    "e4-d16": StateSpaceV1Config(block_d=16, block_e=4, num_warps=2, num_stages=1),  # backward: 2 channels
}
# The interpreter runs tl.associative_scan as a Python loop per element: small cases of the same
# kinds as the shared ones (ragged chunks and channel blocks, a padded state axis, gate, state in,
# custom activation, decode, length 1); the GPU runs the shared cases themselves.
CASES = [
    StateSpaceV1Case("odd", b=2, s=13, d=10, n=3),
    StateSpaceV1Case("gate-state", b=1, s=9, d=8, n=4, gate=True, initial_state=True),
    StateSpaceV1Case("gate-state", b=1, s=9, d=8, n=4, gate=True, initial_state=True).with_dtype("float16"),
    StateSpaceV1Case("gate-tanh", b=1, s=6, d=4, n=2, gate=True, act="tanh"),
    StateSpaceV1Case("decode", b=2, d=6, n=4, gate=True, decode=True),
    StateSpaceV1Case("len1", b=2, s=1, d=5, n=2, initial_state=True),
]
assert {c.name for c in SSM_CASES} >= {"odd", "gate-state", "gate-tanh", "decode", "len1"}


@pytest.fixture(autouse=True)
def _interpreted():
    with interpreted():
        yield


def test_the_registered_implementation():
    assert isinstance(IMPL, TritonStateSpaceV1)
    assert IMPL.available(GPU) is None


@pytest.mark.parametrize("cfg_id", list(CONFIGS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_conformance(case, cfg_id):
    assert C.check_impl(IMPL, case, CONFIGS[cfg_id], device=GPU) == "ok"


@pytest.mark.parametrize("cfg_id", ["e4-d8", "e4-d16"])
@pytest.mark.parametrize("programs", [1, 6])
def test_backward_channel_groups(programs, cfg_id, monkeypatch):
    """The backward's programs walk several channel blocks each (one group, then groups of uneven
    reach over a ragged channel axis): dB and dC summed across the blocks in registers, every
    block's dx, ddt, dA, dD written. The carry recurrence runs two chunks a block over three
    chunks (a block reaching before the first chunk)."""
    from ejkernel_triton.state_space_v1 import _call
    from ejkernel_triton.state_space_v1 import heuristics as H

    monkeypatch.setattr(H, "BWD_PROGRAMS", programs)
    monkeypatch.setattr(H, "CARRY_BLOCK_C", 2)
    cfg = CONFIGS[cfg_id]
    case = StateSpaceV1Case("groups", b=1, s=9, d=10, n=3, gate=True, initial_state=True)
    spec = _call.make_spec(C.bind(OP, **case.inputs(0)), cfg)
    assert spec.bwd_group()[1] == (1 if programs == 1 else 2), spec.bwd_group()
    assert C.check_impl(IMPL, case, cfg, device=GPU) == "ok"


def _run(case: StateSpaceV1Case, cfg):
    kw = case.inputs(seed=3)
    return kw, run_impl(IMPL, C.bind(OP, **kw), cfg, device=GPU)


@pytest.mark.parametrize("cfg_id", list(CONFIGS))
def test_final_state_and_its_gradient(cfg_id):
    """``return_state``: the final state matches the reference's, and gradients flow through it
    (the cotangent of the final state enters the backward kernel)."""
    case = StateSpaceV1Case("final-state", b=2, s=11, d=10, n=3, gate=True, initial_state=True, return_state=True)
    kw, (y, h) = _run(case, CONFIGS[cfg_id])
    ref_y, ref_h = state_space_v1_reference(**kw)
    assert h.dtype == jnp.float32 and h.shape == (2, 10, 3)
    np.testing.assert_allclose(np.asarray(y), np.asarray(ref_y), atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(np.asarray(h), np.asarray(ref_h), atol=2e-5, rtol=2e-5)

    names = ("hidden_states", "A", "B", "C", "D", "dt", "gate", "initial_state")
    rng = np.random.default_rng(5)
    wy = jnp.asarray(rng.standard_normal(y.shape), jnp.float32)
    wh = jnp.asarray(rng.standard_normal(h.shape), jnp.float32)

    def loss(fn):
        def f(arrays):
            out_y, out_h = fn({**kw, **arrays})
            return jnp.sum(out_y * wy) + jnp.sum(out_h * wh)

        return jax.grad(f)({n: kw[n] for n in names})

    got = loss(lambda k: run_impl(IMPL, C.bind(OP, **k), CONFIGS[cfg_id], device=GPU))
    want = loss(lambda k: state_space_v1_reference(**k))
    for n in names:
        np.testing.assert_allclose(np.asarray(got[n]), np.asarray(want[n]), atol=1e-4, rtol=1e-4, err_msg=n)


def test_decode_steps_continue_the_scan():
    """Running a sequence in two calls (the state carried) and then token by token (decode
    steps) gives the one-call result."""
    case = StateSpaceV1Case("split", b=2, s=11, d=8, n=4, gate=True, return_state=True)
    kw = case.inputs(seed=1)
    cfg = CONFIGS["e4-d8"]

    def call(**k):
        return run_impl(IMPL, C.bind(OP, **k), cfg, device=GPU)

    y_all, h_all = call(**kw)
    seq = ("hidden_states", "B", "C", "dt", "gate")
    first = {**kw, **{n: kw[n][:, :6] for n in seq}}
    y1, h = call(**first)
    ys = [y1]
    for t in range(6, 11):
        step = {**kw, **{n: kw[n][:, t] for n in seq}, "initial_state": h}
        y_t, h = call(**step)
        assert y_t.shape == (2, 8)
        ys.append(y_t[:, None])
    np.testing.assert_allclose(np.asarray(jnp.concatenate(ys, 1)), np.asarray(y_all), atol=3e-5, rtol=3e-5)
    np.testing.assert_allclose(np.asarray(h), np.asarray(h_all), atol=3e-5, rtol=3e-5)


@pytest.mark.parametrize("shared_params", [True, False], ids=["folded", "mapped"])
def test_vmap_and_grad_of_vmap(shared_params):
    """A vmapped axis folds into the batch when A and D are shared, else maps; gradients too."""
    cfg = CONFIGS["e4-d8"]
    kws = [StateSpaceV1Case("v", b=2, s=7, d=6, n=3, gate=True, initial_state=True).inputs(seed=i) for i in range(2)]
    per_example = ("hidden_states", "B", "C", "dt", "gate", "initial_state")
    mapped = per_example if shared_params else (*per_example, "A", "D")
    stacked = {n: jnp.stack([kw[n] for kw in kws]) for n in mapped}
    shared = {n: kws[0][n] for n in ("A", "D") if n not in mapped}

    def ours(a):
        return jnp.sum(run_impl(IMPL, C.bind(OP, **a, **shared), cfg, device=GPU) ** 2)

    def ref(a):
        return jnp.sum(state_space_v1_reference(**a, **shared) ** 2)

    np.testing.assert_allclose(np.asarray(jax.vmap(ours)(stacked)), np.asarray(jax.vmap(ref)(stacked)), rtol=2e-5)
    got, want = jax.vmap(jax.grad(ours))(stacked), jax.vmap(jax.grad(ref))(stacked)
    for n in mapped:
        np.testing.assert_allclose(np.asarray(got[n]), np.asarray(want[n]), atol=1e-4, rtol=1e-4, err_msg=n)
