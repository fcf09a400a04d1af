"""ejkernel: one JAX API for fast attention kernels, many backends behind it.

>>> import ejkernel
>>> out = ejkernel.flash_attention(q, k, v, causal=True)     # doctest: +SKIP

Backends (``ejkernel-xla``, ``ejkernel-triton``, ...) are separate distributions discovered
through the ``ejkernel.backends`` entry point; ``ejkernel.backends()`` lists them and their status.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from . import errors, modules, ops, types
from .errors import ConfigResolutionError, NoImplementationError, UnsupportedError
from .modules import (
    FlashAttention,
    FlashAttentionConfig,
    PageAttention,
    PageAttentionConfig,
    RingAttention,
    RingAttentionConfig,
    ScaledDotProductAttention,
    ScaledDotProductAttentionConfig,
    flash_attention,
    page_attention,
    ring_attention,
    scaled_dot_product_attention,
    zigzag_permute,
    zigzag_unpermute,
)
from .ops import BwdParams, FwdParams, Policy, policy
from .ops.registry import Backend, BackendInfo, Platform, kernel_registry
from .types import MaskInfo

try:
    __version__ = _version("ejkernel-core")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0+unknown"


def backends() -> list[BackendInfo]:
    """The installed backend plugins and their status (loaded, failed with its error, disabled)."""
    return kernel_registry.backends()


__all__ = [
    "Backend",
    "BackendInfo",
    "BwdParams",
    "ConfigResolutionError",
    "FlashAttention",
    "FlashAttentionConfig",
    "FwdParams",
    "MaskInfo",
    "NoImplementationError",
    "PageAttention",
    "PageAttentionConfig",
    "Platform",
    "Policy",
    "RingAttention",
    "RingAttentionConfig",
    "ScaledDotProductAttention",
    "ScaledDotProductAttentionConfig",
    "UnsupportedError",
    "__version__",
    "backends",
    "errors",
    "flash_attention",
    "kernel_registry",
    "modules",
    "ops",
    "page_attention",
    "policy",
    "ring_attention",
    "scaled_dot_product_attention",
    "types",
    "zigzag_permute",
    "zigzag_unpermute",
]
