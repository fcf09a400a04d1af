"""Every registered ``page_attention`` implementation against the reference, and against dense
attention on the gathered pages."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.testing import conformance as C

from ._impls import assert_declines, declined, impl_params

OP = "page_attention"


@pytest.mark.parametrize("impl_cfg", impl_params(OP))
@pytest.mark.parametrize("case", C.PAGE_ATTENTION_CASES, ids=lambda c: c.name)
def test_page_attention(impl_cfg, case):
    impl, cfg = impl_cfg

    def fn(**kw):
        return ejkernel.page_attention(**kw, platform=impl, cfg=cfg)

    kwargs = C.make_page_inputs(case)
    reason = declined(OP, impl, kwargs)
    if reason is not None:
        assert_declines(fn, kwargs, reason)
        return
    C.check_page_attention(fn, case)


@pytest.mark.parametrize("impl_cfg", impl_params(OP))
def test_paged_equals_dense_on_gathered_pages(impl_cfg):
    """Gather each sequence's pages into a dense padded K/V; flash_attention with the query as
    the last position (causal, bottom-right) and padding segments must give the same output."""
    impl, cfg = impl_cfg
    case = C.PageAttentionCase("dense-eq", context_lens=(5, 16, 31, 64), h=8, hk=2, block_size=8)
    kw = C.make_page_inputs(case, seed=3)
    reason = declined(OP, impl, kw)
    if reason is not None:
        assert_declines(lambda **a: ejkernel.page_attention(**a, platform=impl, cfg=cfg), kw, reason)
        return
    paged = ejkernel.page_attention(**kw, platform=impl, cfg=cfg)

    tables = np.asarray(kw["block_tables"])
    lens = np.asarray(kw["context_lens"])
    kc, vc = kw["key_cache"], kw["value_cache"]
    n = tables.shape[1] * case.block_size
    k = jnp.nan_to_num(kc[tables].reshape(len(lens), n, case.hk, case.d))
    v = jnp.nan_to_num(vc[tables].reshape(len(lens), n, case.hk, case.d))
    # Keys at or past the context are padding; the query takes the segment of the last token.
    kv_seg = np.where(np.arange(n)[None, :] < lens[:, None], 0, -1)
    dense = ejkernel.flash_attention(
        kw["query"][:, None],
        k,
        v,
        mask_info=ejkernel.MaskInfo.from_segments(np.zeros((len(lens), 1), np.int32), kv_seg),
    )[:, 0]
    np.testing.assert_allclose(np.asarray(paged), np.asarray(dense), atol=2e-5, rtol=2e-5)
