"""The Triton paged attention kernel on the GPU beyond the shared conformance cases: the tiles the
heuristic picks at serving sizes (many decodes with split-K, decodes mixed with prefill chunks,
prefill only; 32 query heads over 8 kv heads, head dim 128, 16-token pages), for
``ragged_page_attention_v2`` and ``page_attention`` (both cache layouts), against the float32
reference, and bit-identical reruns (the splits are merged in a fixed order)."""

from __future__ import annotations

import pytest

from ejkernel.ops.page_attention.cases import PageAttentionCase
from ejkernel.ops.ragged_page_attention_v2.cases import RaggedPageCase
from ejkernel.testing import conformance as C

from .._triton_gpu_checks import assert_deterministic, public_op

pytestmark = pytest.mark.gpu

SERVING = dict(h=32, hk=8, d=128, page_size=16, dtype="bfloat16")


@pytest.mark.parametrize(
    "case",
    [
        RaggedPageCase("decodes", seqs=((1, 2048),) * 12 + ((1, 17), (1, 1)), **SERVING),
        RaggedPageCase("mixed", seqs=((1, 1500),) * 6 + ((256, 2048), (3, 700), (100, 100)), **SERVING),
        RaggedPageCase("prefill", seqs=((512, 512), (300, 1200)), max_num_seqs=4, pad_tokens=7, **SERVING),
        RaggedPageCase(
            "features", seqs=((1, 900), (130, 1000), (2, 64)), window=300, sinks=1, soft_cap=30.0, **SERVING
        ),
        RaggedPageCase("float32", seqs=((1, 1000), (200, 600)), h=8, hk=2, d=64, page_size=16),
    ],
    ids=lambda c: c.name,
)
def test_ragged_page_attention_heuristic_tiles(case):
    C.check(public_op("ragged_page_attention_v2", platform="triton"), case, op="ragged_page_attention_v2")


@pytest.mark.parametrize("layout", ["blocks_tokens_heads", "blocks_heads_tokens"])
def test_page_attention_heuristic_tiles(layout):
    case = PageAttentionCase(
        "decode", context_lens=(4096, 1, 0, 2500, 77), h=32, hk=8, d=128, dtype="bfloat16", cache_layout=layout
    )
    C.check(public_op("page_attention", platform="triton"), case, op="page_attention")


def test_deterministic():
    assert_deterministic("ragged_page_attention_v2", RaggedPageCase("det", seqs=((1, 3000), (64, 900)), **SERVING))
