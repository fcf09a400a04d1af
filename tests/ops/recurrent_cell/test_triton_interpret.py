"""The Triton ``recurrent_cell`` kernel with its host wrapper in Triton's interpreter (CPU).

Run by ``nox -s triton_interpret`` (``TRITON_INTERPRET=1``). Every case goes through
``check_impl`` on a pretend Hopper GPU (outputs and final states against the float32 reference,
gradients through the declared XLA backward; the interpreter poisons unwritten outputs with NaN),
with the heuristic's tiles (the weights resident in registers at these hidden sizes) and with
16-wide tiles (hidden sizes above 16 stream the weights tile by tile, ragged tails masked).
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.ops import DeviceInfo, kernel_registry, run_impl
from ejkernel.ops.recurrent_cell import RecurrentCellConfig
from ejkernel.ops.recurrent_cell.cases import CASES as DEFAULT_CASES
from ejkernel.ops.recurrent_cell.cases import FULL_CASES, RecurrentCellCase
from ejkernel.ops.recurrent_cell.reference import recurrent_cell_reference
from ejkernel.testing import conformance as C

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("run with TRITON_INTERPRET=1 (nox -s triton_interpret)", allow_module_level=True)

from ejkernel_triton._launch import interpreted
from ejkernel_triton.recurrent_cell import TritonRecurrentCell

pytestmark = pytest.mark.interpret

OP = "recurrent_cell"
GPU = DeviceInfo(platform="gpu", kind="interpreter", compute_capability=(9, 0))
IMPL = kernel_registry.get(OP, platform="triton")
CONFIGS = {
    "heuristic": None,
    "b16-h16": RecurrentCellConfig(block_batch=16, block_hidden=16, num_warps=4),
}
# The interpreter computes in NumPy: float16 stands in for bfloat16 (its twins, and the long case,
# under -m full: each case takes seconds in the interpreter).
CASES = [c for c in DEFAULT_CASES if c.dtype == "float32"] + [
    pytest.param(c, marks=pytest.mark.full) for c in FULL_CASES if c.dtype == "float16" or c.name == "lstm-long"
]


@pytest.fixture(autouse=True)
def _interpreted():
    with interpreted():
        yield


def test_the_registered_implementation():
    assert isinstance(IMPL, TritonRecurrentCell)
    assert IMPL.available(GPU) is None


@pytest.mark.parametrize("cfg_id", list(CONFIGS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: getattr(c, "name", None))
def test_conformance(case, cfg_id):
    expected = "declined" if callable(case.activation) else "ok"
    assert C.check_impl(IMPL, case, CONFIGS[cfg_id], device=GPU) == expected


def test_streamed_weights_over_several_batch_tiles():
    """hidden 40 in 16-wide tiles (three column and reduction blocks, the last ragged) and a
    batch of 37 over three 16-row programs, both directions."""
    case = RecurrentCellCase("gru-streamed", "gru", batch=37, seq=5, input_dim=9, hidden_dim=40, bidirectional=True)
    assert C.check_impl(IMPL, case, CONFIGS["b16-h16"], device=GPU) == "ok"


def test_vmap():
    """jax-triton launches cannot be vmapped; the launcher maps over the vmapped axis."""
    kw = RecurrentCellCase("lstm", bias="single").inputs(0)
    xs = jnp.stack([kw["inputs"], -kw["inputs"]])

    def ours(x):
        return run_impl(IMPL, C.bind(OP, **{**kw, "inputs": x}), CONFIGS["b16-h16"], device=GPU)[0]

    def ref(x):
        return recurrent_cell_reference(**{**kw, "inputs": x})[0]

    np.testing.assert_allclose(np.asarray(jax.vmap(ours)(xs)), np.asarray(jax.vmap(ref)(xs)), atol=2e-5)
