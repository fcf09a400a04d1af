"""Every Pallas TPU implementation as users call the op: eagerly and under ``jax.vmap`` (unless
the op declares it unsupported), forward and gradient, in Pallas' TPU interpreter on a pretend
TPU, on the first case of each op its declaration accepts. (Inside ``shard_map`` the pretend
device cannot be reached: a user's shard_map runs on the real CPU devices, where Pallas declines.)"""

from __future__ import annotations

import pytest

from ejkernel.ops import kernel_registry
from ejkernel.ops.op import list_ops, op_class
from ejkernel.testing import conformance as C
from ejkernel_pallas.tpu import interpret_mode

from ._pallas_support import TPU

pytestmark = pytest.mark.interpret


def _params():
    for op in list_ops():
        for impl in kernel_registry.implementations(op):
            if impl.name != "pallas":
                continue
            case = C.first_accepted_case(impl, op_class(op).get_cases(), TPU)
            if case is not None:
                yield pytest.param(impl, case, id=f"{op}-{case.name}")


PARAMS = list(_params())


# Under vmap, Pallas' TPU interpreter (jax 0.11.2) fails on the batched kernels that take scalar
# prefetch or several grid axes ("safe_zip() argument 1 has length 4 but argument 0 has length
# 5"); a TPU was not available to tell whether compiled Mosaic kernels batch. Strict: a fix shows.
VMAP_FAILS = {"blocksparse_attention", "flash_attention", "page_attention", "ragged_page_attention_v2"}


@pytest.mark.parametrize(("impl", "case"), PARAMS)
def test_eager(impl, case):
    with interpret_mode():
        assert C.check_impl(impl, case, device=TPU, modes=("eager",)) == "ok"


@pytest.mark.parametrize(
    ("impl", "case"),
    [
        pytest.param(
            *p.values[:2],
            id=p.id,
            marks=[pytest.mark.xfail(strict=True, reason="the TPU interpreter cannot batch it")]
            if p.values[0].op_name in VMAP_FAILS
            else [],
        )
        for p in PARAMS
        if not op_class(p.values[0].op_name).vmap_unsupported
    ],
)
def test_vmap(impl, case):
    with interpret_mode():
        assert C.check_impl(impl, case, device=TPU, modes=("vmap",)) == "ok"


def test_every_pallas_op_takes_part():
    registered = {i.op_name for op in list_ops() for i in kernel_registry.implementations(op) if i.name == "pallas"}
    assert registered and {p.values[0].op_name for p in PARAMS} == registered
