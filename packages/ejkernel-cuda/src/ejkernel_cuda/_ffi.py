"""Loading the compiled extension and registering its FFI targets with JAX (once, lazily)."""

from __future__ import annotations

import functools
import importlib


@functools.cache
def _load() -> tuple[object | None, str | None]:
    try:
        ext = importlib.import_module("ejkernel_cuda._ext")
    except ImportError as e:
        return None, (
            f"the ejkernel_cuda extension is not built ({e}); reinstall ejkernel-cuda on a machine with nvcc "
            "(pip install ejkernel-cuda --no-binary ejkernel-cuda)"
        )
    return ext, None


def availability() -> str | None:
    """Why the CUDA kernels cannot run in this process (``None``: they can)."""
    ext, why = _load()
    if ext is None:
        return why
    if ext.cuda_device_count() == 0:  # type: ignore[attr-defined]
        return "needs an NVIDIA GPU: the CUDA runtime sees no device"
    return None


@functools.cache
def ensure_registered() -> None:
    """Register every FFI target of the extension with JAX for the CUDA platform."""
    import jax

    ext, why = _load()
    if ext is None:
        raise RuntimeError(why)
    for name, capsule in ext.registrations().items():  # type: ignore[attr-defined]
        jax.ffi.register_ffi_target(name, capsule, platform="CUDA")
