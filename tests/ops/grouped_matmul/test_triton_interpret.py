"""The Triton grouped GEMM (forward, dlhs, tgmm) with its host wrapper in Triton's interpreter.

Run with ``TRITON_INTERPRET=1`` (``nox -s triton_interpret``): every conformance case of
``grouped_matmul`` (outputs and the gradients of lhs, rhs, existing_out and rhs_bias against the
float32 reference) through ``check_impl`` on a pretend Hopper GPU, with 16-wide tiles so every
kernel visits several tiles per group, tiles wider than the small groups, and a split ``drhs``
reduction. The interpreter's ``tl.dot`` is wrong on bfloat16 operands: those cases run in float16.
"""

from __future__ import annotations

import os

import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.ops import DeviceInfo, kernel_registry
from ejkernel.ops.grouped_matmul import GroupedMatmulConfig
from ejkernel.ops.grouped_matmul.cases import CASES, FULL_CASES, GroupedMatmulCase
from ejkernel.testing import conformance as C

if os.environ.get("TRITON_INTERPRET") != "1":  # the kernels must be decorated in interpreter mode
    pytest.skip("run with TRITON_INTERPRET=1 (nox -s triton_interpret)", allow_module_level=True)

import jax
import triton
import triton.language as tl

from ejkernel_triton._launch import interpreted, launch
from ejkernel_triton.grouped_matmul import TritonGroupedMatmul
from ejkernel_triton.grouped_matmul._call import max_tiles, row_bounds, segment_pad
from ejkernel_triton.grouped_matmul._kernel import schedule, tile_of

pytestmark = pytest.mark.interpret

OP = "grouped_matmul"
GPU = DeviceInfo(platform="gpu", kind="interpreter", compute_capability=(9, 0))
CONFIGS = {
    "16x16x16": GroupedMatmulConfig(block_m=16, block_n=16, block_k=16, num_warps=4, num_stages=1, split_k=1),
    "32x16x16-split3-persistent": GroupedMatmulConfig(
        block_m=32, block_n=16, block_k=16, num_warps=4, num_stages=1, split_k=3, persistent=True
    ),
}
_low = [c.with_dtype("float16") if c.dtype == "bfloat16" else c for c in CASES]
_EXTRA = [c for c in FULL_CASES if c.name in ("many-small", "expert-shard-t")]
INTERP_CASES = [*_low, *_EXTRA]
IMPL = kernel_registry.get(OP, platform="triton")


@pytest.fixture(autouse=True)
def _interpreted():
    with interpreted():
        yield


def test_the_registered_implementation():
    assert isinstance(IMPL, TritonGroupedMatmul)
    assert IMPL.available(GPU) is None


@pytest.mark.parametrize("cfg_id", list(CONFIGS))
@pytest.mark.parametrize("case", INTERP_CASES, ids=lambda c: c.name)
def test_conformance(case, cfg_id):
    # A scale per block of k is declared unsupported (the XLA implementation applies it).
    expected = "declined" if case.scale_blocks > 1 else "ok"
    assert C.check_impl(IMPL, case, CONFIGS[cfg_id], device=GPU) == expected


def test_heuristic_config_runs():
    case = GroupedMatmulCase("heuristic", m=150, k=64, n=48, group_sizes=(70, 0, 80), dtype="float16")
    assert C.check_impl(IMPL, case, None, device=GPU) == "ok"


