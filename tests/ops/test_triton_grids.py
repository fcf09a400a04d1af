"""Every Triton launch fits CUDA's grid: at most 65535 programs on axes 1 and 2. Batch x heads
rows past that (4200 x 16 = 67200 rows of a few tokens: a batch of short prompts) share axis 0
with the sequence tiles; the launches are traced and recorded, nothing is compiled or run
(``_launch.check_grid`` refuses an oversized grid; the delta rules' own grid test is in
``delta_rule/test_triton_interpret.py``)."""

from __future__ import annotations

import os

import jax.numpy as jnp
import pytest

from ejkernel.ops import DeviceInfo, kernel_registry

pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") == "1", reason="records launches: Triton without its interpreter"
)

ROWS_B, ROWS_H = 4200, 16  # 67200 (batch, head) rows


def _flash_kw(causal: bool, d: int) -> dict:
    q = jnp.zeros((ROWS_B, 16, ROWS_H, d), jnp.bfloat16)
    return dict(query=q, key=q, value=q, causal=causal)


def _nsa_kw() -> dict:
    from ejkernel.ops.native_sparse_attention.cases import NSACase

    return NSACase("rows", b=ROWS_B, s=16, h=ROWS_H, hk=ROWS_H, d=16, bs=16, dtype="bfloat16").inputs()


def _blocksparse_kw() -> dict:
    from ejkernel.ops.blocksparse_attention.cases import BlockSparseCase

    case = BlockSparseCase("rows", b=ROWS_B, h=ROWS_H, hk=ROWS_H, sq=16, sk=16, d=16, dtype="bfloat16")
    return case.inputs()


CASES = [
    ("flash_attention", lambda: _flash_kw(False, 64), 90),  # the warp-specialized TMA forward
    ("flash_attention", lambda: _flash_kw(True, 128), 90),  # the TMA forward with masks
    ("flash_attention", lambda: _flash_kw(True, 64), 80),  # the pointer kernels
    ("native_sparse_attention", _nsa_kw, 90),
    ("blocksparse_attention", _blocksparse_kw, 90),
]


@pytest.mark.parametrize(("op", "make", "cap"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_many_rows_fit_the_grid(monkeypatch, op, make, cap):
    from ejkernel_triton._compile import traced_launches
    from ejkernel_triton._launch import GRID_LIMITS
    from ejkernel_triton.flash_attention import _spec

    # The TMA kernels are chosen by the arrays' device: pretend it is the traced-for one.
    monkeypatch.setattr(_spec, "_capability", lambda a: (cap // 10, cap % 10))
    impl = kernel_registry.get(op, platform="triton")
    device = DeviceInfo(platform="gpu", kind="test", compute_capability=(cap // 10, cap % 10))
    records = traced_launches(impl, op, make(), None, device)
    assert records
    names = {r["name"] for r in records}
    if op == "flash_attention":
        fwd = "ejkernel_flash_fwd_tma" if cap >= 90 else "ejkernel_flash_fwd"
        assert any(n.startswith(fwd) for n in names) and "ejkernel_flash_dq" in names, names
    for r in records:
        grid = tuple(r["grid"])
        assert all(n <= limit for n, limit in zip(grid, GRID_LIMITS, strict=False)), (r["name"], grid)
    assert max(max(r["grid"]) for r in records) > GRID_LIMITS[1]  # the rows did not fit axis 1


def test_oversized_grid_is_refused_before_launch():
    from ejkernel_triton._launch import check_grid

    check_grid((2**31 - 1, 65535, 65535), "k")
    with pytest.raises(ValueError, match=r"k: grid \(1, 67200\) has 67200 programs on axis 1"):
        check_grid((1, 67200), "k")
