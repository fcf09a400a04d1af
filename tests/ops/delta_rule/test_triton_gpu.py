"""The Triton delta rules on the GPU beyond the shared conformance cases: the heuristic's tiles
(64-token chunks; under a per-channel gate the pair sums a program per 16-row block and the
inverse from the stored sums, its diagonal blocks exchanged between the program's threads through
memory) at sizes past one chunk per sequence, eagerly and under ``jit``, forward and every input's
gradient against the float32 reference; steep per-channel decays (the column steps inside the
sub-blocks); a packed batch; bit-identical reruns."""

from __future__ import annotations

import pytest

from ejkernel.ops.kernel_delta_attention.cases import DeltaRuleCase
from ejkernel.testing import conformance as C

from .._triton_gpu_checks import assert_deterministic, public_op

pytestmark = pytest.mark.gpu

OPS = {"kda": "kernel_delta_attention", "gdn": "gated_delta_rule"}

CASES = [
    DeltaRuleCase("kda-d128-bf16", op="kda", b=2, t=1000, h=2, dk=128, dv=128, init=True, ret=True, dtype="bfloat16"),
    DeltaRuleCase("kda-steep-d64", op="kda", b=1, t=517, h=2, dk=64, dv=64, strong_decay=True, ret=True),
    DeltaRuleCase("kda-varlen-gva", op="kda", lens=(300, 0, 1, 700, 129), h=2, hv=4, dk=64, dv=32, ret=True),
    DeltaRuleCase("gdn-d128-bf16", op="gdn", b=2, t=1000, h=2, gate="scalar", dk=128, dv=128, dtype="bfloat16"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_heuristic_tiles(case):
    op = OPS[case.op]
    C.check(public_op(op, platform="triton"), case, op=op, modes=("eager", "jit"))


@pytest.mark.parametrize("case", [CASES[0], CASES[3]], ids=lambda c: c.name)
def test_deterministic(case):
    assert_deterministic(OPS[case.op], case)
