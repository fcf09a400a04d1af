"""The XLA latent attention's two forms: the absorbed one and the non-absorbed one on materialized
keys and values, which ``materialize_pays`` picks for prefill. The conformance matrix runs every
case of ``flash_mla`` and ``deepseek_attn`` in the form its sizes pick; here each case runs in the
other form (output and gradients against the references), so both forms meet every case."""

from __future__ import annotations

import pytest

import ejkernel
from ejkernel.ops.deepseek_attn.cases import CASES as DSA_CASES
from ejkernel.ops.families.latent_attention import materialize_pays
from ejkernel.ops.flash_mla.cases import CASES as MLA_CASES
from ejkernel.ops.flash_mla.cases import MLACase
from ejkernel.testing import conformance as C
from ejkernel_xla.flash_mla import impl as xla_mla

CALLS = {
    "flash_mla": lambda **k: ejkernel.flash_mla(**k, platform="xla"),
    "deepseek_attn": lambda **k: ejkernel.deepseek_attn(**k, platform="xla"),
}
CASES = [("flash_mla", c) for c in MLA_CASES] + [("deepseek_attn", c) for c in DSA_CASES]


@pytest.mark.slow
@pytest.mark.parametrize(("op", "case"), CASES, ids=[f"{op}-{c.name}" for op, c in CASES])
def test_the_form_the_sizes_do_not_pick_matches_the_reference(op, case, monkeypatch):
    picked = materialize_pays(ejkernel.ops.get_op(op).bind(case.inputs(0)))
    monkeypatch.setattr(xla_mla, "materialize_pays", lambda args: not picked)
    C.check(CALLS[op], case, op=op)


def test_prefill_materializes_and_decode_absorbs():
    """DeepSeek-V3 sizes (r 512, rope 64, dn = dv = 128): from a few hundred queries per key on."""
    op = ejkernel.ops.get_op("flash_mla")

    def args(sq: int):
        kw = MLACase("c", b=1, sq=sq, sk=sq, h=2, hk=2, r=512, dn=128, dr=64, dv=128, causal=True).inputs(0)
        return op.bind(kw)

    assert not materialize_pays(args(1))
    assert not materialize_pays(args(64))
    assert materialize_pays(args(512))
