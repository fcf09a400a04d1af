"""Which implementations (and configs) the conformance tests run, and how they assert declines."""

from __future__ import annotations

import re
from typing import Any

import pytest

import ejkernel
from ejkernel.errors import UnsupportedError
from ejkernel.ops import device_for_arrays, kernel_registry
from ejkernel.testing import conformance as C

# Besides each implementation's heuristic config, configs that force many small tiles (and
# different tiles forward and backward), so the tiling logic is exercised on small inputs.
EXTRA_CONFIGS: dict[tuple[str, str], list[tuple[str, Any]]] = {
    ("flash_attention", "xla"): [
        (
            "tiles16x32-bwd32x8",
            ejkernel.FlashAttentionConfig(
                fwd_params=ejkernel.FwdParams(q_blocksize=16, kv_blocksize=32),
                bwd_params=ejkernel.BwdParams(q_blocksize=32, kv_blocksize=8),
            ),
        )
    ],
    ("flash_attention", "triton"): [
        (
            "tiles32x32-bwd16x32",
            ejkernel.FlashAttentionConfig(
                fwd_params=ejkernel.FwdParams(q_blocksize=32, kv_blocksize=32, num_warps=4, num_stages=2),
                bwd_params=ejkernel.BwdParams(q_blocksize=16, kv_blocksize=32, num_warps=4, num_stages=2),
            ),
        )
    ],
    ("page_attention", "xla"): [
        ("step8tokens", ejkernel.PageAttentionConfig(fwd_params=ejkernel.FwdParams(kv_blocksize=8)))
    ],
    # TPU tiling: 16-row query blocks, 128-key blocks (the smallest the lane dimension allows).
    ("flash_attention", "pallas"): [
        (
            "tiles16x128-bwd32x128",
            ejkernel.FlashAttentionConfig(
                fwd_params=ejkernel.FwdParams(q_blocksize=16, kv_blocksize=128),
                bwd_params=ejkernel.BwdParams(q_blocksize=32, kv_blocksize=128),
            ),
        )
    ],
    ("page_attention", "pallas"): [
        ("step32tokens", ejkernel.PageAttentionConfig(fwd_params=ejkernel.FwdParams(kv_blocksize=32)))
    ],
    # 32-token partitions: every case with a context above 32 goes through the split-K merge.
    ("page_attention", "cuda"): [
        ("partition32", ejkernel.PageAttentionConfig(fwd_params=ejkernel.FwdParams(kv_blocksize=32))),
        ("splits3", ejkernel.PageAttentionConfig(num_splits=3)),
    ],
}


def impl_params(op: str) -> list[Any]:
    """``pytest.param((impl_name, cfg))`` for every registered implementation of ``op``."""
    out = []
    for impl in kernel_registry.implementations(op):
        out.append(pytest.param((impl.name, None), id=f"{impl.name}-heuristic"))
        for cfg_id, cfg in EXTRA_CONFIGS.get((op, impl.name), []):
            out.append(pytest.param((impl.name, cfg), id=f"{impl.name}-{cfg_id}"))
    return out


def declined(op: str, impl_name: str, kwargs: dict[str, Any]) -> str | None:
    """Why ``impl_name`` declines this call here (``None``: it accepts)."""
    impl = kernel_registry.get(op, platform=impl_name)
    args = C.bind(op, **kwargs)
    return kernel_registry.check(impl, args, device_for_arrays(jax_leaves(args)))


def jax_leaves(args: Any) -> list[Any]:
    import jax

    return [x for x in jax.tree.leaves(args) if x is not None]


def assert_declines(fn: Any, kwargs: dict[str, Any], reason: str) -> None:
    """A declined feature must raise the documented error, carrying the reason."""
    with pytest.raises(UnsupportedError, match=re.escape(reason)):
        fn(**kwargs)
