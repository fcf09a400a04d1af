"""Benchmarking an op: every implementation that runs here, side by side with its peers.

An op describes its benchmark in its folder (``ejkernel/ops/<op>/bench.py``: ``BENCH``, an
:class:`OpBench`): its command-line options, the cases they make (inputs, the cost model: FLOPs
or bytes, the peers to time on the same inputs, the check against the reference). :func:`run`
times every registered implementation that accepts each case, the call that names none (the
``default`` record, where several accept: what users get), and the peers, with the one clock
of the library (:func:`ejkernel.ops.timing.device_ms`), forward and, for trainable ops,
forward+backward; ``ejkernel bench <op>`` is a thin command line over it.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import functools
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .device import device_for_arrays
from .executor import bind, record_dispatches
from .op import get_op, op_class
from .registry import kernel_registry
from .timing import TIMER, device_ms

__all__ = ["DEFAULT", "BenchCase", "OpBench", "Peer", "add_ratios", "run", "write_json"]

#: The record name of the call that names no implementation (its ``dispatch`` says which ran).
DEFAULT = "default"


@dataclasses.dataclass
class Peer:
    """A peer timed on the same inputs: ``fn(*arrays)``; ``to_op(out)`` maps its output to the
    op's layout for the check (e.g. a padded batch back to a packed row)."""

    name: str
    fn: Callable[..., Any]
    arrays: tuple[Any, ...]
    to_op: Callable[[Any], Any] | None = None


@dataclasses.dataclass
class BenchCase:
    """One benchmarked shape.

    Attributes:
        label: a short readable name (table rows, plots).
        fields: what identifies the case in the JSON records (shape, options).
        arrays: the op's positional arrays; ``options``: its keyword options.
        cost: forward FLOPs (``metric="tflops"``) or bytes moved (``"gbps"``).
        peers: peers timed on the same inputs.
        check: ``check(out) -> (status, max_error)`` against the reference (``None``: no check).
        extra: fields added to every record of the case (e.g. the measured copy bandwidth).
        feedback: ``{argument: output leaf}``: timed as a loop whose calls pass that output on
            as that argument (a cache the op writes, carried as a serving loop donates it;
            :func:`ejkernel.ops.timing.looped`). The implementations only, not the peers.
    """

    label: str
    fields: dict[str, Any]
    arrays: tuple[Any, ...]
    options: dict[str, Any]
    cost: float
    peers: list[Peer] = dataclasses.field(default_factory=list)
    check: Callable[[Any], tuple[str, float]] | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    feedback: dict[int, int] | None = None


class OpBench:
    """An op's benchmark description (subclass it in the op's ``bench.py`` as ``BENCH``).

    ``metric`` is ``"tflops"`` (compute-bound: forward FLOPs, forward+backward counted as
    ``backward_factor + 1`` times that) or ``"gbps"`` (memory-bound: bytes per call). ``peer``
    names the peer the ratios are taken against (its name, or a callable of the device platform),
    or several in order of preference: each case's ratios are against the first with a record of
    that case (cases of one op may have different peers, and a peer may decline a shape).
    ``default_dtype`` is ``--dtype``'s default (an op whose benchmark shape is a 16-bit model's).
    """

    metric: str = "tflops"
    default_dtype: str = "float32"
    backward_factor: float = 2.5
    peer: str | tuple[str, ...] | Callable[[str], str | tuple[str, ...]] | None = None

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The op's command-line options of ``ejkernel bench <op>``."""

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        """The cases the parsed options describe. Raise ``ValueError`` for a bad option value
        (the command line turns it into a usage error)."""
        raise NotImplementedError

    def ratio_peers(self, platform: str) -> tuple[str, ...]:
        """The peers the ratios are taken against on ``platform``, in order of preference."""
        names = self.peer(platform) if callable(self.peer) else self.peer
        return () if names is None else (names,) if isinstance(names, str) else tuple(names)

    def ratio_peer(self, platform: str) -> str | None:
        """The first of :meth:`ratio_peers` (``None``: none)."""
        return next(iter(self.ratio_peers(platform)), None)

    def summary(self, records: list[dict[str, Any]], ns: argparse.Namespace) -> list[str]:
        """Lines the command line prints after the table (comparisons across cases); default none."""
        return []


def _record_base(op: str, impl: str, device: str, dtype: str) -> dict[str, Any]:
    from .. import __version__

    return {
        "op": op,
        "impl": impl,
        "device": device,
        "dtype": dtype,
        "jax": jax.__version__,
        "ejkernel": __version__,
        "time": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "timer": TIMER,
    }


