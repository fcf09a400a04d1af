"""The Triton paged attention kernel with its host wrapper in Triton's interpreter (CPU), through
``ragged_page_attention_v2`` and the other ops registered on it (``ragged_page_attention_v3``,
``unified_attention``, ``prefill_page_attention``: the last section).

Run by ``nox -s triton_interpret`` (``TRITON_INTERPRET=1``). The conformance cases (decodes and
prefill chunks mixed, padded batches with a ``[1]`` ``num_seqs``, sequences with no query, odd
head dims and page sizes, GQA, soft cap, window, sinks; every unused page slot is NaN and the
interpreter poisons unwritten outputs with NaN) go through ``check_impl`` on a pretend Hopper GPU
with the implementation's test config (one page per key step, 2-token prefill tiles, 3 decode
splits: every path of the kernel), and a few with the heuristic's tiles (the rest under ``-m
full``). The interpreter's ``tl.dot`` is wrong on bfloat16, so the cases run in float32 and float16.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.ops import DeviceInfo, kernel_registry, run_impl
from ejkernel.ops.ragged_page_attention_v2 import RaggedPageAttentionv2Config
from ejkernel.ops.ragged_page_attention_v2.cases import FULL_CASES, RaggedPageCase
from ejkernel.ops.ragged_page_attention_v2.reference import ragged_page_attention_v2_reference
from ejkernel.testing import conformance as C

if os.environ.get("TRITON_INTERPRET") != "1":  # the kernels must be decorated in interpreter mode
    pytest.skip("run with TRITON_INTERPRET=1 (nox -s triton_interpret)", allow_module_level=True)

from ejkernel_triton._launch import interpreted
from ejkernel_triton.prefill_page_attention import TritonPrefillPageAttention
from ejkernel_triton.ragged_page_attention_v2 import TritonRaggedPageAttentionv2
from ejkernel_triton.ragged_page_attention_v3 import TritonRaggedPageAttentionv3
from ejkernel_triton.unified_attention import TritonUnifiedAttention

pytestmark = pytest.mark.interpret

OP = "ragged_page_attention_v2"
GPU = DeviceInfo(platform="gpu", kind="interpreter", compute_capability=(9, 0))
IMPL = kernel_registry.get(OP, platform="triton")
TEST_CFG = "page1-q2-split3"
CASES = [c for c in FULL_CASES if c.dtype == "float32"] + [
    c for c in FULL_CASES if c.dtype == "float16" and c.name.startswith(("mixed", "sinks"))
]
HEURISTIC_CASES = ("mixed", "all-features")


@pytest.fixture(autouse=True)
def _interpreted():
    with interpreted():
        yield


def test_the_registered_implementation():
    assert isinstance(IMPL, TritonRaggedPageAttentionv2)
    assert IMPL.available(GPU) is None
    assert TEST_CFG in IMPL.test_configs


def _params():
    for case in CASES:
        yield pytest.param(case, TEST_CFG, id=f"{TEST_CFG}-{case.name}")
        marks = () if case.name in HEURISTIC_CASES else pytest.mark.full
        yield pytest.param(case, "heuristic", id=f"heuristic-{case.name}", marks=marks)


@pytest.mark.parametrize(("case", "cfg_id"), list(_params()))
def test_conformance(case, cfg_id):
    cfg = IMPL.test_configs.get(cfg_id)
    assert C.check_impl(IMPL, case, cfg, device=GPU) == "ok"


def test_under_jit_with_a_traced_num_seqs_and_one_split_per_step():
    """``num_seqs`` and the index arrays traced: dead sequences' programs return at once, their
    rows and the padding rows stay zero. 16-token steps over 8-token pages (two pages a step),
    a window crossing pages, 5 decode splits (some of them empty)."""
    case = RaggedPageCase(
        "jit", seqs=((1, 37), (9, 30), (2, 20), (0, 4)), max_num_seqs=6, pad_tokens=3, window=13, sinks=1
    )
    kw = case.inputs(seed=4)
    names = ("queries", "kv_pages", "context_lens", "block_tables", "query_start_loc", "num_seqs")
    arrays = [kw.pop(n) for n in names]
    cfg = RaggedPageAttentionv2Config(
        num_kv_pages_per_block=2, num_queries_per_block=4, num_warps=4, num_stages=1, num_splits=5
    )

    def f(*a):
        return run_impl(IMPL, C.bind(OP, *a, **kw), cfg, device=GPU)

    out = jax.jit(f)(*arrays)
    ref = ragged_page_attention_v2_reference(*arrays, **kw)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=2e-5, rtol=2e-5)
    assert not np.any(np.asarray(out[12:]))  # the padding rows
    # Fewer live sequences than the batch holds: the third's rows are padding now.
    out2 = jax.jit(f)(*arrays[:5], jnp.int32(2))
    np.testing.assert_allclose(np.asarray(out2[:10]), np.asarray(ref[:10]), atol=2e-5, rtol=2e-5)
    assert not np.any(np.asarray(out2[10:]))


def test_prefill_and_decode_launched_apart(monkeypatch):
    """Prefill tiles and decode splits: two launches, each compiling one kind of program at its
    own warp count, together equal to the reference."""
    import ejkernel_triton.ragged_page_attention_v2._call as call

    kinds = []

    def spy(*args, **kw):
        kinds.append((kw["PREFILL"], kw["num_warps"]))
        return launch(*args, **kw)

    launch = call.launch
    monkeypatch.setattr(call, "launch", spy)
    case = next(c for c in CASES if c.name.startswith("mixed") and c.dtype == "float32")
    cfg = RaggedPageAttentionv2Config(
        num_kv_pages_per_block=2, num_queries_per_block=8, num_warps=8, num_stages=2, num_splits=3
    )
    assert C.check_impl(IMPL, case, cfg, device=GPU) == "ok"
    assert set(kinds) == {(True, 8), (False, 4)}


# -- the other ops on the same kernel --------------------------------------------------------------
# Their float32 conformance cases with each implementation's test config (the cases the kernel
# does not serve, e.g. unified attention's ALiBi, must decline with the declared reason); the
# heuristic's tiles on a mixed case each. The rest runs under ``-m full``.

OTHER_OPS = {
    "ragged_page_attention_v3": (TritonRaggedPageAttentionv3, ("mixed", "head-dim-136", "all-features")),
    "unified_attention": (TritonUnifiedAttention, ("mixed", "window", "sinks", "alibi", "qq-bias", "lse")),
    "prefill_page_attention": (TritonPrefillPageAttention, ("gqa-window-softcap", "odd-sizes", "mqa-one-token")),
}


def _full_cases(op):
    import importlib

    return importlib.import_module(f"ejkernel.ops.{op}.cases").FULL_CASES


def _other_params():
    for op, (_, default) in OTHER_OPS.items():
        cases = [c for c in _full_cases(op) if c.dtype == "float32"]
        for case in cases:
            marks = () if case.name in default else pytest.mark.full
            yield pytest.param(op, case, "test", id=f"{op}-test-{case.name}", marks=marks)
            marks = () if case is cases[0] else pytest.mark.full
            yield pytest.param(op, case, "heuristic", id=f"{op}-heuristic-{case.name}", marks=marks)


@pytest.mark.parametrize("op", sorted(OTHER_OPS))
def test_the_other_registered_implementations(op):
    impl = kernel_registry.get(op, platform="triton")
    assert isinstance(impl, OTHER_OPS[op][0])
    assert impl.available(GPU) is None


@pytest.mark.parametrize(("op", "case", "cfg_id"), list(_other_params()))
def test_other_ops_conformance(op, case, cfg_id):
    impl = kernel_registry.get(op, platform="triton")
    cfg = next(iter(impl.test_configs.values())) if cfg_id == "test" else None
    # Unified attention's ALiBi, query-query bias and log-sum-exp (all-features has them all).
    declined = op == "unified_attention" and case.name in ("alibi", "qq-bias", "lse", "all-features")
    # float32 above head dim 128 (declared: more shared memory than a block has).
    declined |= getattr(case, "dtype", "float32") == "float32" and getattr(case, "d", 0) > 128
    expected = "declined" if declined else "ok"
    assert C.check_impl(impl, case, cfg, device=GPU) == expected
