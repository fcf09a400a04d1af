"""The TPU ragged paged attention kernel in Pallas' TPU interpreter, on the CPU.

Every shared case of ``ragged_page_attention_v2`` (decodes and prefill chunks mixed, padded batches
with padding rows and sequences without queries, odd sizes, GQA/MQA, soft cap, sliding window,
sinks; float32 and bfloat16; unused pages and slots are NaN) runs through the shared suite
(``check_impl`` on a pretend TPU) with the heuristic config (for these small caches: a sequence's
pages in one step) and with the implementation's ``test_configs`` (8-row query blocks, 3 pages a
step: sequences span query blocks, blocks hold several sequences, the last step of a walk leaves
stale slots, prefetches cross sequences and query blocks). The ``full`` matrix adds every dtype
twin (float16 must decline) and one page per step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.ops.ragged_page_attention_v2 import RaggedPageAttentionv2Config
from ejkernel.ops.ragged_page_attention_v2.cases import CASES, FULL_CASES, RaggedPageCase
from ejkernel.ops.ragged_page_attention_v2.reference import ragged_page_attention_v2_reference
from ejkernel.testing import conformance as C
from ejkernel_pallas.tpu import interpret_mode
from ejkernel_pallas.tpu.ragged_page_attention_v2 import PallasTpuRaggedPageAttentionv2

from .._pallas_support import TPU, TPU_KINDS, lower_for_tpu, on_tpu, pallas_kernel_names, registered

pytestmark = pytest.mark.interpret

OP = "ragged_page_attention_v2"
IMPL = registered(OP)
CONFIGS = {"heuristic": None, **IMPL.test_configs}
FULL_CONFIGS = {
    **CONFIGS,
    "q16-page1": RaggedPageAttentionv2Config(num_kv_pages_per_block=1, num_queries_per_block=16),
}
_DEFAULT = {c.name for c in CASES}


def test_the_registered_implementation_and_its_test_configs():
    assert isinstance(IMPL, PallasTpuRaggedPageAttentionv2)
    assert IMPL.test_configs == {
        "q8-pages3": RaggedPageAttentionv2Config(num_kv_pages_per_block=3, num_queries_per_block=8)
    }
    assert {"float32", "bfloat16"} <= {c.dtype for c in CASES}


@pytest.mark.parametrize("cfg_id", list(CONFIGS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_conformance(case, cfg_id):
    with interpret_mode():
        assert C.check_impl(IMPL, case, CONFIGS[cfg_id], device=TPU) == "ok"


@pytest.mark.full
@pytest.mark.parametrize("cfg_id", list(FULL_CONFIGS))
@pytest.mark.parametrize("case", [c for c in FULL_CASES if c.name not in _DEFAULT], ids=lambda c: c.name)
def test_conformance_full(case, cfg_id):
    # float16 twins are declined as declared ("supports float32, bfloat16 inputs").
    want = "declined" if case.dtype == "float16" else "ok"
    with interpret_mode():
        assert C.check_impl(IMPL, case, FULL_CONFIGS[cfg_id], device=TPU) == want


def test_under_jit_with_traced_num_seqs_and_indices():
    """``num_seqs``, ``query_start_loc``, lengths and tables are traced: the schedule (which
    sequences each query block holds, the next busy block) is computed on the device. A padded
    batch (a sequence without queries, padding rows) with a window, so walks start mid-table."""
    case = RaggedPageCase(
        "jit", seqs=((9, 30), (0, 7), (1, 12), (14, 40)), max_num_seqs=6, pad_tokens=5, h=4, hk=2, window=(11, 0)
    )
    kw = case.inputs(seed=3)
    fn = on_tpu(IMPL, RaggedPageAttentionv2Config(num_kv_pages_per_block=2, num_queries_per_block=8))
    arrays = ("queries", "context_lens", "block_tables", "query_start_loc", "num_seqs")
    call = jax.jit(lambda *a: fn(**{**kw, **dict(zip(arrays, a, strict=True))}))
    with interpret_mode():
        out = call(*(kw[n] for n in arrays))
    ref = ragged_page_attention_v2_reference(**kw)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=2e-5, rtol=2e-5)
    assert bool(jnp.all(out[24:] == 0))  # padding rows


def _inputs():
    return RaggedPageCase("kernel", seqs=((5, 20), (1, 45)), h=4, hk=2, sinks=1, window=30).inputs()


def test_the_pallas_kernel_is_what_runs_reading_the_cache_in_place():
    kw = _inputs()
    fn = on_tpu(IMPL)
    assert pallas_kernel_names(lambda q: fn(**{**kw, "queries": q}), kw["queries"]) == [
        "ejkernel_ragged_page_attention"
    ]
    # The cache reaches the kernel as the caller's array, not a gathered or reordered copy.
    jaxpr = jax.make_jaxpr(lambda kv: fn(**{**kw, "kv_pages": kv}))(kw["kv_pages"]).jaxpr

    def pallas_eqns(jx):
        for eqn in jx.eqns:
            if eqn.primitive.name == "pallas_call":
                yield jx, eqn
            for value in eqn.params.values():
                for sub in value if isinstance(value, (list, tuple)) else (value,):
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        yield from pallas_eqns(inner)

    (outer, eqn), *rest = list(pallas_eqns(jaxpr))
    assert not rest
    assert outer is jaxpr and jaxpr.invars[0] in eqn.invars


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", TPU_KINDS)
def test_lowers_to_mosaic_for_tpu(kind, dtype):
    case = RaggedPageCase(
        "lower", seqs=((5, 29), (1, 17), (8, 40)), h=8, hk=2, d=128, page_size=16, window=20, sinks=2, soft_cap=5.0,
        dtype=dtype,
    )  # fmt: skip
    kw = case.inputs()
    fn = on_tpu(IMPL, RaggedPageAttentionv2Config(num_kv_pages_per_block=2, num_queries_per_block=16))
    module = lower_for_tpu(lambda q: fn(**{**kw, "queries": q}), kw["queries"], kind=kind)
    assert module.count("stablehlo.custom_call @tpu_custom_call") == 1
    assert "ejkernel_ragged_page_attention" in module
