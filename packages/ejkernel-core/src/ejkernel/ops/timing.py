"""Timing device work: the one clock of ``ejkernel bench`` and the autotuner.

:func:`device_ms` measures device milliseconds per call. A timed program runs the function ``n``
times inside one ``lax.fori_loop`` (the inputs carried by the loop through an optimization barrier
with a running sum of one element of each previous output, itself taken behind a barrier over the
whole outputs, so no call or part of one can be skipped or hoisted, and the loop's glue does
not read the outputs again): this
times the device, not the host, whose per-call dispatch (a large part of a millisecond on a
virtualized GPU host) would swamp sub-millisecond kernels. A program still costs a fixed overhead
(launch, argument copies, the host's wait), so the time per call is the slope between two loop
lengths,
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
# Recorded with every bench record. "one element read per output": since the loop stopped summing
# every output (records without it include one read of their outputs per call).
TIMER = (
    f"device: slope between fori_loop programs of {LOOP} and n calls (n <= {MAX_LOOP}, ~{SLOPE_PROGRAM_MS:g} ms), "
    "one element read per output"
)

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


def _nudge(args: Any, i: Any, acc: Any) -> Any:
    """``args`` made to depend, for XLA, on the previous calls' outputs (``acc``, their running
    sum) through one ``optimization_barrier`` over all of them: nothing a call computes is
    loop-invariant, so nothing is hoisted out of the loop, and the arrays are neither written
    nor copied (the loop carries them unchanged; ``i`` is unused).

    Why not simpler forms: adding the step to every element of the first input is a full read
    and write of it per call (for ``mean_pooling``, whose input is its traffic, that triples the
    bytes timed); a barrier on ``(first input, step)`` lets XLA hoist the work that reads only the
    other arguments (a matmul's ``dlhs = dout · rhsᵀ``, the linear family's chunk states, which do
    not read the queries); and changing one element of each argument per step, with a scatter or a
    ``dynamic_update_slice``, makes XLA's GPU backend copy every argument per call (about tripling
    the time of a bandwidth-bound ``jnp.sum``)."""
    del i
    out, _ = lax.optimization_barrier((args, acc))
    return out


def looped(fn: Callable[..., Any], loop: int = LOOP, feedback: dict[int, int] | None = None) -> Callable[..., Any]:
    """``jit`` of ``loop`` data-dependent calls of ``fn(*args)`` inside one program (each
    argument may be a pytree; all are carried by the loop and passed through :func:`_nudge`
    before each call, so they are never copied per call). ``feedback={i: j}``: output leaf ``j``
    of a call is argument ``i`` of the next (a state the op updates, such as a KV cache it
    writes: the loop carries it as a serving loop that donates it does, updated in place)."""

    def run(*args: Any) -> Any:
        def body(i: Any, carry: Any) -> Any:
            a, acc = carry
            a = _nudge(a, i, acc)
            # The outputs go through an optimization barrier (XLA computes them whole: nothing
            # that reads them is pushed into their producers) and one element of each joins the
            # running sum. Summing every output would read them all once more per call: for a
            # grouped matmul's forward+backward its 403 MB weight gradient, a cost the dense
            # matmul peer (a 6 MB one) never pays.
            leaves = lax.optimization_barrier(jax.tree.leaves(fn(*a)))
            if feedback:
                a = tuple(leaves[feedback[k]] if k in feedback else x for k, x in enumerate(a))
            return a, acc + sum(jnp.sum(leaf.reshape(-1)[:1].astype(jnp.float32)) for leaf in leaves)

        return lax.fori_loop(0, loop, body, (args, jnp.zeros((), jnp.float32)))[1]

    return jax.jit(run)


def device_ms(
    fn: Callable[..., Any], args: Sequence[Any], repeats: int, feedback: dict[int, int] | None = None
) -> float:
    """Device milliseconds per call of ``fn(*args)`` (see the module docstring; ``feedback``: see
    :func:`looped`). Raises what compiling or running ``fn`` raises."""
    short = looped(fn, LOOP, feedback)
    t_short = time_callable(lambda: short(*args), repeats)
    if t_short >= LONG_PROGRAM_MS:
        # Slow calls (a peer at 80+ ms a call): the fixed cost is < 0.2 % of this program, and a
        # second, longer one would only double the minutes spent.
        return t_short / LOOP
    n = int(min(MAX_LOOP, max(2 * LOOP, SLOPE_PROGRAM_MS * LOOP / max(t_short, 1e-6))))
    long = looped(fn, n, feedback)
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
