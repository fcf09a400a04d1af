"""The Triton ``native_sparse_attention`` on the GPU beyond the shared conformance cases: the
tiles the heuristic picks at realistic sizes (NSA's block 64 and 16 selected blocks, GQA groups
of 16, d 128, a 512 window, packed sequences) against the op's float32 reference, forward and
gradients, and bit-identical forward reruns."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import ejkernel
from ejkernel.ops.native_sparse_attention.cases import NSACase
from ejkernel.testing import conformance as C

from .._triton_gpu_checks import public_op

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "case",
    [
        NSACase("nsa-2k-bf16", b=1, s=2048, h=32, hk=2, d=128, bs=64, count=16, window=512, dtype="bfloat16"),
        NSACase(
            "explicit-1k-fp16",
            b=2,
            s=1100,
            h=16,
            hk=1,
            d=64,
            bs=64,
            selected=8,
            count=None,
            gates=("slc",),
            dtype="float16",
        ),
        NSACase(
            "varlen-bf16",
            lengths=(700, 1, 0, 1300, 63),
            pad=40,
            h=16,
            hk=1,
            d=128,
            bs=64,
            count=8,
            window=128,
            dtype="bfloat16",
        ),
        NSACase("fp32-d96", b=1, s=777, h=8, hk=4, d=96, dv=64, bs=32, count=6),
    ],
    ids=lambda c: c.name,
)
def test_native_sparse_attention_heuristic_tiles(case):
    C.check(public_op("native_sparse_attention", platform="triton"), case, op="native_sparse_attention")


def test_forward_deterministic():
    """The forward is bit-identical across runs (the kernel has no atomics). The backward is the
    JAX branch's VJP, whose gathers transpose to scatter-adds (atomics on a GPU): not compared."""
    kw = NSACase("det", b=1, s=1024, h=16, hk=1, d=128, bs=64, count=8, window=256, dtype="bfloat16").inputs(0)
    arrays = {n: x for n, x in kw.items() if isinstance(x, jax.Array)}
    rest = {n: x for n, x in kw.items() if n not in arrays}
    g = jax.jit(lambda a: ejkernel.native_sparse_attention(**a, **rest, platform="triton"))
    first = np.asarray(g(arrays))
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(g(arrays)), first)
