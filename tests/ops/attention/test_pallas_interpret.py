"""The TPU flash attention kernels (forward, dK/dV, dQ) in Pallas' TPU interpreter, on the CPU.

Every shared conformance case runs through the shared suite (``check_impl`` on a pretend TPU),
forward and backward against the float32 reference, with the heuristic config (for these small
shapes mostly one block per sequence); the cases whose masks make tiling matter run again with
the implementation's small-tile ``test_configs`` (16/32 query rows, 128 keys), so that the
kernels visit several blocks, skip blocks outside causal/window bands and mix masked and
unmasked blocks. Two extra cases span several 128-key blocks. Cases using a feature the
implementation declares unsupported must raise the declared reason (the suite decides which
from the declaration). (Interpret mode compiles slowly: ~4 s per case, hence the subset for the
second config.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from ejkernel.ops.flash_attention.cases import CASES, AttentionCase
from ejkernel.testing import conformance as C
from ejkernel_pallas.tpu import interpret_mode
from ejkernel_pallas.tpu.flash_attention import PallasTpuFlashAttention

from .._pallas_support import TPU, TPU_KINDS, lower_for_tpu, on_tpu, pallas_kernel_names, registered

pytestmark = pytest.mark.interpret

OP = "flash_attention"
IMPL = registered(OP)
KERNELS = ["ejkernel_flash_fwd", "ejkernel_flash_bwd_dkv", "ejkernel_flash_bwd_dq"]
SMALL_TILES = "tiles16x128-bwd32x128"

CONFIGS = {"heuristic": None, **IMPL.test_configs}
# Several 128-key blocks: band skipping (causal + window), partially masked blocks, segment ids
# with sinks and a soft cap, GQA groups accumulating into one dK/dV block; a head dim above 128
# that is not a multiple of it (zero-padded to 256 on the way in).
LONG_CASES = (
    AttentionCase("long-causal-window-gqa-d192", sq=260, sk=300, h=4, hk=1, d=192, causal=True, window=(150, 0)),
    AttentionCase("long-segments-sinks-softcap", sq=140, sk=270, h=4, hk=2, segments="packed", sinks=1, soft_cap=6.0),
)

# The second config runs where tiling changes what the kernels do: padded and odd lengths, GQA
# accumulation over groups, bands (causal, windows), segments, fully masked rows, sinks.
SMALL_TILE_CASES = (
    "odd200-d80", "gqa-d128", "mqa-cross", "dv-differs", "causal-sq<sk", "causal-sq>sk", "window-asym",
    "window-causal", "softcap", "segments-packed", "orphan-rows", "sinks2-orphans", "causal-bfloat16",
)  # fmt: skip

PARAMS = [
    pytest.param(case, cfg_id, id=f"{case.name}-{cfg_id}")
    for cfg_id in CONFIGS
    for case in CASES + LONG_CASES
    if cfg_id == "heuristic" or case.name in SMALL_TILE_CASES or case in LONG_CASES
]


def _declined(case: AttentionCase) -> str | None:
    return C.expected_decline(IMPL, C.bind(OP, **case.inputs()), TPU)


def test_the_registered_implementation_and_its_small_tiles():
    assert isinstance(IMPL, PallasTpuFlashAttention)
    assert set(CONFIGS) == {"heuristic", SMALL_TILES}


def test_the_subset_names_real_cases():
    names = {c.name for c in CASES}
    assert set(SMALL_TILE_CASES) <= names
    assert not any(_declined(c) for c in CASES + LONG_CASES if c.name in SMALL_TILE_CASES or c in LONG_CASES)


@pytest.mark.parametrize(("case", "cfg_id"), PARAMS)
def test_conformance(case, cfg_id):
    with interpret_mode():
        outcome = C.check_impl(IMPL, case, CONFIGS[cfg_id], device=TPU)
    assert outcome == ("declined" if _declined(case) else "ok")


def _basic_inputs():
    kw = AttentionCase("kernels", b=1, sq=40, sk=40, h=4, hk=2, causal=True).inputs()
    return kw, (kw["query"], kw["key"], kw["value"])


def _loss(kw, cfg=None):
    fn = on_tpu(IMPL, cfg)

    def loss(q, k, v):
        return jnp.sum(fn(**{**kw, "query": q, "key": k, "value": v}).astype(jnp.float32) ** 2)

    return loss


def test_the_pallas_kernels_are_what_runs():
    """The traced program is the three Pallas kernels, so a fallback to XLA cannot pass."""
    kw, qkv = _basic_inputs()
    fwd = on_tpu(IMPL)
    assert pallas_kernel_names(lambda q, k, v: fwd(**{**kw, "query": q, "key": k, "value": v}), *qkv) == KERNELS[:1]
    assert sorted(pallas_kernel_names(jax.grad(_loss(kw), argnums=(0, 1, 2)), *qkv)) == sorted(KERNELS)


@pytest.mark.parametrize("kind", TPU_KINDS)
def test_lowers_to_mosaic_for_tpu(kind):
    """Pallas lowers forward and backward to Mosaic for real TPUs (block shapes are checked
    against the TPU tiling there), with every supported feature on: one TPU custom call per
    kernel."""
    case = AttentionCase(
        "lower", b=1, sq=40, sk=300, h=4, hk=2, dtype="bfloat16", causal=True, window=(200, 3),
        segments="packed", sinks=2, soft_cap=5.0,
    )  # fmt: skip
    kw = case.inputs()
    loss = _loss(kw, CONFIGS[SMALL_TILES])
    module = lower_for_tpu(jax.grad(loss, argnums=(0, 1, 2)), kw["query"], kw["key"], kw["value"], kind=kind)
    assert module.count("stablehlo.custom_call @tpu_custom_call") == 3
    for name in KERNELS:
        assert name in module
