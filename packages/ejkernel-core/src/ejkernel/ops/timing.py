"""Timing device work: the one clock of ``ejkernel bench`` and the autotuner.

:func:`device_ms` measures device milliseconds per call. A timed program runs the function ``n``
times inside one ``lax.fori_loop`` (the inputs carried by the loop, one element of each changed
per step in place, the outputs summed, so no call or part of one can be skipped or hoisted): this
times the device, not the host, whose per-call dispatch was measured at ~0.6 ms on a virtualized
GPU host and would swamp sub-millisecond kernels. A program
still costs a fixed overhead (launch, argument copies, the host's wait: ~0.75 ms per program
there), so the time per call is the slope between two loop lengths,
``(T(n) - T(LOOP)) / (n - LOOP)``, with ``n`` chosen so that the longer program runs about
``SLOPE_PROGRAM_MS``: the fixed cost cancels, what remains is the calls and the loop's own glue.
A short program of ``LONG_PROGRAM_MS`` or more is its own answer (``T(LOOP) / LOOP``).

:func:`time_callable` is the plain wall-clock median of a synchronized callable (used for whole
programs, such as the two loops above).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .device import device_for_arrays

__all__ = [
    "LONG_PROGRAM_MS",
    "LOOP",
    "MAX_LOOP",
    "SLOPE_PROGRAM_MS",
    "TIMER",
    "device_ms",
    "looped",
    "measure_copy_gbps",
    "time_callable",
]

LOOP = 10
SLOPE_PROGRAM_MS = 40.0
MAX_LOOP = 400
# A short program at least this long is timed alone (no slope): its fixed cost is noise.
LONG_PROGRAM_MS = 10 * SLOPE_PROGRAM_MS
TIMER = f"device: slope between fori_loop programs of {LOOP} and n calls (n <= {MAX_LOOP}, ~{SLOPE_PROGRAM_MS:g} ms)"

# A repeat of time_callable is at least this long: very fast programs run several times per
# repeat, so the host's synchronization cost does not dominate.
_MIN_REPEAT_S = 2e-3
_MAX_INNER = 64


def time_callable(fn: Callable[[], Any], repeats: int, *, warmup: int = 1) -> float:
    """Median milliseconds of ``fn()`` (synchronized with ``block_until_ready``)."""
    for _ in range(warmup):
        jax.block_until_ready(fn())
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    one = time.perf_counter() - t0
    inner = max(1, min(_MAX_INNER, int(_MIN_REPEAT_S / max(one, 1e-9))))
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            out = fn()
        jax.block_until_ready(out)
        samples.append((time.perf_counter() - t0) / inner)
    return statistics.median(samples) * 1e3


# Never equal to a sum of outputs in practice; XLA cannot know that, so an integer input tied to
# it depends on the previous call at the cost of one element.
_NEVER = -3.0e38


def _nudge(args: Any, i: Any, acc: Any) -> Any:
    """``args`` with one element of every array changed per loop step, so that every call, and
    every part of it, computes anew: nothing is loop-invariant, so nothing is hoisted out of the
    loop. The arrays are carried by the loop: the change is an in-place update of one element,
    not a copy. Float arrays get ``step * 1e-6``; integer and boolean arrays (group sizes,
    ``cu_seqlens``, masks) get a change that never happens but hangs on the previous calls'
    outputs (they keep their values).

    Earlier forms were wrong: adding the step to every element of the first input is a full read
    and write of it per call (for ``mean_pooling``, whose input is its traffic, that tripled the
    bytes timed); an ``optimization_barrier`` on ``(x, step)`` is removed by XLA before
    loop-invariant code motion; and tying the first argument alone let XLA hoist the work that
    reads only the others (a matmul's ``dlhs = dout · rhsᵀ``, the linear family's chunk states,
    which do not read the queries)."""
    never = acc == _NEVER

    def one(leaf: Any) -> Any:
        if not hasattr(leaf, "dtype") or not leaf.size:
            return leaf
        first = (0,) * leaf.ndim
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            return leaf.at[first].add((i.astype(jnp.float32) * 1e-6).astype(leaf.dtype))
        if jnp.issubdtype(leaf.dtype, jnp.integer):
            return leaf.at[first].add(never.astype(leaf.dtype))
        if leaf.dtype == jnp.bool_:
            return leaf.at[first].set(leaf[first] ^ never)
        return leaf

    return jax.tree.map(one, args)


def looped(fn: Callable[..., Any], loop: int = LOOP) -> Callable[..., Any]:
    """``jit`` of ``loop`` data-dependent calls of ``fn(*args)`` inside one program (each
    argument may be a pytree; all are carried by the loop and nudged by :func:`_nudge` before
    each call, so they are copied once per program, not per call)."""

    def run(*args: Any) -> Any:
        def body(i: Any, carry: Any) -> Any:
            a, acc = carry
            a = _nudge(a, i, acc)
            leaves = jax.tree.leaves(fn(*a))
            return a, acc + sum(jnp.sum(leaf.astype(jnp.float32)) for leaf in leaves)

        return lax.fori_loop(0, loop, body, (args, jnp.zeros((), jnp.float32)))[1]

    return jax.jit(run)


def device_ms(fn: Callable[..., Any], args: Sequence[Any], repeats: int) -> float:
    """Device milliseconds per call of ``fn(*args)`` (see the module docstring). Raises what
    compiling or running ``fn`` raises."""
    short = looped(fn, LOOP)
    t_short = time_callable(lambda: short(*args), repeats)
    if t_short >= LONG_PROGRAM_MS:
        # Slow calls (a peer at 80+ ms a call): the fixed cost is < 0.2 % of this program, and a
        # second, longer one would only double the minutes spent.
        return t_short / LOOP
    n = int(min(MAX_LOOP, max(2 * LOOP, SLOPE_PROGRAM_MS * LOOP / max(t_short, 1e-6))))
    long = looped(fn, n)
    t_long = time_callable(lambda: long(*args), repeats)
    slope = (t_long - t_short) / (n - LOOP)
    # Noise can only make the slope meaningless when the fixed cost dwarfs n calls; then the
    # long program's average (an upper bound) is the better figure.
    return slope if slope > 0.5 * t_long / n else t_long / n


def measure_copy_gbps(nbytes: int, repeats: int = 10) -> float:
    """Device-to-device copy bandwidth (bytes read + written per second, in GB/s).

    On an NVIDIA GPU with PyTorch importable, a CUDA memcpy (``Tensor.copy_``) timed with CUDA
    events: the real copy ceiling. Otherwise XLA rewriting one buffer ``LOOP`` times inside one
    program (an elementwise kernel: on an H200 ~3.5 TB/s against the memcpy's ~4.25).
    """
    n = max(1, nbytes // 4)
    if device_for_arrays([]).platform == "gpu":
        try:
            return _torch_copy_gbps(n, repeats)
        except Exception:  # no torch, or no CUDA build of it: fall back to XLA
            pass
    x = jnp.asarray(np.random.default_rng(0).standard_normal(n).astype(np.float32))
    run = jax.jit(lambda x: lax.fori_loop(0, LOOP, lambda i, y: y * 1.0001, x))
    ms = time_callable(lambda: run(x), repeats) / LOOP
    return 2 * x.nbytes / (ms * 1e-3) / 1e9


def _torch_copy_gbps(n: int, repeats: int) -> float:
    import torch

    a = torch.randn(n, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(LOOP):
            b.copy_(a)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / LOOP)
    ms = sorted(times)[len(times) // 2]
    del a, b
    torch.cuda.empty_cache()
    return 2 * n * 4 / (ms * 1e-3) / 1e9
