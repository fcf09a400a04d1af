"""The Triton flash-attention forward's Hopper TMA kernels (``ejkernel_triton/flash_attention/
_fwd.py``) on the GPU: the shared conformance cases it serves, in bfloat16 and float16, with
the heuristic's tiles and others, forward and gradients against the float32 reference. Also: the launch really takes that kernel,
and a larger odd-length shape whose last tiles cross sequence ends."""

from __future__ import annotations

import jax
import pytest

from ejkernel.ops import BwdParams, FwdParams
from ejkernel.ops.flash_attention import FlashAttentionConfig
from ejkernel.ops.flash_attention.cases import CASES as FLASH_ATTENTION_CASES
from ejkernel.ops.flash_attention.cases import AttentionCase
from ejkernel.testing import conformance as C

pytestmark = pytest.mark.gpu

CASES = [
    c.with_dtype(dtype)
    for c in FLASH_ATTENTION_CASES
    if c.name in ("basic", "len1", "gqa-d128", "mqa-cross", "causal", "causal-sq<sk", "causal-sq>sk")
    for dtype in ("bfloat16", "float16")
]
BWD = BwdParams(64, 128, 8, 3)
CONFIGS = {
    "128x64x4x2": FwdParams(128, 64, 4, 2),  # the heuristic, causal or unaligned
    "ws-128x128x4x2": FwdParams(128, 128, 4, 2),  # the heuristic, non-causal and aligned
    "128x128x8x2": FwdParams(128, 128, 8, 2),
    "64x64x4x1": FwdParams(64, 64, 4, 1),
}


def _fn(fwd: FwdParams):
    import ejkernel

    cfg = FlashAttentionConfig(fwd_params=fwd, bwd_params=BWD)
    return lambda **kw: ejkernel.flash_attention(**kw, platform="triton", cfg=cfg)


@pytest.mark.parametrize("cfg_id", list(CONFIGS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_tma_forward_conformance(case, cfg_id):
    from ejkernel_triton.flash_attention import _spec

    args = C.bind("flash_attention", **case.inputs())
    assert _spec.make_spec(args, CONFIGS[cfg_id], BWD).tma, "the call should take the TMA kernel"
    C.check(_fn(CONFIGS[cfg_id]), case, op="flash_attention")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("d", [64, 128])
def test_tma_warp_specialized_forward(d, dtype):
    """Non-causal, lengths multiples of 128: the heuristic picks the warp-specialized kernel."""
    from ejkernel_triton.flash_attention import _call, _spec

    case = AttentionCase(name=f"tma-ws-{d}", b=2, sq=256, sk=384, h=8, hk=2, d=d, dtype=dtype)
    fwd = CONFIGS["ws-128x128x4x2"]
    args = C.bind("flash_attention", **case.inputs())
    assert _call._warp_specialized(_spec.make_spec(args, fwd, BWD))
    C.check(_fn(fwd), case, op="flash_attention")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_tma_forward_long_odd_sequences(causal):
    """b3, sq 1000 / sk 1300 (tiles cross sequence ends), GQA 8/2, d128: forward and gradients."""
    case = AttentionCase(
        name=f"tma-odd-{causal}", b=3, sq=1000, sk=1300, h=8, hk=2, d=128, causal=causal, dtype="bfloat16"
    )
    C.check(_fn(CONFIGS["128x64x4x2"]), case, op="flash_attention")
    assert jax.default_backend() == "gpu"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 256])
def test_tma_heuristic_tiles_per_head_dim(d, causal):
    """The heuristic's own tiles at head dims 64 (three stages) and 256 (8 warps, 193 KiB of
    shared memory), through the default call: b2, sq 700 / sk 900 (tiles cross sequence ends),
    GQA 4/2, bfloat16, forward and gradients."""
    import ejkernel
    from ejkernel_triton.flash_attention import _spec
    from ejkernel_triton.flash_attention import heuristics as H

    case = AttentionCase(name=f"tma-d{d}", b=2, sq=700, sk=900, h=4, hk=2, d=d, causal=causal, dtype="bfloat16")
    args = C.bind("flash_attention", **case.inputs())
    fwd = H.heuristic_fwd_tma(args)
    assert _spec.make_spec(args, fwd, BWD).tma, "the call should take the TMA kernel"
    assert fwd.num_stages == (3 if d == 64 else 2)
    C.check(
        lambda **kw: ejkernel.flash_attention(**kw, platform="triton"),
        case,
        op="flash_attention",
        modes=("jit", "eager"),
    )
