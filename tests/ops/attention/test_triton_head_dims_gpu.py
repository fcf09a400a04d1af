"""The Triton flash attention on the head dims its issue names (64, 80, 96, 128, 192, 256), on the
GPU, with the configs the heuristics pick: forward and gradients against the float32 reference.

The shared conformance cases cover d 64, 80 and 128; this adds every listed head dim in every
input dtype (the large heads in float32 are where the heuristics' shared-memory fit matters),
causal and not, GQA and odd lengths, and one case per head dim with all options at once."""

from __future__ import annotations

import dataclasses

import pytest

from ejkernel.ops.flash_attention.cases import CASES, AttentionCase
from ejkernel.testing import conformance as C

pytestmark = pytest.mark.gpu

HEAD_DIMS = (64, 80, 96, 128, 192, 256)
EVERYTHING = next(c for c in CASES if c.name == "everything")


def _fn(**kw):
    import ejkernel

    return ejkernel.flash_attention(**kw, platform="triton")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_head_dim(d, dtype, causal):
    """b2, sq 200 / sk 230, GQA 4/2: every tile of the last block crosses a sequence end."""
    case = AttentionCase(name=f"d{d}-{dtype}-{causal}", b=2, sq=200, sk=230, h=4, hk=2, d=d, causal=causal, dtype=dtype)
    C.check(_fn, case, op="flash_attention")


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_head_dim_everything(d):
    """Causal, window, soft cap, bias, packed segments, sinks and dropout together, in bfloat16."""
    C.check(_fn, dataclasses.replace(EVERYTHING, name=f"everything-d{d}", d=d, dtype="bfloat16"), op="flash_attention")
