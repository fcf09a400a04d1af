"""The Mosaic GPU flash attention kernels (forward, dQ, dK/dV) in Pallas' GPU interpreter, on the CPU.

Every shared conformance case runs through the shared suite (``check_impl`` on a pretend H200),
forward and gradients against the float32 reference, with the heuristic config and with the
smallest tiles (several key tiles and refilled stages); cases using a feature the implementation
declares unsupported must raise the declared reason. The interpreter simulates the warpgroups,
shared memory, TMA copies and barriers, and fails a barrier phase left unobserved. The layouts of
the registers are not simulated: the H200 run (``test_pallas_gpu.py``) checks the lowering.
"""

from __future__ import annotations

import pytest

from ejkernel.ops import DeviceInfo
from ejkernel.ops.flash_attention.cases import CASES, AttentionCase
from ejkernel.testing import conformance as C
from ejkernel_pallas.gpu import interpret_mode
from ejkernel_pallas.gpu.flash_attention import PallasGpuFlashAttention

from .._pallas_support import registered

pytestmark = pytest.mark.interpret

OP = "flash_attention"
IMPL = registered(OP, name="pallas_gpu")
H200 = DeviceInfo(platform="gpu", kind="NVIDIA H200", compute_capability=(9, 0))
LONG_CASES = (
    AttentionCase("long-causal-gqa", sq=300, sk=420, h=4, hk=1, d=64, causal=True, dtype="bfloat16"),
    AttentionCase("long-softcap-d128", sq=260, sk=200, h=2, hk=2, d=128, soft_cap=6.0, dtype="float16"),
)
# The kernels take 16-bit inputs only: the float32 cases run in bfloat16 (the same masks and shapes).
_CASES = {c.name: c for c in CASES if c.dtype != "float32"}
_CASES.update({f"{c.name}-bfloat16": c.with_dtype("bfloat16") for c in CASES if c.dtype == "float32"})
SMALL_TILES = "tiles64x64-bwd64x64"
CONFIGS = {"heuristic": None, **IMPL.test_configs}
PARAMS = [
    pytest.param(case, cfg_id, id=f"{case.name}-{cfg_id}")
    for cfg_id in CONFIGS
    for case in [*_CASES.values(), *LONG_CASES]
]


def _declined(case: AttentionCase) -> str | None:
    return C.expected_decline(IMPL, C.bind(OP, **case.inputs()), H200)


def test_the_registered_implementation():
    assert isinstance(IMPL, PallasGpuFlashAttention)
    assert set(CONFIGS) == {"heuristic", SMALL_TILES}
    assert IMPL.available(DeviceInfo(platform="gpu", kind="NVIDIA A100", compute_capability=(8, 0)))
    assert IMPL.available(DeviceInfo(platform="cpu", kind="cpu"))
    assert IMPL.available(H200) is None


def test_the_kernels_take_every_case_of_their_features():
    """Plain, one-token, GQA/MQA at d 128, cross lengths, causal (both alignments), soft cap: the
    suite below runs the kernels on each, not only declines."""
    taken = {c.name.removesuffix("-bfloat16").removesuffix("-float16") for c in _CASES.values() if not _declined(c)}
    assert {"basic", "len1", "gqa-d128", "mqa-cross", "causal", "causal-sq<sk", "causal-sq>sk", "softcap"} <= taken
    assert not any(_declined(c) for c in LONG_CASES)


@pytest.mark.parametrize(("case", "cfg_id"), PARAMS)
def test_conformance(case, cfg_id):
    with interpret_mode():
        outcome = C.check_impl(IMPL, case, CONFIGS[cfg_id], device=H200)
    assert outcome == ("declined" if _declined(case) else "ok")
