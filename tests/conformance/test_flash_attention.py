"""Every registered ``flash_attention`` implementation against the reference, on every case."""

from __future__ import annotations

import pytest

import ejkernel
from ejkernel.testing import conformance as C

from ._impls import assert_declines, declined, impl_params

OP = "flash_attention"


@pytest.mark.parametrize("impl_cfg", impl_params(OP))
@pytest.mark.parametrize("case", C.FLASH_ATTENTION_CASES, ids=lambda c: c.name)
def test_flash_attention(impl_cfg, case):
    impl, cfg = impl_cfg

    def fn(**kw):
        return ejkernel.flash_attention(**kw, platform=impl, cfg=cfg)

    kwargs = C.make_attention_inputs(case)
    reason = declined(OP, impl, kwargs)
    if reason is not None:
        assert_declines(fn, kwargs, reason)
        return
    C.check_attention(fn, case)
