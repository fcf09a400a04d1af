"""Ring attention on NVIDIA GPUs: every visible GPU on one ring axis, with the Triton kernels as
the inner block attention (the log-sum-exp protocol) where they accept the blocks; sliding-window
rings need ``position_offset``, which Triton declines, so they run on the XLA blocks. Same cases
and tolerances as the CPU suite (test_distributed.py), at GPU-sized shards."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from ejkernel.ops import record_dispatches

from ._ring_cases import CASES, check_case

pytestmark = [pytest.mark.gpu, pytest.mark.distributed]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_ring_on_every_gpu(case):
    devices = jax.devices()
    mesh = Mesh(np.array(devices), ("sp",))
    case = dataclasses.replace(case, seq_per_device=96, head_dim=64)
    with record_dispatches() as log:
        check_case(case, mesh)
    impls = {r.impl for r in log if r.op == "ring_attention"}
    want = "xla" if case.window is not None else "triton"
    assert impls == {want}, (impls, len(devices))
