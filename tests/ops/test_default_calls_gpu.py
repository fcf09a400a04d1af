"""The calls a user's first minutes make on an NVIDIA GPU, with default options (no ``platform=``,
no ``cfg=``, no ``jit``), at the sizes they make them: each must run on the GPU's best
implementation and match the float32 reference."""

from __future__ import annotations

import pytest

from ejkernel.ops.executor import record_dispatches
from ejkernel.ops.flash_attention.cases import AttentionCase
from ejkernel.testing import conformance as C

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "case",
    [
        AttentionCase("readme-small", b=1, sq=256, sk=256, h=4, hk=4, d=64, causal=True, dtype="bfloat16"),
        AttentionCase("train-4096", b=2, sq=4096, sk=4096, h=16, hk=16, d=128, causal=True, dtype="bfloat16"),
    ],
    ids=lambda c: c.name,
)
def test_flash_attention_eager_by_default(case):
    """``ejkernel.flash_attention(q, k, v, causal=True)`` outside ``jit``, forward and ``jax.grad``."""
    import ejkernel

    with record_dispatches() as log:
        C.check(lambda **kw: ejkernel.flash_attention(**kw), case, op="flash_attention", modes=("eager",))
    # cuDNN accepts these calls and measured faster than Triton on every benchmarked shape.
    assert {d.platform for d in log} == {"cudnn"}, log
