"""The Triton ``blocksparse_attention`` on the GPU beyond the shared conformance cases: the tiles the
heuristic picks at realistic sizes (long causal + local + document masks, chunked GQA, a block
mask, head dim 256) against the op's float32 reference (forward and gradients), and bit-identical
reruns."""

from __future__ import annotations

import pytest

from ejkernel.ops.blocksparse_attention.cases import BlockSparseCase
from ejkernel.testing import conformance as C

from .._triton_gpu_checks import assert_deterministic, public_op

pytestmark = pytest.mark.gpu

OP = "blocksparse_attention"


@pytest.mark.parametrize(
    "case",
    [
        BlockSparseCase("local-docs-bf16", b=2, sq=4096, sk=4096, h=8, hk=8, d=128, window=(512, 0),
                        segments="packed", dtype="bfloat16"),
        BlockSparseCase("chunked-gqa-bf16", b=1, sq=3000, sk=3000, h=16, hk=4, d=128, chunk=1024,
                        sinks=1, dtype="bfloat16"),
        BlockSparseCase("block-mask-fp16", b=1, sq=2048, sk=2560, h=4, hk=2, d=64, blocks=(128, 128),
                        causal=False, dtype="float16"),
        BlockSparseCase("d256-softcap-f32", b=1, sq=1031, sk=1031, h=2, hk=1, d=256, window=(300, 0),
                        soft_cap=30.0),
        BlockSparseCase("pairwise-orphans-bf16", b=2, sq=777, sk=777, h=4, hk=2, d=64, segments="orphans",
                        dtype="bfloat16"),
    ],
    ids=lambda c: c.name,
)  # fmt: skip
def test_blocksparse_attention_heuristic_tiles(case):
    C.check(public_op(OP, platform="triton"), case, op=OP)


def test_deterministic():
    assert_deterministic(
        OP, BlockSparseCase("docs", b=2, sq=2048, sk=2048, h=4, hk=2, d=128, window=(256, 0), segments="packed")
    )
