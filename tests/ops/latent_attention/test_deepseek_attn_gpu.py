"""The Triton ``deepseek_attn`` on the GPU beyond the shared conformance cases: DeepSeek-V3.2's
widths (MLA 512 + 64 over 128 heads, an indexer of 64 heads of dim 128) with the heuristic's
tiles against the op's float32 reference, forward and gradients (the gradients are the JAX
backward's), in a prefill, a decode step against a long cache, odd sizes in float16 and a narrow
float32 latent; the 8k prefill of the op's ``ARG_SPECS`` (top-2048) against the XLA
implementation; bit-identical forward reruns."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import ejkernel
from ejkernel.ops.deepseek_attn.cases import ARG_SPECS, DSACase
from ejkernel.testing import conformance as C

from .._triton_gpu_checks import public_op

pytestmark = pytest.mark.gpu

OP = "deepseek_attn"
DSV32 = dict(h=128, hk=128, r=512, dn=128, dr=64, dv=128, ih=64, idim=128, causal=True)


@pytest.mark.parametrize(
    "case",
    [
        DSACase("dsv32-prefill-2k-bf16", b=1, sq=2048, topk=512, dtype="bfloat16", **DSV32),
        DSACase("dsv32-decode-32k-bf16", b=4, sq=1, sk=32768, topk=2048, dtype="bfloat16", **DSV32),
        DSACase("dsv32-chunk-fp16", b=2, sq=333, sk=1500, topk=700, dtype="float16", **DSV32),
        DSACase(
            "gqa-odd-fp16", b=2, sq=1001, h=20, hk=5, r=512, dn=64, dr=64, dv=64, topk=300, causal=True, dtype="float16"
        ),
        DSACase("fp32-narrow", b=2, sq=777, h=16, hk=4, r=96, dn=32, dr=32, dv=32, topk=100, causal=True),
        DSACase(
            "non-causal-bf16",
            b=1,
            sq=512,
            h=64,
            hk=64,
            r=512,
            dn=128,
            dr=64,
            dv=128,
            topk=128,
            causal=False,
            dtype="bfloat16",
        ),
    ],
    ids=lambda c: c.name,
)
def test_heuristic_tiles(case):
    C.check(public_op(OP, platform="triton"), case, op=OP)


def test_eager():
    case = DSACase("dsv32-eager", b=1, sq=300, topk=128, dtype="bfloat16", **DSV32)
    C.check(public_op(OP, platform="triton"), case, op=OP, modes=("eager",))


def _spec_inputs():
    spec = dict(ARG_SPECS["deepseek-v3.2-prefill-8k"])
    return DSACase("dsv32-prefill-8k", dtype="bfloat16", causal=True, **spec).inputs(0)


def test_prefill_8k_matches_xla():
    """The realistic 8k prefill (top-2048 of 8192) forward: the Triton and XLA implementations
    share the selection, so they differ by bfloat16 rounding only."""
    kw = _spec_inputs()
    got = jax.jit(lambda kw: ejkernel.deepseek_attn(**kw, platform="triton"))(kw)
    want = jax.jit(lambda kw: ejkernel.deepseek_attn(**kw, platform="xla"))(kw)
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert np.all(np.isfinite(got))
    err = np.abs(got - want)
    scale = np.abs(want).max()
    assert err.max() <= 2e-2 * scale, (err.max(), scale)
    assert err.mean() <= 2e-3 * scale, (err.mean(), scale)


def test_forward_deterministic():
    """The forward is bit-identical across runs (no atomics). The backward is the JAX VJP, whose
    gathers transpose to scatter-adds (atomics on a GPU): not compared."""
    kw = DSACase("det", b=1, sq=1024, topk=256, dtype="bfloat16", **DSV32).inputs(0)
    arrays = {n: x for n, x in kw.items() if isinstance(x, jax.Array)}
    rest = {n: x for n, x in kw.items() if n not in arrays}
    g = jax.jit(lambda a: ejkernel.deepseek_attn(**a, **rest, platform="triton"))
    first = np.asarray(g(arrays))
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(g(arrays)), first)
