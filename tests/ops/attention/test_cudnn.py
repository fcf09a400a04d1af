"""The cuDNN implementations of ``flash_attention`` and ``scaled_dot_product_attention`` on a CPU:
what they decline (each reason, before anything is traced), the call of
``jax.nn.dot_product_attention`` they make (computed here with its XLA implementation against the
float32 reference), and where they rank on an NVIDIA GPU. ``test_cudnn_gpu.py`` runs cuDNN itself."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from unittest import mock

import jax
import pytest

import ejkernel_triton
import ejkernel_xla
import ejkernel_xla.cudnn as cudnn_backend
from ejkernel.errors import UnsupportedError
from ejkernel.ops import ConfigSelectorChain, DeviceInfo, Executor, KernelRegistry, get_op
from ejkernel.ops.executor import bind
from ejkernel.ops.flash_attention.cases import AttentionCase
from ejkernel.testing import conformance as C
from ejkernel_xla.cudnn import _attention as A
from ejkernel_xla.cudnn import heuristics as H

ROOT = Path(__file__).resolve().parents[3]
H200 = DeviceInfo("gpu", "NVIDIA H200", (9, 0), "jaxlib-test", 132)
A100 = DeviceInfo("gpu", "NVIDIA A100-SXM4-80GB", (8, 0), "jaxlib-test", 108)
V100 = DeviceInfo("gpu", "Tesla V100-SXM2-16GB", (7, 0), "jaxlib-test", 80)
ROCM = DeviceInfo("gpu", "AMD Instinct MI300X", None, "jaxlib-test")
CPU = DeviceInfo("cpu", "cpu", None, "jaxlib-test")
OPS = ("flash_attention", "scaled_dot_product_attention")


@pytest.fixture
def registry():
    """XLA, Triton and cuDNN registered as their plugins register them, with cuDNN 9.10 and Triton
    importable as on a GPU machine."""
    reg = KernelRegistry(entry_point_group=None)
    for package in (ejkernel_xla, ejkernel_triton, cudnn_backend):
        package.register(reg)
    with (
        mock.patch.object(A, "cudnn_version", return_value=91000),
        mock.patch("ejkernel_triton._launch.availability", return_value=None),
    ):
        yield reg


BASE = {"b": 2, "sq": 64, "sk": 64, "h": 4, "hk": 2, "d": 64, "dtype": "bfloat16"}


def inputs(op: str, **fields):
    """The keyword arguments of a call of ``op`` for a case with ``fields`` (bfloat16 by default)."""
    kw = AttentionCase(name="t", **{**BASE, **fields}).inputs(0)
    if op == "scaled_dot_product_attention":
        # Its packed-sequence boundaries are cu_seqlens_q/k (cum_seqlens_q/k are per-example lengths).
        kw = {("cu" + n[3:] if n.startswith("cum_seqlens") else n): x for n, x in kw.items()}
    return kw


def case_args(op: str, **fields):
    return bind(op, **inputs(op, **fields))


def cudnn(registry, op):
    return registry.get(op, platform="cudnn")


# -- what it declines ---------------------------------------------------------------------------

DECLINED = {
    "float32": ({"dtype": "float32"}, "supports float16, bfloat16 inputs, got float32"),
    "head_dim-odd": ({"d": 60}, "supports head_dim a multiple of 8 up to 256, got 60"),
    "head_dim-large": ({"d": 264}, "supports head_dim a multiple of 8 up to 256, got 264"),
    "value_head_dim": ({"dv": 32}, "needs the value head dim equal to the query's"),
    "soft-cap": ({"soft_cap": 5.0}, "no logits soft cap"),
    "sinks": ({"sinks": 1}, "no attention sinks"),
    "dropout": ({"dropout": 0.1}, "cuDNN draws its own mask"),
    "bias": ({"bias": ("b", "h", "q", "k")}, "an additive bias is not supported"),
    "segments": ({"segments": "packed"}, "segment ids"),
    "padding": ({"segments": "padding"}, "segment ids"),
    "pairwise": ({"pairwise": True}, "pairwise masks are not supported"),
    "varlen": ({"b": 1, "varlen": ((20, 20), (44, 44))}, "packed sequences"),
    "causal-cross": ({"sq": 32, "causal": True}, "cuDNN aligns them top-left"),
    "window-cross": ({"sq": 32, "window": (8, 0)}, "cuDNN aligns them top-left"),
    "window-right": ({"window": (8, 4)}, "cuDNN's window is causal"),
    "seq_q-odd": ({"sq": 17}, "supports seq_q a multiple of 8 (other lengths failed"),
    "seq_k-odd": ({"sk": 130}, "supports seq_k a multiple of 8 (other lengths failed"),
}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", sorted(DECLINED))
def test_declines_with_the_reason_before_tracing(registry, op, name):
    fields, reason = DECLINED[name]
    args = case_args(op, **fields)
    impl = cudnn(registry, op)
    assert reason in (registry.check(impl, args, H200) or "")
    # The declaration alone says so (what the conformance suite relies on), and so does an
    # explicit request, before jax.nn.dot_product_attention is reached.
    assert reason in (C.expected_decline(impl, args, H200, registry) or "")
    executor = Executor(ConfigSelectorChain(persistent=None), registry=registry)
    with (
        mock.patch.object(jax.nn, "dot_product_attention", side_effect=AssertionError("traced")),
        mock.patch("ejkernel.ops.executor.device_for_arrays", return_value=H200),
        pytest.raises(UnsupportedError, match=re.escape(reason)),
    ):
        executor(get_op(op), **inputs(op, **fields), platform="cudnn")


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"causal": True},
        {"sq": 32},  # cross attention without a mask: no alignment involved
        {"h": 8, "hk": 1},
        {"window": (8, 0)},
        {"window": (8, 3), "causal": True},
        {"d": 256},
        {"d": 8, "dtype": "float16"},
    ],
    ids=str,
)
def test_accepts_what_cudnn_computes_as_the_op_defines_it(registry, fields):
    for op in OPS:
        assert registry.check(cudnn(registry, op), case_args(op, **fields), H200) is None


def test_device_and_environment(registry):
    impl = cudnn(registry, "flash_attention")
    args = case_args("flash_attention", d=256)
    assert "needs an NVIDIA GPU; this call runs on cpu" in registry.check(impl, args, CPU)
    assert "needs an NVIDIA GPU; this call runs on AMD" in registry.check(impl, args, ROCM)
    assert "compute capability >= 8.0" in registry.check(impl, args, V100)
    # Before Hopper, cuDNN's flash attention stops at head_dim 128.
    assert "up to 128 before Hopper" in registry.check(impl, args, A100)
    assert registry.check(impl, case_args("flash_attention", d=128), A100) is None
    with mock.patch.object(A, "cudnn_version", return_value=None):
        assert "loads no cuDNN" in registry.check(impl, args, H200)
    blackwell = dataclasses.replace(H200, compute_capability=(10, 3))
    with mock.patch.object(A, "cudnn_version", return_value=91000):
        assert "needs cuDNN >= 9.11" in registry.check(impl, args, blackwell)
    with mock.patch.object(A, "cudnn_version", return_value=91100):
        assert registry.check(impl, args, blackwell) is None


def test_cudnn_version_is_none_without_a_cuda_jaxlib():
    # This machine's jaxlib has no CUDA plugin (or no GPU): no version, never an exception.
    if jax.default_backend() != "gpu":
        assert A.cudnn_version() is None


# -- the call it makes --------------------------------------------------------------------------

MAPPED = [
    ("plain", {}),
    ("causal", {"causal": True}),
    ("cross", {"sq": 40, "sk": 72}),
    ("gqa-causal", {"h": 8, "hk": 2, "causal": True}),
    ("window-left", {"window": (9, 0)}),
    ("window-causal", {"window": (9, 5), "causal": True}),
    ("scale", {"scale": 0.3, "causal": True}),
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name,fields", MAPPED, ids=[m[0] for m in MAPPED])
def test_the_jax_nn_call_computes_the_op(registry, op, name, fields):
    """The arguments given to ``jax.nn.dot_product_attention``, computed by its XLA implementation
    (same semantics as cuDNN's), match the op's float32 reference: forward and gradients."""
    real = jax.nn.dot_product_attention
    calls = []

    def as_xla(q, k, v, **kw):
        calls.append(kw)
        assert kw.pop("implementation") == "cudnn"
        return real(q, k, v, implementation="xla", **kw)

    impl = cudnn(registry, op)
    case = AttentionCase(name=name, **{"b": 2, "sq": 64, "sk": 64, "h": 4, "hk": 2, "d": 32, **fields})

    def fn(**kw):
        return impl.run(bind(op, **kw), impl.heuristic_cfg(None, H200))

    with mock.patch.object(jax.nn, "dot_product_attention", side_effect=as_xla):
        C.check(fn, case, op=op, modes=("eager",))
    assert calls
    window = fields.get("window")
    assert calls[0]["is_causal"] == bool(fields.get("causal") or window)
    assert calls[0]["local_window_size"] == (None if window is None else (window[0], 0))
    assert calls[0]["scale"] == pytest.approx(fields.get("scale") or 1 / 32**0.5)


def test_a_wrong_mapping_fails_that_check(registry):
    """The check above can fail: a mapping that drops the window's causality (passes the window
    through as it came) computes something else, and the same check says so."""
    real, right = jax.nn.dot_product_attention, A.jax_nn_arguments
    impl = cudnn(registry, "flash_attention")
    case = AttentionCase(name="mutant", b=1, sq=64, sk=64, h=2, hk=2, d=32, window=(9, 5), causal=True)

    def as_xla(q, k, v, **kw):
        return real(q, k, v, **{**kw, "implementation": "xla"})

    def mutant(args):
        return {**right(args), "is_causal": False, "local_window_size": args.sliding_window}

    def fn(**kw):
        return impl.run(bind("flash_attention", **kw), impl.heuristic_cfg(None, H200))

    with (
        mock.patch.object(jax.nn, "dot_product_attention", side_effect=as_xla),
        mock.patch.object(A, "jax_nn_arguments", side_effect=mutant),
        pytest.raises(AssertionError, match="max error"),
    ):
        C.check(fn, case, op="flash_attention", modes=("eager",), grads=False)


# -- where it ranks -----------------------------------------------------------------------------


def test_cudnn_comes_first_on_an_nvidia_gpu_where_it_accepts(registry):
    for op in OPS:
        assert registry.select(op, case_args(op, causal=True), H200).name == "cudnn"
    soft_cap = case_args("flash_attention", causal=True, soft_cap=5.0)
    assert registry.select("flash_attention", soft_cap, H200).name == "triton"
    f32 = case_args("flash_attention", dtype="float32")
    assert registry.select("flash_attention", f32, H200).name == "triton"
    assert (
        registry.select("scaled_dot_product_attention", case_args("scaled_dot_product_attention", sinks=1), H200).name
        == "xla"
    )
    # Asked for by name, Triton serves calls cuDNN accepts; elsewhere than an NVIDIA GPU, cuDNN never runs.
    args = case_args("flash_attention", causal=True)
    assert registry.select("flash_attention", args, H200, platform="triton").name == "triton"
    assert registry.select("flash_attention", args, CPU).name == "xla"


def test_priority_comes_from_the_measured_table():
    assert H.TRITON_PRIORITY == ejkernel_triton.PRIORITY
    assert ejkernel_xla.PRIORITY < cudnn_backend.PRIORITY
    # cuDNN won every measured shape both ways: it ranks above Triton.
    assert all(max(m.fwd, m.fwdbwd) < 1 for m in H.TRITON_OVER_CUDNN)
    assert cudnn_backend.PRIORITY > ejkernel_triton.PRIORITY
    # A table in which Triton wins one shape ranks cuDNN below Triton.
    first, *rest = H.TRITON_OVER_CUDNN
    turned = (dataclasses.replace(first, fwd=1.05), *rest)
    assert H.TRITON_PRIORITY > H._priority(turned) > ejkernel_xla.PRIORITY


def test_table_is_the_benchmark_record():
    """The table holds the ratios of the H200 record of ``ejkernel bench flash_attention`` for every
    shape of it that cuDNN accepts."""
    records = json.loads((ROOT / "benchmarks/results/h200/flash_attention.json").read_text())
    measured = set()
    for r in records:
        if r["impl"] != "triton" or r["peer"] != "jax.nn[cudnn]" or r["varlen"] or r["window"] or r["sq"] != r["sk"]:
            continue
        fwd, fwdbwd = round(r["ratio_fwd_tflops"], 2), round(r["ratio_fwdbwd_tflops"], 2)
        measured.add(H.Measured(r["b"], r["sq"], r["h"], r["hk"], r["d"], r["causal"], fwd, fwdbwd))
    assert measured == set(H.TRITON_OVER_CUDNN)
