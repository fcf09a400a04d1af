"""The Triton ``page_attention`` (the decode path of the paged attention kernel shared with
``ragged_page_attention_v2``) in Triton's interpreter (CPU).

Run by ``nox -s triton_interpret`` (``TRITON_INTERPRET=1``). The conformance cases (ragged lengths
including 0, GQA, soft cap, window, sinks, a value head dim of its own, 4-D queries, both cache
layouts read in place; unused page slots are NaN) go through ``check_impl`` on a pretend Hopper
GPU with the test config (16-token steps, 3 splits), and two with the heuristic's tiles (the
rest under ``-m full``); float32 and float16 (the interpreter's ``tl.dot`` is wrong on bfloat16).
"""

from __future__ import annotations

import os

import pytest

from ejkernel.ops import DeviceInfo, kernel_registry
from ejkernel.ops.page_attention.cases import FULL_CASES
from ejkernel.testing import conformance as C

if os.environ.get("TRITON_INTERPRET") != "1":  # the kernels must be decorated in interpreter mode
    pytest.skip("run with TRITON_INTERPRET=1 (nox -s triton_interpret)", allow_module_level=True)

from ejkernel_triton._launch import interpreted
from ejkernel_triton.page_attention import TritonPageAttention

pytestmark = pytest.mark.interpret

OP = "page_attention"
GPU = DeviceInfo(platform="gpu", kind="interpreter", compute_capability=(9, 0))
IMPL = kernel_registry.get(OP, platform="triton")
TEST_CFG = "step16-split3"
CASES = [c for c in FULL_CASES if c.dtype == "float32"] + [
    c for c in FULL_CASES if c.dtype == "float16" and c.name.startswith("gqa4")
]
HEURISTIC_CASES = ("ragged", "heads-major-features")


@pytest.fixture(autouse=True)
def _interpreted():
    with interpreted():
        yield


def test_the_registered_implementation():
    assert isinstance(IMPL, TritonPageAttention)
    assert IMPL.available(GPU) is None
    assert TEST_CFG in IMPL.test_configs


def _params():
    for case in CASES:
        yield pytest.param(case, TEST_CFG, id=f"{TEST_CFG}-{case.name}")
        marks = () if case.name in HEURISTIC_CASES else pytest.mark.full
        yield pytest.param(case, "heuristic", id=f"heuristic-{case.name}", marks=marks)


@pytest.mark.parametrize(("case", "cfg_id"), list(_params()))
def test_conformance(case, cfg_id):
    cfg = IMPL.test_configs.get(cfg_id)
    assert C.check_impl(IMPL, case, cfg, device=GPU) == "ok"
