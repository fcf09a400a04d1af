"""The Mosaic GPU flash attention (``platform="pallas_gpu"``) on a Hopper GPU: the conformance
cases it takes, in bfloat16 and float16, eagerly and under ``jit``, forward and gradients against
the float32 reference, with its heuristic and its smallest tiles; and longer sequences at head
dims 64 and 128 (GQA, odd lengths, causal both ways). The interpreter run on the CPU
(``test_pallas_gpu_interpret.py``) checks the same kernels' logic; this checks their lowering."""

from __future__ import annotations

import pytest

from ejkernel.ops.flash_attention.cases import CASES, AttentionCase
from ejkernel.testing import conformance as C

pytestmark = pytest.mark.gpu

FEATURES = ("basic", "len1", "gqa-d128", "mqa-cross", "causal", "causal-sq<sk", "causal-sq>sk", "softcap")
TAKEN = [c.with_dtype(dt) for c in CASES if c.name in FEATURES for dt in ("bfloat16", "float16")]


def _fn(cfg_id: str):
    import ejkernel
    from ejkernel_pallas.gpu.flash_attention import PallasGpuFlashAttention

    cfg = PallasGpuFlashAttention.test_configs.get(cfg_id)
    return lambda **kw: ejkernel.flash_attention(**kw, platform="pallas_gpu", cfg=cfg)


@pytest.mark.parametrize("cfg_id", ["heuristic", "tiles64x64-bwd64x64"])
@pytest.mark.parametrize("case", TAKEN, ids=lambda c: c.name)
def test_conformance_cases(case, cfg_id):
    C.check(_fn(cfg_id), case, op="flash_attention", modes=("jit", "eager"))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
def test_long_sequences(d, causal):
    """b2, sq 1000 / sk 1300 (the last tiles cross the sequence ends), GQA 8/2, bfloat16."""
    case = AttentionCase(name=f"long-d{d}", b=2, sq=1000, sk=1300, h=8, hk=2, d=d, causal=causal, dtype="bfloat16")
    C.check(_fn("heuristic"), case, op="flash_attention")
