"""The Triton ``native_sparse_attention`` (its selected-blocks kernel with the host wrapper) in
Triton's interpreter (CPU).

Run by ``nox -s triton_interpret`` (``TRITON_INTERPRET=1``). Conformance cases go through
``check_impl`` on a pretend Hopper GPU (output and gradients against the float32 reference; the
padding rows of packed sequences are NaN, and the interpreter poisons unwritten outputs with
NaN), with the heuristic's tiles and with key steps smaller than a block.
"""

from __future__ import annotations

import os

import pytest

from ejkernel.ops import DeviceInfo, kernel_registry
from ejkernel.ops.native_sparse_attention import NativeSparseAttentionConfig
from ejkernel.ops.native_sparse_attention.cases import FULL_CASES
from ejkernel.testing import conformance as C

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("run with TRITON_INTERPRET=1 (nox -s triton_interpret)", allow_module_level=True)

from ejkernel_triton._launch import interpreted
from ejkernel_triton.native_sparse_attention import TritonNativeSparseAttention

pytestmark = pytest.mark.interpret

OP = "native_sparse_attention"
GPU = DeviceInfo(platform="gpu", kind="interpreter", compute_capability=(9, 0))
IMPL = kernel_registry.get(OP, platform="triton")
CONFIGS = {
    "heuristic": None,
    "k16-q8": NativeSparseAttentionConfig(block_q=8, block_k=16, num_warps=2, num_stages=1),
}
# The interpreter computes in NumPy: float16 stands in for bfloat16. Small cases only (the
# interpreter runs a program per token and kv head).
NAMES = ("explicit", "explicit-counts", "computed-window", "varlen-explicit", "varlen-computed", "gqa16")
CASES = [c for c in FULL_CASES if c.dtype == "float32" and c.name in NAMES] + [
    c for c in FULL_CASES if c.name == "explicit-float16"
]


@pytest.fixture(autouse=True)
def _interpreted():
    with interpreted():
        yield


def test_the_registered_implementation():
    assert isinstance(IMPL, TritonNativeSparseAttention)
    assert IMPL.available(GPU) is None


@pytest.mark.parametrize("cfg_id", list(CONFIGS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_conformance(case, cfg_id):
    assert C.check_impl(IMPL, case, CONFIGS[cfg_id], device=GPU) == "ok"
