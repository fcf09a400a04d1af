"""The XLA serving scans' step size (``families/serving.py``: ``scan_budget``, ``scan_pages``,
``ragged_scan_tiles``): the CPU keeps small steps, accelerators take steps whose gathered keys and
values stay within their budget, and each op's heuristic is among its candidates on both."""

from __future__ import annotations

import pytest

from ejkernel.ops import DeviceInfo, kernel_registry
from ejkernel.ops.executor import bind
from ejkernel.ops.families import serving as S
from ejkernel.ops.op import op_class

PAGE, TOKEN_BYTES = 16, 2 * 8 * 128 * 2  # page 16; keys and values of 8 kv heads at d 128, bf16
CPU = DeviceInfo("cpu", "cpu", None, "jaxlib-test")
H200 = DeviceInfo("gpu", "NVIDIA H200", (9, 0), "jaxlib-test", 132)


def _tiles(total_tokens, max_seqs, context, platform):
    return S.ragged_scan_tiles(
        total_tokens=total_tokens, max_seqs=max_seqs, token_bytes=TOKEN_BYTES, page_size=PAGE,
        max_pages=context // PAGE, platform=platform,
    )  # fmt: skip


def test_cpu_steps_hold_the_cpu_budget_of_pairs():
    (pages, bq), _ = _tiles(8 * 2048, 8, 2048, "cpu")
    slots = S.query_slots(8 * 2048, 8, bq)
    assert bq == S.MAX_QUERY_BLOCK and pages == max(1, S.SCAN_BUDGETS["cpu"].pairs // slots // PAGE)


@pytest.mark.parametrize(
    ("total_tokens", "max_seqs", "context"),
    [(64, 64, 8192), (60 + 4 * 512, 64, 8192), (8 * 2048, 8, 2048)],
    ids=["decode", "mixed", "prefill"],
)
def test_accelerator_steps_are_larger_within_the_gather_budget(total_tokens, max_seqs, context):
    (cpu_pages, _), _ = _tiles(total_tokens, max_seqs, context, "cpu")
    (pages, bq), candidates = _tiles(total_tokens, max_seqs, context, "gpu")
    rows = -(-S.query_slots(total_tokens, max_seqs, bq) // bq)
    budget = S.scan_budget("gpu")
    assert pages >= cpu_pages and rows * pages * PAGE * TOKEN_BYTES <= budget.gather_bytes
    assert (pages, bq) in candidates
    for n, b in candidates:
        r = -(-S.query_slots(total_tokens, max_seqs, b) // b)
        assert n == 1 or r * n * PAGE * TOKEN_BYTES <= budget.gather_bytes
    if total_tokens > max_seqs:  # the steps that prefill rows made many of: at least 8x fewer
        assert pages >= 8 * cpu_pages


def test_tpu_and_gpu_share_the_accelerator_budget():
    assert S.scan_budget("gpu") == S.scan_budget("tpu") == S.SCAN_BUDGET_ACCELERATOR != S.scan_budget("cpu")


@pytest.mark.parametrize(
    "op", ["ragged_page_attention_v2", "ragged_page_attention_v3", "unified_attention", "prefill_page_attention"]
)
def test_each_xla_op_follows_the_device(op):
    impl = kernel_registry.get(op, platform="xla")
    case = op_class(op).get_cases()[0]
    args = bind(op, **case.inputs(0))
    for device in (CPU, H200):
        assert impl.heuristic_cfg(args, device) in impl.candidate_cfgs(args, device)
