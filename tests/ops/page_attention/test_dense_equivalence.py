"""``page_attention`` against dense attention on the gathered pages, on every implementation
(the reference cases run in this folder's test_conformance.py)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.errors import UnsupportedError
from ejkernel.ops import device_for_arrays
from ejkernel.ops.page_attention.cases import PageAttentionCase, cache_sized_writes
from ejkernel.testing import conformance as C
from ejkernel.testing import page_attention_reference

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


# The serving shapes (block size 16): [num_blocks, 16, 4, 128] with 16 query heads and
# [num_blocks, 16, 8, 128] with 32 fit both layouts' head counts; the default reads this
# library's layout, with no cache_layout passed (a serving loop written from the README).
SERVING = [
    PageAttentionCase("serving-h16-hk4", context_lens=(40, 17, 1, 300), h=16, hk=4, d=128),
    PageAttentionCase("serving-h32-hk8", context_lens=(16, 129, 64), h=32, hk=8, d=128, dtype="bfloat16"),
]


@pytest.mark.parametrize("case", SERVING, ids=lambda c: c.name)
@pytest.mark.parametrize(("impl", "cfg"), IMPLS)
def test_serving_shapes_need_no_cache_layout(impl, cfg, case):
    kw = case.inputs(seed=4)
    assert kw["key_cache"].shape[1:] == (16, case.hk, 128)
    del kw["cache_layout"]
    args = C.bind(OP, **kw)
    assert args.cache_layout == "blocks_tokens_heads" and args.block_size == 16
    reason = C.expected_decline(impl, args, device_for_arrays(jax.tree.leaves(args)))
    if reason is not None:
        with pytest.raises(UnsupportedError, match=re.escape(reason)):
            ejkernel.page_attention(**kw, platform=impl.name, cfg=cfg)
        return

    def default_layout(**k):
        assert k.pop("cache_layout") == "blocks_tokens_heads"  # the case's; the call passes none
        return ejkernel.page_attention(**k, platform=impl.name, cfg=cfg)

    C.check_page_attention(default_layout, case, seed=4)


@pytest.mark.parametrize("layout", ["blocks_tokens_heads", "blocks_heads_tokens"])
def test_xla_reads_either_layout_in_place(layout):
    """The compiled XLA program gathers pages from the cache as given: no transpose or copy of
    the whole cache (the earlier layout used to be transposed, whole, on every call). The
    cache is much larger than the pages a call reads, so a cache-sized array is a cache copy."""
    case = PageAttentionCase("in-place", context_lens=(40, 17, 1), h=16, hk=4, d=128, extra_blocks=200)
    kw = case.inputs()
    if layout == "blocks_heads_tokens":
        kw["key_cache"], kw["value_cache"] = (jnp.swapaxes(kw[n], 1, 2) for n in ("key_cache", "value_cache"))
    arrays = ("query", "key_cache", "value_cache", "context_lens", "block_tables")
    f = jax.jit(lambda *a: ejkernel.page_attention(*a, cache_layout=layout, platform="xla"))
    hlo = f.lower(*(kw[n] for n in arrays)).compile().as_text()
    assert "gather" in hlo
    assert cache_sized_writes(hlo, kw["key_cache"].shape) == []
    # What the check would see of a transposed cache (the earlier code's swapaxes per call).
    g = jax.jit(lambda kc: jnp.swapaxes(kc, 1, 2) * 2)
    assert cache_sized_writes(g.lower(kw["key_cache"]).compile().as_text(), kw["key_cache"].shape) != []
    out = f(*(kw[n] for n in arrays))
    ref = page_attention_reference(**{n: kw[n] for n in arrays}, cache_layout=layout)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=2e-5, rtol=2e-5)
