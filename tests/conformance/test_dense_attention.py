"""Every registered implementation of the dense attention ops (``flash_attention`` and
``scaled_dot_product_attention``) against the reference, on every conformance case."""

from __future__ import annotations

import pytest

import ejkernel
from ejkernel.testing import conformance as C

from ._impls import assert_declines, declined, impl_params

PARAMS = [
    pytest.param(op, *p.values, id=f"{op}-{p.id}")
    for op in ("flash_attention", "scaled_dot_product_attention")
    for p in impl_params(op)
]


@pytest.mark.parametrize(("op", "impl_cfg"), PARAMS)
@pytest.mark.parametrize("case", C.FLASH_ATTENTION_CASES, ids=lambda c: c.name)
def test_dense_attention(op, impl_cfg, case):
    impl, cfg = impl_cfg
    op_fn = getattr(ejkernel, op)

    def fn(**kw):
        return op_fn(**kw, platform=impl, cfg=cfg)

    kwargs = C.make_attention_inputs(case)
    reason = declined(op, impl, kwargs)
    if reason is not None:
        assert_declines(fn, kwargs, reason)
        return
    C.check_attention(fn, case)
