"""Every registered ``scaled_dot_product_attention`` implementation against the reference."""

from __future__ import annotations

import pytest

import ejkernel
from ejkernel.testing import conformance as C

from ._impls import assert_declines, declined, impl_params

OP = "scaled_dot_product_attention"


@pytest.mark.parametrize("impl_cfg", impl_params(OP))
@pytest.mark.parametrize("case", C.FLASH_ATTENTION_CASES, ids=lambda c: c.name)
def test_scaled_dot_product_attention(impl_cfg, case):
    impl, cfg = impl_cfg

    def fn(**kw):
        return ejkernel.scaled_dot_product_attention(**kw, platform=impl, cfg=cfg)

    kwargs = C.make_attention_inputs(case)
    reason = declined(OP, impl, kwargs)
    if reason is not None:
        assert_declines(fn, kwargs, reason)
        return
    C.check_attention(fn, case)
