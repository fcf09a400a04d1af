"""The Triton ``flash_mla_decode`` on the GPU at the benchmark's shape (DeepSeek-V3 decode: batch
64, 128 heads, 8k context, latent 512 + rope 64, 64-token pages, bfloat16) and a small one, eager
and under ``jit``, against the float32 reference; bit-identical reruns; the split-K path; and the
XLA implementation at the same shape (the pages in random order in every case)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.ops.flash_mla_decode import FlashMLADecodeConfig
from ejkernel.ops.flash_mla_decode.bench import BENCH
from ejkernel.ops.flash_mla_decode.cases import MLADecodeCase
from ejkernel.ops.flash_mla_decode.reference import reference
from ejkernel.testing import conformance as C

from .._triton_gpu_checks import public_op

pytestmark = pytest.mark.gpu

OP = "flash_mla_decode"
DSV3 = dict(h=128, r=512, dr=64, page_size=64, dtype="bfloat16")
SMALL = MLADecodeCase("small", context_lens=(1, 0, 300, 64, 65, 1000), sq=2, h=16, r=512, dr=64, page_size=64,
                      dtype="bfloat16")  # fmt: skip


def _bench_inputs(b: int = 64, context: int = 8192):
    """The benchmark's own arrays (``ejkernel bench flash_mla_decode``'s default case), cut to ``b``."""
    import argparse

    p = argparse.ArgumentParser()
    BENCH.add_arguments(p)
    ns = p.parse_args(["--b", str(b), "--context", str(context)])
    (case,) = BENCH.cases(ns, "bfloat16", peers=False, check=False)
    q, cache, lens, tables = case.arrays
    return dict(query=q, latent_cache=cache, context_lens=lens, block_tables=tables, **case.options)


@pytest.mark.parametrize("mode", ["jit", "eager"])
def test_small(mode):
    C.check(public_op(OP, platform="triton"), SMALL, op=OP, modes=(mode,))


def _on_arrays(kw, cfg=None):
    """``f(query, latent_cache, context_lens, block_tables)`` with the call's options closed over."""
    options = {k: v for k, v in kw.items() if not hasattr(v, "shape")}

    def f(q, cache, lens, tables):
        return ejkernel.flash_mla_decode(q, cache, lens, tables, **options, platform="triton", cfg=cfg)

    return f, (kw["query"], kw["latent_cache"], kw["context_lens"], kw["block_tables"])


@pytest.mark.parametrize("mode", ["jit", "eager"])
def test_bench_shape(mode):
    """The whole benchmark batch through the kernel; four sequences of it against the reference
    (its per-sequence loop is slow at 8k)."""
    kw = _bench_inputs()
    f, arrays = _on_arrays(kw)
    out = (f if mode == "eager" else jax.jit(f))(*arrays)
    assert out.shape == (64, 1, 128, 512) and out.dtype == jnp.bfloat16
    assert bool(jnp.all(jnp.isfinite(out.astype(jnp.float32))))
    n = 4
    sub = dict(kw, query=kw["query"][:n], context_lens=kw["context_lens"][:n], block_tables=kw["block_tables"][:n])
    ref32 = reference(**sub)
    ref_low = reference(**sub, dtype=jnp.bfloat16, precision=C.LOW_PRECISION).astype(jnp.bfloat16)
    C.assert_close(f"bench shape [{mode}]", out[:n], ref32, ref_low, "bfloat16", C.ATOL)


def test_bench_shape_ragged_contexts_split_k_and_lse():
    """Contexts from 0 to 8k in one batch of 128 heads, two query tokens, four splits, with the
    log-sum-exp (empty rows compared as -inf on both sides)."""
    case = MLADecodeCase("ragged-dsv3", context_lens=(8192, 0, 1, 4097, 2, 700), sq=2, return_lse=True, **DSV3)
    kw = case.inputs(0)
    f, arrays = _on_arrays(kw, FlashMLADecodeConfig(num_splits=4))
    out, lse = jax.jit(f)(*arrays)
    ref_out, ref_lse = reference(**kw)
    low_out, _ = reference(**kw, dtype=jnp.bfloat16, precision=C.LOW_PRECISION)
    C.assert_close("ragged out", out, ref_out, low_out.astype(jnp.bfloat16), "bfloat16", C.ATOL)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(ref_lse))
    finite = np.isfinite(np.asarray(ref_lse))
    np.testing.assert_allclose(np.asarray(lse)[finite], np.asarray(ref_lse)[finite], atol=2e-2, rtol=1e-3)
    assert bool(jnp.all(out[1] == 0)), "an empty context must give exact zeros"


def test_deterministic():
    """The same compiled call gives bit-identical outputs (splits merged in a fixed order)."""
    f, arrays = _on_arrays(_bench_inputs(b=8, context=4096), FlashMLADecodeConfig(num_splits=3))
    f = jax.jit(f)
    first = np.asarray(f(*arrays))
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(f(*arrays)), first)


def test_xla_at_the_bench_shape():
    case = dataclasses.replace(SMALL, name="xla-dsv3", context_lens=(8192, 3000, 0, 1), sq=1, h=128)
    C.check(public_op(OP, platform="xla"), case, op=OP)
