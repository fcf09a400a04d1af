"""Autotuning: time an implementation's candidate configs on the device and keep the fastest.

Tuning runs in a worker thread, on concrete random inputs of the call's abstract shapes
(:meth:`Op.autotune_inputs`), so it works when the op is called inside ``jax.jit`` (or
``grad``/``vmap``): the worker has no trace in progress. Each candidate is timed with the same
clock as ``ejkernel bench`` (:func:`ejkernel.ops.timing.device_ms`: device time per call, the
median of the policy's repeats). A candidate that fails to compile or run is recorded with its
error and skipped.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import dataclasses
import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from .config import OpConfig
from .device import DeviceInfo
from .policy import Policy
from .timing import device_ms, time_callable

__all__ = ["Autotuner", "CandidateResult", "TuneResult", "time_callable"]

log = logging.getLogger("ejkernel")


@dataclasses.dataclass(frozen=True)
class CandidateResult:
    config: OpConfig
    time_ms: float | None
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class TuneResult:
    """What tuning measured: the best config (``None`` if every candidate failed) and all results."""

    best: OpConfig | None
    best_ms: float | None
    results: tuple[CandidateResult, ...]
    seconds: float
    mode: str

    def summary(self) -> str:
        ok = [r for r in self.results if r.error is None]
        bad = [r for r in self.results if r.error is not None]
        s = f"{len(ok)}/{len(self.results)} candidates ran in {self.seconds:.1f}s ({self.mode})"
        if self.best is not None:
            s += f"; best {self.best_ms:.3f} ms: {self.best.tuning_fields()}"
        if bad:
            s += "; failed: " + "; ".join(f"{r.config.tuning_fields()}: {r.error}" for r in bad)
        return s


def _short(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:300] if msg else ''}"


class Autotuner:
    """Times candidate configs. ``warmup`` runs precede the timed ``policy.autotune_repeats``."""

    def __init__(self, warmup: int = 1):
        self.warmup = warmup

    def tune(
        self,
        op: Any,
        impl: Any,
        args: Any,
        device: DeviceInfo,
        candidates: Sequence[OpConfig],
        policy: Policy,
        *,
        label: str = "",
    ) -> TuneResult:
        mode = "fwdbwd" if (policy.autotune_mode == "fwdbwd" and op.trainable) else "fwd"
        ctx = contextvars.copy_context()
        with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ejkernel-tune") as pool:
            fut = pool.submit(ctx.run, self._tune, op, impl, args, candidates, policy, mode, label)
            return fut.result()

    def _tune(
        self, op: Any, impl: Any, args: Any, candidates: Sequence[OpConfig], policy: Policy, mode: str, label: str
    ) -> TuneResult:
        start = time.perf_counter()
        inputs = op.autotune_inputs(args, seed=0)
        results: list[CandidateResult] = []
        show = policy.progress if policy.progress is not None else sys.stderr.isatty()
        progress = None
        if show:
            from rich.progress import Progress

            progress = Progress(transient=True)
            progress.start()
            task = progress.add_task(f"tuning {label or op.name}/{impl.name}", total=len(candidates))
        try:
            for cfg in candidates:
                results.append(self._time_one(op, impl, inputs, cfg, policy, mode))
                if progress is not None:
                    progress.advance(task)
        finally:
            if progress is not None:
                progress.stop()
        ok = [r for r in results if r.error is None and r.time_ms is not None]
        best = min(ok, key=lambda r: r.time_ms) if ok else None  # type: ignore[arg-type, return-value]
        return TuneResult(
            best=best.config if best else None,
            best_ms=best.time_ms if best else None,
            results=tuple(results),
            seconds=time.perf_counter() - start,
            mode=mode,
        )

    def _time_one(self, op: Any, impl: Any, inputs: Any, cfg: OpConfig, policy: Policy, mode: str) -> CandidateResult:
        try:
            if mode == "fwdbwd":
                fn = _fwdbwd_fn(op, impl, inputs, cfg)
            else:

                def fn(a: Any) -> Any:
                    return impl.run(a, cfg)

            ms = device_ms(fn, (inputs,), policy.autotune_repeats)
            return CandidateResult(cfg, ms)
        except Exception as e:
            log.info("ejkernel: autotune candidate %s failed: %s", cfg.tuning_fields(), _short(e))
            return CandidateResult(cfg, None, _short(e))


def _fwdbwd_fn(op: Any, impl: Any, inputs: Any, cfg: OpConfig) -> Callable[[Any], Any]:
    names = [n for n in op.differentiable_fields(inputs) if getattr(inputs, n) is not None]

    def loss(diff: dict[str, Any], rest: Any) -> Any:
        out = impl.run(dataclasses.replace(rest, **diff), cfg)
        # A fixed, non-trivial cotangent: sum(out * sin(index)) touches every output element.
        weights = jnp.sin(jnp.arange(out.size, dtype=jnp.float32).reshape(out.shape))
        return jnp.sum(out.astype(jnp.float32) * weights)

    def fn(a: Any) -> Any:
        diff = {n: getattr(a, n) for n in names}
        # The loss is returned too: else XLA drops the forward kernels whose outputs are no
        # residual, and the candidates would be ranked on their backward alone.
        return jax.value_and_grad(loss)(diff, a)

    return fn
