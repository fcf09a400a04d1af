"""The Triton ``flash_mla_decode`` (paged latent decode, split-K) in Triton's interpreter (CPU).

Run by ``nox -s triton_interpret`` (``TRITON_INTERPRET=1``). The conformance cases (ragged
contexts including 0 and 1, page boundaries, several query tokens causal and not, rows at
negative positions, no rope lanes, odd widths, the log-sum-exp; unused page slots are NaN) go
through ``check_impl`` on a pretend Hopper GPU with the test config (16-row blocks, 16-token steps,
3 splits) and a few with the heuristic's tiles (one split: the kernel's normalizing store; the
rest under ``-m full``); float32 and float16 (the interpreter's ``tl.dot`` is wrong on bfloat16).
"""

from __future__ import annotations

import dataclasses
import os

import pytest

from ejkernel.ops import DeviceInfo, kernel_registry
from ejkernel.ops.flash_mla_decode import FlashMLADecodeConfig
from ejkernel.ops.flash_mla_decode.cases import FULL_CASES, MLADecodeCase
from ejkernel.testing import conformance as C

if os.environ.get("TRITON_INTERPRET") != "1":  # the kernels must be decorated in interpreter mode
    pytest.skip("run with TRITON_INTERPRET=1 (nox -s triton_interpret)", allow_module_level=True)

from ejkernel_triton._launch import interpreted
from ejkernel_triton.flash_mla_decode import TritonFlashMLADecode

pytestmark = pytest.mark.interpret

OP = "flash_mla_decode"
GPU = DeviceInfo(platform="gpu", kind="interpreter", compute_capability=(9, 0))
IMPL = kernel_registry.get(OP, platform="triton")
TEST_CFG = "h16-step16-split3"
CASES = [c for c in FULL_CASES if c.dtype == "float32"] + [
    c for c in FULL_CASES if c.dtype == "float16" and c.name.startswith(("ragged", "mtp2"))
]
HEURISTIC_CASES = ("ragged", "mtp3-short-contexts", "lse")


@pytest.fixture(autouse=True)
def _interpreted():
    with interpreted():
        yield


def test_the_registered_implementation():
    assert isinstance(IMPL, TritonFlashMLADecode)
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


def test_deepseek_widths_in_two_head_blocks():
    """DeepSeek's 512 + 64 lanes, two 64-row head blocks of one sequence sharing each latent tile
    (a small batch and context: the interpreter is slow), one split and two."""
    case = MLADecodeCase("dsv3-small", context_lens=(70, 0, 129), h=128, r=512, dr=64, page_size=64, dtype="float16")
    for splits in (1, 2):
        cfg = FlashMLADecodeConfig(block_h=64, block_n=32, num_splits=splits, num_warps=8, num_stages=1)
        assert C.check_impl(IMPL, dataclasses.replace(case, name=f"dsv3-small-split{splits}"), cfg, device=GPU) == "ok"