def _timed(
    fn: Callable[..., Any],
    args: Sequence[Any],
    repeats: int,
    progress: Callable[[str], None],
    feedback: dict[int, int] | None = None,
) -> float | None:
    try:
        return device_ms(fn, args, repeats, feedback)
    except Exception as e:
        progress(f"timing failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        return None


def _compile(fn: Callable[..., Any], arrays: Sequence[Any]) -> tuple[float, Any]:
    """Seconds to trace and compile ``jax.jit(fn)`` for ``arrays``, and the compiled program."""
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*arrays).compile()
    return time.perf_counter() - t0, compiled


def _call(function: Callable[..., Any], impl: str, options: dict[str, Any], *arrays: Any) -> Any:
    return function(*arrays, platform=impl, **options)


def accepting(op: str, case: BenchCase, impls: Sequence[str] | None, progress: Callable[[str], None]) -> list[str]:
    """Names of the implementations of ``op`` that accept ``case`` here (declines reported)."""
    args = bind(op, *case.arrays, **case.options)
    dev = device_for_arrays(get_op(op).arrays(args))
    names = []
    for impl in kernel_registry.implementations(op):
        if impls and impl.name not in impls:
            continue
        reason = kernel_registry.check(impl, args, dev)
        if reason is None:
            names.append(impl.name)
        else:
            progress(f"{impl.name}: declines {case.label}: {reason}")
    return names


