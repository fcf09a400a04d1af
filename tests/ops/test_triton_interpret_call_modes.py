"""Every Triton implementation's host wrapper under ``jax.vmap`` (unless the op declares it
unsupported), forward and per-example gradients, in Triton's interpreter on a pretend Hopper GPU,
on the first case of each op its declaration accepts that is not bfloat16 (the interpreter's
``tl.dot`` is wrong on bfloat16).

Only vmap: it is the mode whose rule (``_launch._mapped_sequentially``) the interpreter runs as
the GPU does. An eager or sharded interpreted launch is a host callback whatever the GPU path
does; those modes run on the GPU (``test_call_modes_gpu.py``).
"""

from __future__ import annotations

import os

import pytest

from ejkernel.ops import DeviceInfo, kernel_registry
from ejkernel.ops.op import list_ops, op_class
from ejkernel.testing import conformance as C

if os.environ.get("TRITON_INTERPRET") != "1":  # the kernels must be decorated in interpreter mode
    pytest.skip("run with TRITON_INTERPRET=1 (nox -s triton_interpret)", allow_module_level=True)

from ejkernel_triton._launch import interpreted

pytestmark = pytest.mark.interpret

GPU = DeviceInfo(platform="gpu", kind="interpreter", compute_capability=(9, 0))
# ring_attention's cases run sharded through the public function, which a pretend GPU cannot
# reach; its blocks are flash_attention's kernels, checked here, and its ring runs on the GPU test.
SHARDED_OPS = {"ring_attention"}


def _params():
    # Inside interpreted(): the declarations then accept without jax-triton, which the
    # interpreter does not use (the triton_interpret session does not install it).
    with interpreted():
        yield from _accepted_params()


def _accepted_params():
    for op in list_ops():
        cases = [c for c in op_class(op).get_cases() if getattr(c, "dtype", "float32") != "bfloat16"]
        for impl in kernel_registry.implementations(op):
            if impl.name != "triton" or op in SHARDED_OPS:
                continue
            case = C.first_accepted_case(impl, cases, GPU)
            if case is not None:
                yield pytest.param(impl, case, id=f"{op}-{case.name}")


PARAMS = list(_params())


@pytest.fixture(autouse=True)
def _interpreted():
    with interpreted():
        yield


@pytest.mark.parametrize(("impl", "case"), PARAMS)
def test_call_modes(impl, case):
    modes = [m for m in C.call_modes(impl.op_name) if m == "vmap"]
    if not modes:
        pytest.skip(f"{impl.op_name} declares vmap unsupported: {op_class(impl.op_name).vmap_unsupported}")
    assert C.check_impl(impl, case, device=GPU, modes=modes) == "ok"


def test_every_triton_op_takes_part():
    registered = {i.op_name for op in list_ops() for i in kernel_registry.implementations(op) if i.name == "triton"}
    assert {p.values[0].op_name for p in PARAMS} == registered - SHARDED_OPS
