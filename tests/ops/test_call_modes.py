"""Every op as users call it besides ``jit`` (which the conformance matrix covers): eagerly,
under ``jax.vmap`` (unless the op declares it unsupported) and inside a ``shard_map``, forward and
gradient, on each implementation that runs here, on the first case of the op its declaration
accepts.

The GPU twin (``test_call_modes_gpu.py``) runs the same check on the GPU's
implementations; ``test_triton_interpret_call_modes.py`` on the Triton
kernels' host wrappers in Triton's interpreter.
"""

from __future__ import annotations

import pytest

from ejkernel.ops import kernel_registry
from ejkernel.ops.op import list_ops, op_class
from ejkernel.testing import conformance as C


def _params():
    for op in list_ops():
        cases = op_class(op).get_cases()
        for impl in kernel_registry.implementations(op):
            case = C.first_accepted_case(impl, cases)
            if case is not None:
                yield pytest.param(impl, case, id=f"{op}-{impl.name}-{case.name}")


@pytest.mark.slow
@pytest.mark.parametrize(("impl", "case"), list(_params()))
def test_call_modes(impl, case):
    assert C.check_impl(impl, case, modes=C.call_modes(impl.op_name)) == "ok"


def test_every_op_is_called_in_every_mode():
    """Each op has an implementation here that takes part (a test that skips an op cannot fail)."""
    assert {p.values[0].op_name for p in _params()} == set(list_ops())
