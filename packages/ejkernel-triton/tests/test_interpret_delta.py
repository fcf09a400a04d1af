"""The Triton delta-rule kernels (``kernel_delta_attention``, ``gated_delta_rule``) with their host
wrappers, in Triton's interpreter on the CPU (``TRITON_INTERPRET=1``; ``nox -s triton_interpret``).

Every conformance case of both ops (outputs, final states and the gradients of every input) on
a pretend Hopper GPU with 16-token chunks and 16 value columns per program (several chunks and
value blocks per head), through the shared suite; bfloat16 cases run in float16 (the
interpreter's ``tl.dot`` is wrong on bfloat16).
"""

from __future__ import annotations

import os

import pytest

from ejkernel.ops import DeviceInfo, kernel_registry
from ejkernel.ops.gated_delta_rule import GatedDeltaRuleConfig
from ejkernel.ops.gated_delta_rule.cases import CASES as GDN_CASES
from ejkernel.ops.kernel_delta_attention import KernelDeltaAttentionConfig
from ejkernel.ops.kernel_delta_attention.cases import CASES as KDA_CASES
from ejkernel.testing import conformance as C

if os.environ.get("TRITON_INTERPRET") != "1":  # the kernels must be decorated in interpreter mode
    raise RuntimeError("run with TRITON_INTERPRET=1 (nox -s triton_interpret)")

from ejkernel_triton._launch import interpreted

GPU = DeviceInfo(platform="gpu", kind="interpreter", compute_capability=(9, 0))
CONFIGS = {
    "kernel_delta_attention": KernelDeltaAttentionConfig(chunk_size=16, chunked=True, block_v=16, num_warps=4),
    "gated_delta_rule": GatedDeltaRuleConfig(chunk_size=16, chunked=True, block_v=16, num_warps=4),
}


def _f16(c):
    return c.with_dtype("float16") if c.dtype == "bfloat16" else c


PARAMS = [("kernel_delta_attention", _f16(c)) for c in KDA_CASES] + [("gated_delta_rule", _f16(c)) for c in GDN_CASES]


@pytest.fixture(autouse=True)
def _interpreted():
    with interpreted():
        yield


@pytest.mark.parametrize(("op", "case"), PARAMS, ids=lambda x: x if isinstance(x, str) else x.name)
def test_conformance(op, case):
    impl = kernel_registry.get(op, platform="triton")
    assert C.check_impl(impl, case, CONFIGS[op], device=GPU) == "ok"
