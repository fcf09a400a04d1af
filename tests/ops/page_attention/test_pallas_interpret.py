"""The TPU paged-decode kernel in Pallas' TPU interpreter, on the CPU.

Every shared case (ragged lengths including 0, GQA/MQA, soft cap, sliding window, sinks, a value
head dim of its own; unused page slots are NaN) runs through the shared suite (``check_impl`` on
a pretend TPU) with the heuristic config (for these small caches: every page of a sequence in
one step), with the implementation's ``test_configs`` (32 tokens per step) and with one page per
step (many steps per sequence, so the block-table walk, the skipped steps before a window and
the prefetch of the next step, within a sequence and across sequences, all run).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.ops.page_attention import PageAttentionConfig
from ejkernel.ops.page_attention.cases import CASES, PageAttentionCase
from ejkernel.testing import conformance as C
from ejkernel.testing import page_attention_reference
from ejkernel_pallas.tpu import interpret_mode
from ejkernel_pallas.tpu.page_attention import PallasTpuPageAttention

from .._pallas_support import TPU, TPU_KINDS, lower_for_tpu, on_tpu, pallas_kernel_names, registered

pytestmark = pytest.mark.interpret

OP = "page_attention"
IMPL = registered(OP)


def one_page_per_step(case: PageAttentionCase) -> PageAttentionConfig:
    return PageAttentionConfig(tokens_per_block=case.block_size)


CONFIGS = {
    "heuristic": lambda case: None,
    **{cfg_id: (lambda case, cfg=cfg: cfg) for cfg_id, cfg in IMPL.test_configs.items()},
    "1page-per-step": one_page_per_step,
}


def test_the_registered_implementation_and_its_test_configs():
    assert isinstance(IMPL, PallasTpuPageAttention)
    assert IMPL.test_configs == {"step32tokens": PageAttentionConfig(tokens_per_block=32)}


@pytest.mark.parametrize("cfg_id", list(CONFIGS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_conformance(case, cfg_id):
    with interpret_mode():
        assert C.check_impl(IMPL, case, CONFIGS[cfg_id](case), device=TPU) == "ok"


def test_under_jit_with_traced_lengths_and_tables():
    """Lengths and block tables are traced: the schedule (steps to skip, next sequence to
    prefetch) is computed on the device. The window makes early steps skip."""
    case = PageAttentionCase("jit", context_lens=(70, 0, 9, 40), h=4, hk=2, block_size=8, window=(20, 0))
    kw = case.inputs(seed=5)
    fn = on_tpu(IMPL, PageAttentionConfig(tokens_per_block=16))
    arrays = ("query", "key_cache", "value_cache", "context_lens", "block_tables")
    call = jax.jit(lambda *a: fn(**{**kw, **dict(zip(arrays, a, strict=True))}))
    with interpret_mode():
        out = call(*(kw[n] for n in arrays))
    ref = page_attention_reference(**kw)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=2e-5, rtol=2e-5)
    assert bool(jnp.all(out[1] == 0))


def _inputs():
    return PageAttentionCase("kernel", context_lens=(20, 45), h=4, hk=2, sinks=1, window=30).inputs()


def test_the_pallas_kernel_is_what_runs():
    kw = _inputs()
    fn = on_tpu(IMPL)
    assert pallas_kernel_names(lambda q: fn(**{**kw, "query": q}), kw["query"]) == ["ejkernel_page_attention"]


@pytest.mark.parametrize("layout", ["blocks_tokens_heads", "blocks_heads_tokens"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", TPU_KINDS)
def test_lowers_to_mosaic_for_tpu(kind, dtype, layout):
    # Either cache layout: the page copies and the per-head reads of VMEM lower for the TPU.
    case = PageAttentionCase(
        "lower", context_lens=(20, 45, 7), h=8, hk=2, block_size=16, sinks=2, window=30, soft_cap=5.0, dtype=dtype,
        cache_layout=layout,
    )  # fmt: skip
    kw = case.inputs()
    fn = on_tpu(IMPL, one_page_per_step(case))
    module = lower_for_tpu(lambda q: fn(**{**kw, "query": q}), kw["query"], kind=kind)
    assert module.count("stablehlo.custom_call @tpu_custom_call") == 1
    assert "ejkernel_page_attention" in module
