"""The Triton ``blocksparse_attention`` kernels, with their host wrapper, in Triton's interpreter (CPU).

Run by ``nox -s triton_interpret`` (``TRITON_INTERPRET=1``). Every conformance case goes through
``check_impl`` on a pretend Hopper GPU (output and the gradients of query, key, value and sinks
against the float32 reference; the interpreter poisons unwritten outputs with NaN), with small
tiles so every kernel walks several scheduled tiles (forward 16 x 16, backward 16 x 32 and
32 x 16). The interpreter's ``tl.dot`` is wrong on bfloat16 operands (NumPy has no bfloat16),
so the low-precision cases run in float16 here.
"""

from __future__ import annotations

import os

import pytest

from ejkernel.ops import BwdParams, DeviceInfo, FwdParams, kernel_registry
from ejkernel.ops.blocksparse_attention import BlockSparseAttentionConfig
from ejkernel.ops.blocksparse_attention.cases import CASES as BLOCKSPARSE_CASES
from ejkernel.testing import conformance as C

if os.environ.get("TRITON_INTERPRET") != "1":  # the kernels must be decorated in interpreter mode
    pytest.skip("run with TRITON_INTERPRET=1 (nox -s triton_interpret)", allow_module_level=True)

from ejkernel_triton._launch import interpreted
from ejkernel_triton.blocksparse_attention import TritonBlockSparseAttention

pytestmark = pytest.mark.interpret

OP = "blocksparse_attention"
GPU = DeviceInfo(platform="gpu", kind="interpreter", compute_capability=(9, 0))
CONFIGS = {
    "16x16-bwd16x32": BlockSparseAttentionConfig(
        fwd_params=FwdParams(q_blocksize=16, kv_blocksize=16, num_warps=4, num_stages=1),
        bwd_params=BwdParams(q_blocksize=16, kv_blocksize=32, num_warps=4, num_stages=1),
    ),
    "32x16-bwd32x16": BlockSparseAttentionConfig(
        fwd_params=FwdParams(q_blocksize=32, kv_blocksize=16, num_warps=4, num_stages=1),
        bwd_params=BwdParams(q_blocksize=32, kv_blocksize=16, num_warps=4, num_stages=1),
    ),
}
CASES = [c.with_dtype("float16") if c.dtype == "bfloat16" else c for c in BLOCKSPARSE_CASES]
IMPL = kernel_registry.get(OP, platform="triton")


@pytest.fixture(autouse=True)
def _interpreted():
    with interpreted():
        yield


def test_the_registered_implementation():
    assert isinstance(IMPL, TritonBlockSparseAttention)
    assert IMPL.available(GPU) is None


@pytest.mark.parametrize("cfg_id", list(CONFIGS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_conformance(case, cfg_id):
    assert C.check_impl(IMPL, case, CONFIGS[cfg_id], device=GPU) in ("ok", "declined")
