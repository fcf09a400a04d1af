"""The Triton ``mean_pooling`` on the GPU beyond the shared conformance cases: the tiles the
heuristic picks at realistic sizes (packed, masked and dense, long sequences) against the op's
float32 reference, and bit-identical reruns."""

from __future__ import annotations

import pytest

from ejkernel.ops.mean_pooling.cases import MeanPoolingCase
from ejkernel.testing import conformance as C

from .._triton_gpu_checks import assert_deterministic, public_op

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "case",
    [
        MeanPoolingCase("packed-many", lengths=(0, 1, 4097, 3, 9000, 0, 12345, 1, 700), pad=50, hidden=1000),
        MeanPoolingCase("masked-bf16", batch=4, seq=1025, hidden=384, mask="keyword", dtype="bfloat16"),
        MeanPoolingCase("dense-fp16", batch=3, seq=8191, hidden=4096, dtype="float16"),
    ],
    ids=lambda c: c.name,
)
def test_mean_pooling_heuristic_tiles(case):
    C.check(public_op("mean_pooling", platform="triton"), case, op="mean_pooling")


def test_deterministic():
    assert_deterministic("mean_pooling", MeanPoolingCase("packed", lengths=(3, 5000, 0, 20000, 7), pad=9, hidden=512))
