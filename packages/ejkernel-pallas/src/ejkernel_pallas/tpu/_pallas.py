"""Pallas TPU glue shared by the kernels: JAX version drift, small helpers, interpret mode."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from ._tiling import NUM_LANES

__all__ = ["compiler_params", "interpret_mode", "lanes", "smem_spec"]


def compiler_params(dimension_semantics: tuple[str, ...]) -> Any:
    """``pltpu.CompilerParams`` (``TPUCompilerParams`` before JAX 0.6; both accept the same
    ``dimension_semantics``: "parallel" axes may be split across TensorCores, "arbitrary" ones
    carry state from one grid step to the next and run in order)."""
    cls = getattr(pltpu, "CompilerParams", None) or pltpu.TPUCompilerParams
    return cls(dimension_semantics=dimension_semantics)


def smem_spec() -> Any:
    """A whole (small) array placed in scalar memory: read with scalar indexing in the kernel."""
    return pl.BlockSpec(memory_space=pltpu.SMEM)


def lanes(x: Any, n: int) -> Any:
    """A ``[rows, 128]`` lane-replicated statistic as ``[rows, n]`` (to scale an ``n``-wide tile).

    ``n`` is a multiple of 128 (tile the vreg) or smaller than 128 (slice it); the host wrappers
    pad head dimensions so that no other width reaches a kernel.
    """
    if n % NUM_LANES == 0:
        return jnp.tile(x, (1, n // NUM_LANES)) if n != NUM_LANES else x
    assert n < NUM_LANES, n
    return x[:, :n]


@contextlib.contextmanager
def interpret_mode(**params: Any) -> Iterator[None]:
    """Run every Pallas TPU kernel traced inside the block in Pallas' TPU interpreter.

    The interpreter executes the kernels on the host (CPU), simulating VMEM/SMEM, DMAs and
    semaphores; it checks out-of-bounds accesses, and fills uninitialized memory with NaN so a
    kernel that reads what it never wrote fails. ``params`` go to ``pltpu.InterpretParams``
    (e.g. ``detect_races=True``). It only changes how kernels run, not which implementation the
    registry selects: on a machine without a TPU, run the implementation alone on a pretend TPU,
    ``ejkernel.ops.run_impl(impl, args, cfg, device=DeviceInfo(platform="tpu", kind=...))`` (see
    the package's tests). The setting is part of JAX's trace context, so it also keys ``jit``
    caches.
    """
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(**params)):
        yield