@triton.jit
def _schedule_probe(
    sizes_ptr, offset_ptr, seg_ptr, row_ptr, end_ptr,
    M: tl.constexpr, G: tl.constexpr, S_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    """Schedule entry ``program_id`` as ``gmm_kernel`` computes it, written out."""
    i_t = tl.program_id(0)
    lo, hi, first, ntiles = schedule(sizes_ptr, offset_ptr, M, G, S_PAD, BLOCK_M)
    seg, row0, row_end = tile_of(i_t, lo, hi, first, ntiles, G, S_PAD, BLOCK_M)
    tl.store(seg_ptr + i_t, seg)
    tl.store(row_ptr + i_t, row0)
    tl.store(end_ptr + i_t, row_end)


# m = 120 rows. (100, 50, 7) overruns it: groups past the rows are cut at m, never written past it.
_SIZES = [(5, 0, 40, 1), (0, 0, 0), (64,), (17, 16, 15, 0, 33), (100, 50, 7), (6,) * 20]
# (sizes, group_offset, local groups): every group, a slice of two from group 1 where one exists,
# and the last groups of the 20 (a base sum over more than one vector of segments).
_SLICES = [(s, 0, len(s)) for s in _SIZES] + [(s, 1, 2) for s in _SIZES if len(s) >= 3] + [((6,) * 20, 17, 3)]


@pytest.mark.parametrize("sizes,offset,local", _SLICES)
def test_schedule_covers_every_row_once(sizes, offset, local):
    """Each row of [0, m) lies in exactly one tile, tagged with its local group (-1 outside);
    the entries past the schedule's end are tagged -2; the group bounds tgmm reads are the
    cumsum's, clamped to m."""
    m, bm = 120, 16
    cum = np.minimum(np.concatenate([[0], np.cumsum(sizes)]), m)
    starts, ends = cum[offset : offset + local], cum[offset + 1 : offset + local + 1]
    entries = max_tiles(m, local, bm)
    group_sizes, group_offset = (
        jnp.asarray(sizes, jnp.int32),
        jnp.full((1,), offset, jnp.int32),
    )  # as group_inputs gives
    outs = launch(
        _schedule_probe,
        group_sizes,
        group_offset,
        out_shape=[jax.ShapeDtypeStruct((entries,), jnp.int32)] * 3,
        grid=(entries,),
        num_warps=4,
        num_stages=1,
        M=m,
        G=local,
        S_PAD=segment_pad(local),
        BLOCK_M=bm,
    )
    seg, row0, end = (np.asarray(x) for x in outs)
    g_starts, g_ends = (np.asarray(x) for x in row_bounds(m, local, group_sizes, group_offset))
    np.testing.assert_array_equal(g_starts, starts)  # what tgmm reads
    np.testing.assert_array_equal(g_ends, ends)
    count = int((seg > -2).sum())
    assert (seg[:count] > -2).all() and (seg[count:] == -2).all()
    owner = np.full(m, -9)
    for s, r, e in zip(seg, row0, end, strict=True):
        if s == -2:
            continue
        assert r < e <= m
        rows = np.arange(r, min(r + bm, e))
        assert (owner[rows] == -9).all(), "a row in two tiles"
        owner[rows] = s
    expect = np.full(m, -1)
    for j in range(local):
        expect[starts[j] : ends[j]] = j
    np.testing.assert_array_equal(owner, expect)


def test_half_tiles_at_group_ends():
    """128-row tiles run 64-row products for a group's last rows when 64 are enough: groups
    ending 1, 64 (exactly half), 65 and 128 rows past a whole tile, an empty group, a group of
    one row, and rows past the groups (zeros). Checked against the float32 reference, gradients
    included (dlhs runs the same kernel)."""
    from ejkernel_triton.grouped_matmul._call import tail_rows

    assert tail_rows(128) == 64 and tail_rows(256) == 128 and tail_rows(64) == 0
    cfg = GroupedMatmulConfig(block_m=128, block_n=16, block_k=16, num_warps=4, num_stages=1, split_k=1)
    case = GroupedMatmulCase(
        "half-tiles", m=700, k=32, n=24, group_sizes=(129, 64, 0, 193, 256, 1, 40), dtype="float16"
    )
    assert C.check_impl(IMPL, case, cfg, device=GPU) == "ok"


def test_tgmm_runs_its_own_pipeline_depth(monkeypatch):
    """``tgmm_num_stages`` reaches the ``drhs`` launch and no other (results checked against the
    reference); a spec without it runs ``tgmm`` at ``num_stages``."""
    from ejkernel_triton.grouped_matmul import _call

    seen: list[tuple[str, int]] = []

    def spy(kernel, *args, name="", num_stages, **kw):
        seen.append((name, num_stages))
        return launch(kernel, *args, name=name, num_stages=num_stages, **kw)

    monkeypatch.setattr(_call, "launch", spy)
    case = GroupedMatmulCase("stages", m=100, k=32, n=24, group_sizes=(40, 0, 50), dtype="float16")
    cfg = GroupedMatmulConfig(
        block_m=16, block_n=16, block_k=16, num_warps=4, num_stages=1, tgmm_num_stages=2, split_k=1
    )
    assert C.check_impl(IMPL, case, cfg, device=GPU) == "ok"
    assert {s for n, s in seen if n == "ejkernel_tgmm"} == {2}
    assert {s for n, s in seen if n == "ejkernel_gmm"} == {1}  # forward and dlhs

    seen.clear()
    spec = _call.Spec(100, 32, 24, 3, False, "float16", "default", 16, 16, 16, 4, 1, 1, 0)
    assert spec.tgmm_stages is None
    k1, k2 = jax.random.split(jax.random.key(0))
    lhs, dout = jax.random.normal(k1, (100, 32), jnp.float16), jax.random.normal(k2, (100, 24), jnp.float16)
    _call.tgmm(spec, lhs, dout, jnp.asarray([40, 0, 50], jnp.int32), jnp.zeros((1,), jnp.int32), jnp.float16)
    assert {s for n, s in seen if n == "ejkernel_tgmm"} == {1}


def test_heuristic_stage_depths():
    """On Hopper, wide 16-bit tiles run a 4-stage gmm with groups under 512 rows and a 3-stage
    tgmm (``heuristics.heuristic``); every config fits its shared memory at both depths."""
    from ejkernel_triton.grouped_matmul import heuristics as H

    hopper = (9, 0)
    cfg = H.heuristic(16384, 2048, 1536, 64, 2, hopper)
    assert (cfg.block_m, cfg.block_n, cfg.num_stages, cfg.tgmm_num_stages, cfg.persistent) == (128, 256, 4, 3, False)
    # One depth for both (None: tgmm runs num_stages, also in the configs filled from these);
    # groups of 512+ rows on the persistent grid.
    cfg = H.heuristic(16384, 4096, 2048, 8, 2, hopper)
    assert (cfg.block_n, cfg.num_stages, cfg.tgmm_num_stages, cfg.persistent) == (256, 3, None, True)
    assert H.heuristic(65536, 4096, 1408, 64, 2, hopper).persistent
    assert not H.heuristic(16384, 4096, 2048, 8, 2, (8, 0)).persistent  # Ampere: 128 columns
    assert not H.heuristic(16384, 4096, 2048, 8, 4, hopper).persistent  # float32: 128 columns
    cfg = H.heuristic(16384, 2048, 1536, 64, 4, hopper)  # float32: 128 columns
    assert (cfg.block_n, cfg.tgmm_num_stages) == (128, None)
    for cc in (hopper, (8, 0), (8, 6), None):
        for itemsize in (2, 4):
            for out_itemsize in (2, 4):
                heuristic = H.heuristic(16384, 2048, 1536, 64, itemsize, cc, out_itemsize)
                for cand in H.candidates(16384, 2048, 1536, 64, itemsize, cc, out_itemsize):
                    full = cand.filled_from(heuristic)
                    assert H.fits(full, itemsize, out_itemsize, cc), (cc, itemsize, out_itemsize, full)
    wide = GroupedMatmulConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, tgmm_num_stages=4)
    assert H.needs(wide, 2, 2)[2].shared_memory == 4 * 384 * 64 * 2  # tgmm: its own, deeper pipeline
