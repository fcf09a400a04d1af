"""The TPU flash attention kernels (forward, dK/dV, dQ) in Pallas' TPU interpreter, on the CPU.

Every shared conformance case runs forward and backward against the float32 reference with the
heuristic config (for these small shapes mostly one block per sequence); the cases whose masks
make tiling matter run again with small tiles (16/32 query rows, 128 keys), so that the kernels
visit several blocks, skip blocks outside causal/window bands and mix masked and unmasked
blocks. Two extra cases span several 128-key blocks. Cases using a feature the kernels decline
assert the documented reason instead. (Interpret mode compiles slowly: ~4 s per case, hence the
subset for the second config.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from _pallas_support import TPU_KINDS, assert_declines, kernel_fn, lower_for_tpu, pallas_kernel_names

from ejkernel.modules import FlashAttentionConfig
from ejkernel.ops import BwdParams, FwdParams
from ejkernel.testing import conformance as C
from ejkernel_pallas.tpu import interpret_mode
from ejkernel_pallas.tpu.flash_attention import PallasTpuFlashAttention
from ejkernel_pallas.tpu.flash_attention.impl import NO_BIAS, NO_DROPOUT, NO_PAIRWISE, NO_VARLEN

IMPL = PallasTpuFlashAttention()
OP = "flash_attention"
KERNELS = ["ejkernel_flash_fwd", "ejkernel_flash_bwd_dkv", "ejkernel_flash_bwd_dq"]

CONFIGS = {
    "heuristic": None,
    "tiles16x128-bwd32x128": FlashAttentionConfig(
        fwd_params=FwdParams(q_blocksize=16, kv_blocksize=128),
        bwd_params=BwdParams(q_blocksize=32, kv_blocksize=128),
    ),
}
# Several 128-key blocks: band skipping (causal + window), partially masked blocks, segment ids
# with sinks and a soft cap, GQA groups accumulating into one dK/dV block; a head dim above 128
# that is not a multiple of it (zero-padded to 256 on the way in).
LONG_CASES = (
    C.AttentionCase("long-causal-window-gqa-d192", sq=260, sk=300, h=4, hk=1, d=192, causal=True, window=(150, 0)),
    C.AttentionCase("long-segments-sinks-softcap", sq=140, sk=270, h=4, hk=2, segments="packed", sinks=1, soft_cap=6.0),
)

# The second config runs where tiling changes what the kernels do: padded and odd lengths, GQA
# accumulation over groups, bands (causal, windows), segments, fully masked rows, sinks.
SMALL_TILE_CASES = (
    "odd200-d80", "gqa-d128", "mqa-cross", "dv-differs", "causal-sq<sk", "causal-sq>sk", "window-asym",
    "window-causal", "softcap", "segments-packed", "orphan-rows", "sinks2-orphans", "causal-bfloat16",
)  # fmt: skip


def expected_decline(case: C.AttentionCase) -> str | None:
    """The reason the implementation gives for ``case`` (checked in this order), or ``None``."""
    if case.bias is not None:
        return NO_BIAS
    if case.dropout:
        return NO_DROPOUT
    if case.varlen:
        return NO_VARLEN
    if case.pairwise:
        return NO_PAIRWISE
    return None


PARAMS = [
    pytest.param(case, cfg_id, id=f"{case.name}-{cfg_id}")
    for cfg_id in CONFIGS
    for case in C.FLASH_ATTENTION_CASES + LONG_CASES
    if cfg_id == "heuristic" or case.name in SMALL_TILE_CASES or case in LONG_CASES
]


def test_the_subset_names_real_cases():
    names = {c.name for c in C.FLASH_ATTENTION_CASES}
    assert set(SMALL_TILE_CASES) <= names
    assert not any(expected_decline(c) for c in C.FLASH_ATTENTION_CASES if c.name in SMALL_TILE_CASES)


@pytest.mark.parametrize(("case", "cfg_id"), PARAMS)
def test_conformance(case, cfg_id):
    fn = kernel_fn(IMPL, OP, CONFIGS[cfg_id])
    reason = expected_decline(case)
    if reason is not None:
        assert_declines(fn, C.make_attention_inputs(case), reason)
        return
    with interpret_mode():
        C.check_attention(fn, case)


def _basic_inputs():
    kw = C.make_attention_inputs(C.AttentionCase("kernels", b=1, sq=40, sk=40, h=4, hk=2, causal=True))
    return kw, (kw["query"], kw["key"], kw["value"])


def _loss(kw, cfg=None):
    fn = kernel_fn(IMPL, OP, cfg)

    def loss(q, k, v):
        return jnp.sum(fn(**{**kw, "query": q, "key": k, "value": v}).astype(jnp.float32) ** 2)

    return loss


def test_the_pallas_kernels_are_what_runs():
    """The traced program is the three Pallas kernels, so a fallback to XLA cannot pass."""
    kw, qkv = _basic_inputs()
    fwd = kernel_fn(IMPL, OP, None)
    assert pallas_kernel_names(lambda q, k, v: fwd(**{**kw, "query": q, "key": k, "value": v}), *qkv) == KERNELS[:1]
    assert sorted(pallas_kernel_names(jax.grad(_loss(kw), argnums=(0, 1, 2)), *qkv)) == sorted(KERNELS)


@pytest.mark.parametrize("kind", TPU_KINDS)
def test_lowers_to_mosaic_for_tpu(kind):
    """Pallas lowers forward and backward to Mosaic for real TPUs (block shapes are checked
    against the TPU tiling there), with every supported feature on: one TPU custom call per
    kernel."""
    case = C.AttentionCase(
        "lower", b=1, sq=40, sk=300, h=4, hk=2, dtype="bfloat16", causal=True, window=(200, 3),
        segments="packed", sinks=2, soft_cap=5.0,
    )  # fmt: skip
    kw = C.make_attention_inputs(case)
    loss = _loss(kw, CONFIGS["tiles16x128-bwd32x128"])
    module = lower_for_tpu(jax.grad(loss, argnums=(0, 1, 2)), kw["query"], kw["key"], kw["value"], kind=kind)
    assert module.count("stablehlo.custom_call @tpu_custom_call") == 3
    for name in KERNELS:
        assert name in module
