"""TPU tiling constants and device checks: pure Python, importable without touching Pallas.

TPU vector registers hold ``[8, 128]`` 32-bit tiles (sublanes × lanes); 16-bit dtypes pack two
rows per sublane, so their natural tile is ``[16, 128]``. A block's last dimension is therefore
a multiple of 128 (or the whole axis) and its second-to-last a multiple of the sublane count.
"""

from __future__ import annotations

import re
from typing import Any

import jax.numpy as jnp
import numpy as np

from ejkernel.ops import DeviceInfo

__all__ = [
    "MASK_VALUE",
    "NUM_LANES",
    "NUM_SUBLANES",
    "VMEM_BUDGET",
    "cdiv",
    "round_up",
    "sublanes",
    "tpu_decline",
    "tpu_generation",
]

NUM_LANES = 128
NUM_SUBLANES = 8
# Finite "minus infinity" for masked logits: exp(MASK - m) underflows to 0 without the NaN that
# -inf - (-inf) would give for rows that have seen only masked keys so far.
MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)

# Mosaic TPU (Pallas) compiles for TPU v4 and newer; v2/v3 are not supported by the compiler.
_MIN_GENERATION = 4
# Default scoped-VMEM limit of a Mosaic kernel (v4/v5: 16 MiB; v6 raises it to 32 MiB). Block
# sizes are chosen to fit the smaller one with room for Mosaic's own temporaries.
VMEM_BUDGET = 12 * 1024 * 1024


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def round_up(x: int, m: int) -> int:
    return cdiv(x, m) * m


def sublanes(dtype: Any) -> int:
    """Rows of one native tile: 8 for 32-bit dtypes, 16 for packed 16-bit ones."""
    return NUM_SUBLANES * max(1, 4 // jnp.dtype(dtype).itemsize)


def tpu_generation(kind: str) -> int | None:
    """TPU generation from a JAX device kind ("TPU v5 lite" → 5, "TPU7x" → 7), or ``None``."""
    m = re.search(r"TPU\s*v?(\d+)", kind, flags=re.IGNORECASE)
    return int(m.group(1)) if m else None


def tpu_decline(device: DeviceInfo) -> str | None:
    """Why the Mosaic TPU kernels cannot run on ``device`` (``None``: they can)."""
    if device.platform != "tpu":
        return f"needs a TPU; this call runs on {device.platform} ({device.kind})"
    gen = tpu_generation(device.kind)
    if gen is not None and gen < _MIN_GENERATION:
        return f"Mosaic TPU kernels need TPU v{_MIN_GENERATION} or newer, this device is {device.kind}"
    return None
