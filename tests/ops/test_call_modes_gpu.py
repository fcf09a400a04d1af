"""Every GPU implementation of every op as users call it: eagerly (no ``jit`` anywhere), under
``jit``, ``jax.vmap`` (unless the op declares it unsupported) and inside a ``shard_map``, forward
and gradient, with its heuristic config, on the first case its declaration accepts, in bfloat16
where the op's cases have a bfloat16 twin (the dtype users run)."""

from __future__ import annotations

import pytest

from ejkernel.ops import kernel_registry
from ejkernel.ops.op import list_ops, op_class
from ejkernel.testing import conformance as C

pytestmark = pytest.mark.gpu


def _cases(op):
    cases = list(op_class(op).get_cases())
    low = [c for c in cases if getattr(c, "dtype", "") == "bfloat16"]
    return low + cases


def _params():
    for op in list_ops():
        for impl in kernel_registry.implementations(op):
            case = C.first_accepted_case(impl, _cases(op))
            if case is not None:
                yield pytest.param(impl, case, id=f"{op}-{impl.name}-{case.name}")


@pytest.mark.parametrize(("impl", "case"), list(_params()))
def test_call_modes_gpu(impl, case):
    assert C.check_impl(impl, case, modes=("jit", *C.call_modes(impl.op_name))) == "ok"
