"""The TPU grouped GEMM (megablox gmm/tgmm) in Pallas' TPU interpreter, on the CPU.

Every shared case (empty groups, a group of every row, rows past the groups, odd m/k/n, the
transposed rhs, an expert slice with existing_out, a per-group bias) runs through the shared
suite (``check_impl`` on a pretend TPU: output and gradients of lhs, rhs, existing_out, bias
against the float32 reference) with the heuristic config and 16-row visits (many row tiles
shared by two groups: the output block must stay in VMEM between the two visits). The
interpreter fills unwritten memory with NaN, so a row no visit writes fails.
"""

from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.ops.grouped_matmul import GroupedMatmulConfig
from ejkernel.ops.grouped_matmul.cases import CASES, FULL_CASES
from ejkernel.testing import conformance as C
from ejkernel_pallas.tpu import interpret_mode
from ejkernel_pallas.tpu.grouped_matmul import PallasTpuGroupedMatmul
from ejkernel_pallas.tpu.grouped_matmul._plan import group_metadata

from .._pallas_support import TPU, registered

pytestmark = pytest.mark.interpret

OP = "grouped_matmul"
IMPL = registered(OP)
CONFIGS = {
    "heuristic": None,
    "rows16": GroupedMatmulConfig(block_m=16, block_n=128, block_k=128, split_k=1),
}
INTERP_CASES = [*CASES, *(c for c in FULL_CASES if c.name in ("many-small", "expert-shard-t"))]


def test_the_registered_implementation():
    assert isinstance(IMPL, PallasTpuGroupedMatmul)


@pytest.mark.parametrize("cfg_id", list(CONFIGS))
@pytest.mark.parametrize("case", INTERP_CASES, ids=lambda c: c.name)
def test_conformance(case, cfg_id):
    expected = "declined" if case.scale_blocks else "ok"  # rhs_scale: declared unsupported here
    with interpret_mode():
        assert C.check_impl(IMPL, case, CONFIGS[cfg_id], device=TPU) == expected


@pytest.mark.parametrize("visit_empty", [False, True])
@pytest.mark.parametrize("sizes", [(5, 0, 40, 1), (0, 0, 0), (64,), (17, 16, 15, 0, 33)])
def test_metadata_visits_each_group_tile_once(sizes, visit_empty):
    m, bm = 128, 16
    cum = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    starts, ends = jnp.asarray(cum[:-1]), jnp.asarray(cum[1:])
    gid, mt, n, size = group_metadata(starts, ends, m // bm, bm, visit_empty=visit_empty)
    gid, mt, n = np.asarray(gid), np.asarray(mt), int(n[0])
    want = []
    for j, (s, e) in enumerate(itertools.pairwise(cum)):
        if e > s:
            want += [(j, t) for t in range(s // bm, -(-e // bm))]
        elif visit_empty:
            want.append((j, min(s // bm, m // bm - 1)))
    assert n == len(want) <= size == len(gid)
    assert list(zip(gid[:n], mt[:n], strict=True)) == want
    if n:  # padding repeats the last visit (same blocks, nothing accumulated)
        assert (gid[n:] == gid[n - 1]).all() and (mt[n:] == mt[n - 1]).all()
