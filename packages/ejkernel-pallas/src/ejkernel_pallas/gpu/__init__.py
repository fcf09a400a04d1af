"""Mosaic GPU kernels (``jax.experimental.pallas.mosaic_gpu``) for NVIDIA Hopper GPUs.

One folder per op as in ``ejkernel_pallas.tpu``, registered from :func:`ejkernel_pallas.register`
with ``Backend.GPU`` under their own names (``pallas_gpu``) next to the TPU implementations:
``platform="pallas"`` takes whichever accepts the call's device.

On a machine without a Hopper GPU the kernels run in Pallas' GPU interpreter (threads, shared
memory, TMA copies and barriers simulated on the CPU): inside :func:`interpret_mode`, run an
implementation alone on a pretend Hopper, ``ejkernel.ops.run_impl(impl, args, cfg,
device=DeviceInfo(platform="gpu", kind="NVIDIA H200", compute_capability=(9, 0)))``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

__all__ = ["interpret_mode", "interpreting"]

_INTERPRET = contextvars.ContextVar("ejkernel_pallas_gpu_interpret", default=False)


@contextlib.contextmanager
def interpret_mode() -> Iterator[None]:
    """Run the Mosaic GPU kernels traced inside the block in Pallas' GPU interpreter. It is read
    when a call is traced: a ``jit`` traced outside the block keeps its compiled kernels."""
    token = _INTERPRET.set(True)
    try:
        yield
    finally:
        _INTERPRET.reset(token)


def interpreting() -> bool:
    """Whether :func:`interpret_mode` is on."""
    return _INTERPRET.get()
