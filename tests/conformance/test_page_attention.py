"""``page_attention`` against dense attention on the gathered pages, on every implementation
(the reference cases run in test_conformance.py)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.errors import UnsupportedError
from ejkernel.ops import device_for_arrays
from ejkernel.ops.page_attention.cases import PageAttentionCase
from ejkernel.testing import conformance as C

OP = "page_attention"


IMPLS = [pytest.param(impl, cfg, id=f"{impl.name}-{cfg_id}") for impl, cfg_id, cfg in C.impl_configs(OP)]


@pytest.mark.parametrize(("impl", "cfg"), IMPLS)
def test_paged_equals_dense_on_gathered_pages(impl, cfg):
    """Gather each sequence's pages into a dense padded K/V; flash_attention with the query as
    the last position (causal, bottom-right) and padding segments must give the same output."""
    case = PageAttentionCase("dense-eq", context_lens=(5, 16, 31, 64), h=8, hk=2, block_size=8)
    kw = case.inputs(seed=3)
    args = C.bind(OP, **kw)
    reason = C.expected_decline(impl, args, device_for_arrays(jax.tree.leaves(args)))
    if reason is not None:
        with pytest.raises(UnsupportedError, match=re.escape(reason)):
            ejkernel.page_attention(**kw, platform=impl.name, cfg=cfg)
        return
    paged = ejkernel.page_attention(**kw, platform=impl.name, cfg=cfg)

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
