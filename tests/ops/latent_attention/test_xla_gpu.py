"""The XLA ``flash_mla`` and ``deepseek_attn`` on the GPU at DeepSeek sizes (128 heads, latent
512 + rope 64): the tiles the heuristic picks there (a few queries × all heads per tile) against
the float32 references, forward and gradients."""

from __future__ import annotations

import pytest

import ejkernel
from ejkernel.ops.deepseek_attn.cases import DSACase
from ejkernel.ops.flash_mla.cases import MLACase
from ejkernel.testing import conformance as C

pytestmark = pytest.mark.gpu

_DSV3 = dict(h=128, hk=128, r=512, dn=128, dr=64, dv=128, dtype="bfloat16")


@pytest.mark.parametrize(
    "case",
    [
        MLACase("dsv3-decode-4k", b=4, sq=1, sk=4096, causal=True, **_DSV3),
        MLACase("dsv3-chunk-256-of-2k", b=1, sq=256, sk=2048, causal=True, **_DSV3),
        MLACase("v2-lite-prefill-1k", b=1, sq=1024, h=16, hk=16, r=512, dn=128, dr=64, dv=128, causal=True),
    ],
    ids=lambda c: c.name,
)
def test_flash_mla_heuristic_tiles(case):
    C.check(lambda **k: ejkernel.flash_mla(**k, platform="xla"), case, op="flash_mla")


def test_deepseek_attn_heuristic_tiles():
    case = DSACase("dsa-1k-top128", b=1, sq=1024, h=16, hk=16, r=512, dn=128, dr=64, dv=128, causal=True,
                   ih=8, idim=64, topk=128, dtype="bfloat16")  # fmt: skip
    C.check(lambda **k: ejkernel.deepseek_attn(**k, platform="xla"), case, op="deepseek_attn")
