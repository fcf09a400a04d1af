"""Conformance cases of ``grouped_matmul``: random group sizes with empty groups, a group holding
every row, rows past the groups, ``m`` not a multiple of any tile, odd ``k``/``n``, the
transposed ``rhs``, expert-parallel slices (``group_offset``) with ``existing_out``, per-group bias,
per-group and per-block weight scales (``rhs_scale``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "GroupedMatmulCase", "make_grouped_inputs"]


@dataclasses.dataclass(frozen=True)
class GroupedMatmulCase:
    """One grouped-matmul case: ``m`` rows of ``lhs`` split as ``group_sizes``; ``rhs`` holds
    ``local_groups`` groups (default: all) starting at ``group_offset``."""

    name: str
    m: int
    k: int
    n: int
    group_sizes: tuple[int, ...]
    dtype: str = "float32"
    transpose_rhs: bool = False
    group_offset: int | None = None
    local_groups: int | None = None
    existing_out: bool = False
    bias: bool = False
    scale_blocks: int = 0  # rhs_scale [groups, scale_blocks, 1, n] (0: none)
    out_dtype: str | None = "float32"  # preferred_element_type (None: lhs's dtype)

    def with_dtype(self, dtype: str) -> GroupedMatmulCase:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        """The keyword arguments of a call (arrays and options)."""
        return make_grouped_inputs(self, seed)


_BASE = (
    GroupedMatmulCase("ragged", m=100, k=48, n=40, group_sizes=(13, 0, 37, 1, 30, 0, 19)),
    GroupedMatmulCase("one-group-all-rows", m=67, k=33, n=17, group_sizes=(0, 67, 0)),
    GroupedMatmulCase("rows-past-groups-odd", m=91, k=37, n=29, group_sizes=(5, 40, 0, 20)),
    GroupedMatmulCase("transpose-rhs", m=80, k=64, n=48, group_sizes=(17, 23, 0, 40), transpose_rhs=True),
    GroupedMatmulCase(
        "expert-shard",
        m=96,
        k=32,
        n=24,
        group_sizes=(10, 14, 0, 22, 30, 11),
        group_offset=2,
        local_groups=3,
        existing_out=True,
    ),
    GroupedMatmulCase("bias-lowp-out", m=72, k=40, n=32, group_sizes=(30, 0, 42), bias=True, out_dtype=None),
    GroupedMatmulCase("single-row-groups", m=5, k=16, n=16, group_sizes=(1, 1, 1, 1, 1)),
    GroupedMatmulCase("scale-bias", m=70, k=40, n=24, group_sizes=(20, 0, 35), scale_blocks=1, bias=True),
    GroupedMatmulCase(
        "scale-t-expert-shard",
        m=64,
        k=32,
        n=40,
        group_sizes=(9, 20, 0, 30),
        transpose_rhs=True,
        group_offset=1,
        local_groups=3,
        existing_out=True,
        scale_blocks=1,
    ),
    GroupedMatmulCase("scale-blocks", m=60, k=48, n=32, group_sizes=(25, 0, 30), scale_blocks=3),
)
_LOW = ("ragged", "transpose-rhs", "expert-shard", "bias-lowp-out", "scale-bias")
CASES: tuple[GroupedMatmulCase, ...] = _BASE + tuple(c.with_dtype("bfloat16") for c in _BASE if c.name in _LOW)
_EXTRA = (
    GroupedMatmulCase("many-small", m=300, k=64, n=64, group_sizes=tuple([7, 0, 3] * 30)),
    GroupedMatmulCase("tall", m=777, k=96, n=72, group_sizes=(300, 0, 250, 127)),
    GroupedMatmulCase(
        "expert-shard-t",
        m=128,
        k=48,
        n=40,
        group_sizes=(20, 0, 30, 25, 13, 40),
        group_offset=3,
        local_groups=3,
        transpose_rhs=True,
    ),
)
FULL_CASES: tuple[GroupedMatmulCase, ...] = (
    _BASE + _EXTRA + tuple(c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE + _EXTRA)
)

# Realistic MoE shapes (m tokens x top-k, hidden k, expert width n, experts g).
ARG_SPECS: dict[str, dict[str, Any]] = {
    "mixtral-8x7b-up": dict(m=16384, k=4096, n=14336, g=8),
    "deepseek-moe-16b-up": dict(m=16384, k=2048, n=1408, g=64),
    "qwen3-30b-a3b-up": dict(m=65536, k=2048, n=768, g=128),
    "deepseek-v3-up": dict(m=8192, k=7168, n=2048, g=256),
}


def make_grouped_inputs(case: GroupedMatmulCase, seed: int = 0) -> dict[str, Any]:
    """Keyword arguments of a ``grouped_matmul`` call for ``case``."""
    rng = np.random.default_rng(seed)
    dtype = jnp.dtype(case.dtype)
    sizes = np.asarray(case.group_sizes, np.int32)
    assert sizes.sum() <= case.m, case
    g = case.local_groups or len(sizes)
    rhs_shape = (g, case.n, case.k) if case.transpose_rhs else (g, case.k, case.n)
    kw: dict[str, Any] = {
        "lhs": jnp.asarray(rng.standard_normal((case.m, case.k)), dtype),
        "rhs": jnp.asarray(rng.standard_normal(rhs_shape) / np.sqrt(case.k), dtype),
        "group_sizes": jnp.asarray(sizes),
        "transpose_rhs": case.transpose_rhs,
        "preferred_element_type": None if case.out_dtype is None else jnp.dtype(case.out_dtype),
    }
    out_dtype = dtype if case.out_dtype is None else jnp.dtype(case.out_dtype)
    if case.group_offset is not None:
        kw["group_offset"] = jnp.asarray(case.group_offset, jnp.int32)
    if case.existing_out:
        kw["existing_out"] = jnp.asarray(rng.standard_normal((case.m, case.n)), out_dtype)
    if case.bias:
        kw["rhs_bias"] = jnp.asarray(rng.standard_normal((g, 1, case.n)), dtype)
    if case.scale_blocks:
        kw["rhs_scale"] = jnp.asarray(rng.uniform(0.5, 2.0, (g, case.scale_blocks, 1, case.n)), jnp.float32)
    return kw