def run(
    op: str,
    cases: Sequence[BenchCase],
    dtype: str,
    *,
    impls: Sequence[str] | None = None,
    backward: bool = True,
    repeats: int = 10,
    progress: Callable[[str], None] | None = None,
    on_record: Callable[[list[dict[str, Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    """Time every accepting implementation of ``op`` and every peer on each case; one record per
    (case, implementation). ``on_record(records_so_far)`` is called after each record, with the
    ratios against the peers measured so far (the CLI writes its ``--json`` file there, so a run
    cut short by a time limit still leaves its records and their ratios)."""
    report = progress or (lambda msg: None)
    op_cls = op_class(op)
    bench = op_cls.get_bench()
    function = op_cls.function
    device = jax.devices()[0]
    trainable = op_cls.trainable and backward
    records: list[dict[str, Any]] = []
    ratio_peers = bench.ratio_peers(device_for_arrays([]).platform)
    ratio_keys = ("fwd_tflops", "fwdbwd_tflops") if bench.metric == "tflops" else ("gbps",)

    def with_ratios() -> list[dict[str, Any]]:
        if ratio_peers:
            add_ratios(records, ratio_keys, ratio_peers)
        return records

    for case in cases:
        names = accepting(op, case, impls, report)
        candidates: list[tuple[str, Callable[..., Any], tuple[Any, ...], Callable[[Any], Any] | None, Any]] = [
            (name, functools.partial(_call, function, name, case.options), case.arrays, None, case.feedback)
            for name in names
        ]
        if (len(names) > 1 and not impls) or DEFAULT in (impls or ()):
            # What a call that names no implementation gets (the dispatch, as users call the op).
            call = functools.partial(_call, function, None, case.options)
            candidates.append((DEFAULT, call, case.arrays, None, case.feedback))
        candidates += [(p.name, p.fn, p.arrays, p.to_op, None) for p in case.peers]
        for name, fn, arrays, to_op, feedback in candidates:
            report(f"{name}: {case.label}")
            try:
                # What a user's first call waits for (tracing, config selection, XLA's compile),
                # apart from the run.
                with record_dispatches() as dispatched:
                    compile_s, compiled = _compile(fn, arrays)
                out = jax.block_until_ready(compiled(*arrays))
            except Exception as e:
                reason = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"
                report(f"{name}: failed on {case.label}: {reason}")
                # Recorded too: "the peer runs out of memory there" is a result, not a gap.
                rec = _record_base(op, name, device.device_kind, dtype)
                rec.update(label=case.label, check=f"failed: {reason}", **case.fields, **case.extra)
                records.append(rec)
                if on_record is not None:
                    on_record(with_ratios())
                continue
            rec = _record_base(op, name, device.device_kind, dtype)
            rec["compile_s"] = compile_s
            if name == DEFAULT:
                rec["dispatch"] = ",".join(dict.fromkeys(d.impl for d in dispatched if d.op == op))
            rec["label"] = case.label
            rec.update(case.fields)
            rec.update(case.extra)
            ms = _timed(fn, arrays, repeats, report, feedback)

            def per_s(amount: float, t: float | None) -> float | None:
                return amount / (t * 1e-3) / (1e12 if bench.metric == "tflops" else 1e9) if t else None

            if bench.metric == "tflops":
                rec["flops_fwd"] = case.cost
                rec["fwd_ms"], rec["fwd_tflops"] = ms, per_s(case.cost, ms)
                rec["fwdbwd_ms"] = rec["fwdbwd_tflops"] = None
            else:
                rec["bytes"] = case.cost
                rec["ms"], rec["gbps"] = ms, per_s(case.cost, ms)
                peak = case.extra.get("peak_gbps")
                rec["fraction_of_peak"] = rec["gbps"] / peak if (rec["gbps"] and peak) else None
            if trainable and bench.metric == "tflops":
                # An argument may be a dict of arrays (``recurrent_cell``'s weights).
                float_args = tuple(
                    i
                    for i, x in enumerate(arrays)
                    if jax.tree.leaves(x) and all(jnp.issubdtype(v.dtype, jnp.floating) for v in jax.tree.leaves(x))
                )
                # An op returning several arrays (e.g. ``(out, final_state)``) is differentiated
                # through its first one.
                out0 = jax.tree.leaves(out)[0]
                cot = jnp.asarray(np.random.default_rng(1).standard_normal(out0.shape), out0.dtype)
                # The cotangent is an argument, not a closed-over constant: XLA would otherwise
                # constant-fold its layout changes at compile time (seconds per large shape).
                # value_and_grad, not grad: with the loss unused, XLA drops every forward kernel
                # whose output is not a residual (a matmul's), and "forward+backward" would time
                # the backward alone.
                gfn = jax.value_and_grad(
                    lambda *a, fn=fn: jnp.sum(jax.tree.leaves(fn(*a[:-1]))[0].astype(jnp.float32) * a[-1]),
                    argnums=float_args,
                )
                try:
                    rec["compile_fwdbwd_s"] = _compile(gfn, (*arrays, cot))[0]
                except Exception as e:  # the timing below reports it
                    report(f"{name}: forward+backward does not compile: {type(e).__name__}")
                ms_bwd = _timed(gfn, (*arrays, cot), repeats, report)
                rec["fwdbwd_ms"] = ms_bwd
                rec["fwdbwd_tflops"] = per_s((bench.backward_factor + 1) * case.cost, ms_bwd)
            if case.check is not None:
                rec["check"], rec["max_err"] = case.check(out if to_op is None else to_op(out))
            records.append(rec)
            if on_record is not None:
                on_record(with_ratios())
    return with_ratios()


_NOT_SHAPE = {
    "impl",
    "peer",
    "command",
    "dispatch",
    "check",
    "max_err",
    "time",
    "ms",
    "gbps",
    "fraction_of_peak",
    "compile_s",
    "compile_fwdbwd_s",
}


def _shape_key(r: dict[str, Any]) -> tuple[Any, ...]:
    skip = _NOT_SHAPE | {"fwd_ms", "fwd_tflops", "fwdbwd_ms", "fwdbwd_tflops"}
    return tuple((k, json.dumps(v)) for k, v in sorted(r.items()) if k not in skip and not k.startswith("ratio"))


def add_ratios(records: list[dict[str, Any]], keys: Sequence[str], peer_name: str | Sequence[str]) -> None:
    """Each record's ``ratio_<key>`` against the peer's record of the same case (of several peer
    names, the first with a record of that case)."""
    names = [peer_name] if isinstance(peer_name, str) else list(peer_name)
    by_shape: dict[tuple[Any, ...], dict[str, Any]] = {}
    for name in reversed(names):  # a preferred peer's record replaces a later one's
        by_shape.update((_shape_key(r), r) for r in records if r["impl"] == name)
    for r in records:
        p = by_shape.get(_shape_key(r))
        r["peer"] = p["impl"] if p else None
        for key in keys:
            mine, theirs = r.get(key), (p or {}).get(key)
            r[f"ratio_{key}"] = (mine / theirs) if (mine and theirs) else None


def write_json(records: list[dict[str, Any]], path: Path, command: str) -> None:
    """``records`` as a JSON list at ``path``, replaced whole (written beside it, then renamed:
    a reader never sees half a file)."""
    for r in records:
        r.setdefault("command", command)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(records, indent=1, default=_json_default) + "\n")
    tmp.replace(path)


def _json_default(x: Any) -> Any:
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    raise TypeError(f"not JSON serializable: {type(x).__name__}")


def stderr_progress(msg: str) -> None:
    """One line per step on stderr (used when stderr is not a terminal)."""
    print(f"ejkernel bench: {msg}", file=sys.stderr, flush=True)
