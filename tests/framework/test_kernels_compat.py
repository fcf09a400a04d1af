"""``ejkernel.kernels._<backend>.<op>``: earlier releases' private kernel paths, mapped to the public ops."""

from __future__ import annotations

import importlib

import jax
import numpy as np
import pytest

import ejkernel
from ejkernel.testing import page_attention_reference


def _paged(layout_heads_first: bool):
    q = jax.random.normal(jax.random.PRNGKey(0), (2, 4, 32))
    shape = (8, 2, 16, 32) if layout_heads_first else (8, 16, 2, 32)
    kc = jax.random.normal(jax.random.PRNGKey(1), shape)
    vc = jax.random.normal(jax.random.PRNGKey(2), shape)
    return q, kc, vc, np.array([40, 17], np.int32), np.array([[0, 1, 2, 3], [4, 5, 6, 7]], np.int32)


@pytest.mark.parametrize(
    "path", ["ejkernel.kernels._xla.page_attention", "ejkernel.kernels._xla.page_attention._interface"]
)
def test_private_path_is_the_public_op_on_its_platform(path):
    q, kc, vc, lens, tables = _paged(layout_heads_first=True)
    fn = importlib.import_module(path).page_attention
    got = fn(q, kc, vc, lens, tables, scale=0.3, block_size=16)
    want = ejkernel.page_attention(
        q, kc, vc, lens, tables, softmax_scale=0.3, cache_layout="blocks_heads_tokens", platform="xla"
    )
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    # the scale is passed on: another one changes the result
    other = fn(q, kc, vc, lens, tables, scale=0.05, block_size=16)
    assert not np.allclose(np.asarray(other), np.asarray(got))


def test_block_size_must_match_a_page_axis():
    from ejkernel.kernels._xla.page_attention import page_attention

    q, kc, vc, lens, tables = _paged(layout_heads_first=False)
    want = ejkernel.page_attention(q, kc, vc, lens, tables, platform="xla")
    got = page_attention(q, kc, vc, lens, tables, block_size=16)  # only this library's layout has 16-token pages
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    with pytest.raises(ValueError, match=r"block_size=5 matches neither page axis of key_cache \(8, 16, 2, 32\)"):
        page_attention(q, kc, vc, lens, tables, block_size=5)
    with pytest.raises(ValueError, match=r"block_size=16 is not the page axis of key_cache \(8, 16, 2, 32\) read as"):
        page_attention(q, kc, vc, lens, tables, block_size=16, cache_layout="blocks_heads_tokens")


def test_private_path_defaults_to_the_earlier_layout():
    """Without cache_layout, the earlier path reads [num_blocks, num_kv_heads, block_size, dim]
    even where the shapes also fit this library's layout (the public op's default)."""
    from ejkernel.kernels._xla.page_attention import page_attention

    # 8 pages of [4 kv heads, 4 tokens]: 8 query heads divide either reading.
    q = jax.random.normal(jax.random.PRNGKey(0), (2, 8, 32))
    kc, vc = (jax.random.normal(jax.random.PRNGKey(i), (8, 4, 4, 32)) for i in (1, 2))
    lens, tables = np.array([13, 7], np.int32), np.array([[0, 1, 2, 3], [4, 5, 6, 7]], np.int32)
    want = page_attention_reference(q, kc, vc, lens, tables, cache_layout="blocks_heads_tokens")
    for kw in ({}, {"block_size": 4}):  # block_size == num_kv_heads: both fit, the earlier layout wins
        np.testing.assert_allclose(np.asarray(page_attention(q, kc, vc, lens, tables, **kw)), want, atol=1e-5)
    library = page_attention(q, kc, vc, lens, tables, cache_layout="blocks_tokens_heads")
    np.testing.assert_allclose(np.asarray(library), page_attention_reference(q, kc, vc, lens, tables), atol=1e-5)
    assert not np.allclose(np.asarray(library), np.asarray(want), atol=1e-3)  # the two readings differ


def test_every_op_under_every_backend_and_errors():
    for op in ejkernel.list_ops():
        for backend in ("_xla", "_triton", "_cuda", "_pallas.tpu", "_pallas.gpu"):
            mod = importlib.import_module(f"ejkernel.kernels.{backend}.{op}")
            assert callable(getattr(mod, op))
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("ejkernel.kernels._xla.no_such_op")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("ejkernel.kernels._pallas.flash_attention")  # _pallas.tpu / _pallas.gpu
    from ejkernel.kernels._xla.flash_attention import flash_attention

    q = jax.random.normal(jax.random.PRNGKey(0), (1, 8, 2, 16))
    with pytest.raises(TypeError, match="runs platform='xla'"):
        flash_attention(q, q, q, platform="triton")
    with pytest.raises(TypeError, match="not both"):
        from ejkernel.kernels._xla.page_attention import page_attention

        page_attention(*_paged(True), scale=0.1, softmax_scale=0.1)


def test_the_backend_package_holds_the_function_not_the_module():
    """``from ejkernel.kernels._xla import page_attention`` is the function, as earlier releases'
    package ``__init__`` made it, whichever of the two import forms runs first."""
    import inspect

    first = importlib.import_module("ejkernel.kernels._cuda.mean_pooling").mean_pooling  # the submodule first
    from ejkernel.kernels._cuda import mean_pooling as then

    assert inspect.isfunction(first) and then is first
    from ejkernel.kernels._triton import gla_attention as fresh  # the package's attribute, importing the submodule

    assert inspect.isfunction(fresh)
    from ejkernel.kernels._xla import page_attention
    from ejkernel.kernels._xla.page_attention import page_attention as same

    assert inspect.isfunction(page_attention) and page_attention is same
    q, kc, vc, lens, tables = _paged(layout_heads_first=True)  # the earlier path's default layout
    got = page_attention(q, kc, vc, lens, tables)
    want = ejkernel.page_attention(q, kc, vc, lens, tables, cache_layout="blocks_heads_tokens")
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
