"""The TPU paged-decode kernel in Pallas' TPU interpreter, on the CPU.

Every shared case (ragged lengths including 0, GQA/MQA, soft cap, sliding window, sinks, a value
head dim of its own; unused page slots are NaN) runs with the heuristic config (for these small
caches: every page of a sequence in one step) and with one page per step (many steps per
sequence, so the block-table walk, the skipped steps before a window and the prefetch of the
next step, within a sequence and across sequences, all run).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _pallas_support import TPU_KINDS, kernel_fn, lower_for_tpu, pallas_kernel_names

from ejkernel.modules import PageAttentionConfig
from ejkernel.ops import FwdParams
from ejkernel.testing import conformance as C
from ejkernel.testing import page_attention_reference
from ejkernel_pallas.tpu import interpret_mode
from ejkernel_pallas.tpu.page_attention import PallasTpuPageAttention

IMPL = PallasTpuPageAttention()
OP = "page_attention"


def one_page_per_step(case: C.PageAttentionCase) -> PageAttentionConfig:
    return PageAttentionConfig(fwd_params=FwdParams(kv_blocksize=case.block_size))


CONFIGS = {"heuristic": lambda case: None, "1page-per-step": one_page_per_step}


@pytest.mark.parametrize("cfg_id", list(CONFIGS))
@pytest.mark.parametrize("case", C.PAGE_ATTENTION_CASES, ids=lambda c: c.name)
def test_conformance(case, cfg_id):
    with interpret_mode():
        C.check_page_attention(kernel_fn(IMPL, OP, CONFIGS[cfg_id](case)), case)


def test_under_jit_with_traced_lengths_and_tables():
    """Lengths and block tables are traced: the schedule (steps to skip, next sequence to
    prefetch) is computed on the device. The window makes early steps skip."""
    case = C.PageAttentionCase("jit", context_lens=(70, 0, 9, 40), h=4, hk=2, block_size=8, window=(20, 0))
    kw = C.make_page_inputs(case, seed=5)
    fn = kernel_fn(IMPL, OP, PageAttentionConfig(fwd_params=FwdParams(kv_blocksize=16)))
    arrays = ("query", "key_cache", "value_cache", "context_lens", "block_tables")
    call = jax.jit(lambda *a: fn(**{**kw, **dict(zip(arrays, a, strict=True))}))
    with interpret_mode():
        out = call(*(kw[n] for n in arrays))
    ref = page_attention_reference(**kw)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=2e-5, rtol=2e-5)
    assert bool(jnp.all(out[1] == 0))


def _inputs():
    return C.make_page_inputs(C.PageAttentionCase("kernel", context_lens=(20, 45), h=4, hk=2, sinks=1, window=30))


def test_the_pallas_kernel_is_what_runs():
    kw = _inputs()
    fn = kernel_fn(IMPL, OP, None)
    assert pallas_kernel_names(lambda q: fn(**{**kw, "query": q}), kw["query"]) == ["ejkernel_page_attention"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", TPU_KINDS)
def test_lowers_to_mosaic_for_tpu(kind, dtype):
    case = C.PageAttentionCase(
        "lower", context_lens=(20, 45, 7), h=8, hk=2, block_size=16, sinks=2, window=30, soft_cap=5.0, dtype=dtype
    )
    kw = C.make_page_inputs(case)
    fn = kernel_fn(IMPL, OP, one_page_per_step(case))
    module = lower_for_tpu(lambda q: fn(**{**kw, "query": q}), kw["query"], kind=kind)
    assert module.count("stablehlo.custom_call @tpu_custom_call") == 1
    assert "ejkernel_page_attention" in module
