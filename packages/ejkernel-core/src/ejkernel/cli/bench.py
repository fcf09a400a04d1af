"""``ejkernel bench``: time every implementation that runs here against JAX's own attention.

For each shape, every registered implementation of the op that accepts the call is timed
(forward, and forward+backward for trainable ops) on the same random inputs, next to the peers
``jax.nn.dot_product_attention(implementation="xla")`` and, on GPU, ``"cudnn"``; each output is
checked against the float32 reference. Timing: compile, warm up, then the median of repeats with
``block_until_ready`` (``ejkernel.ops.time_callable``).

FLOPs (DESIGN.md): forward ``4·b·h·sq·sk·d`` (``2·b·h·sq·sk·(d + dv)`` when ``dv != d``), half when
causal; backward 2.5× forward. Paged decode is memory-bound: bytes = K/V pages actually read +
query + output, reported as GB/s next to ``peak_gbps``, a device-to-device copy measured in the
same run.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import EjkernelError
from ..ops.autotune import time_callable
from ..ops.device import device_for_arrays
from ..ops.registry import kernel_registry
from ..testing import conformance as C
from ..testing.references import attention_reference, page_attention_reference

__all__ = ["AttentionShape", "PageShape", "bench_attention", "bench_page_attention", "measure_copy_gbps"]


@dataclasses.dataclass(frozen=True)
class AttentionShape:
    b: int
    sq: int
    sk: int
    h: int
    hk: int
    d: int
    dv: int
    causal: bool = False
    window: tuple[int, int] | None = None
    varlen: int = 0  # > 0: that many sequences of random lengths packed in b*sq tokens

    def label(self) -> str:
        s = f"b{self.b} sq{self.sq} sk{self.sk} h{self.h}/{self.hk} d{self.d}"
        if self.dv != self.d:
            s += f" dv{self.dv}"
        if self.causal:
            s += " causal"
        if self.window:
            s += f" win{self.window[0]},{self.window[1]}"
        if self.varlen:
            s += f" varlen{self.varlen}"
        return s


@dataclasses.dataclass(frozen=True)
class PageShape:
    b: int
    h: int
    hk: int
    d: int
    context: int
    block_size: int

    def label(self) -> str:
        return f"b{self.b} h{self.h}/{self.hk} d{self.d} ctx{self.context} bs{self.block_size}"

    def inputs(self, dtype: Any, seed: int = 0) -> tuple[tuple[Any, ...], int]:
        """Random ``(query, key_cache, value_cache, context_lens, block_tables)`` with every
        sequence at full ``context`` on randomly permuted pages, and the bytes a decode moves
        (K and V rows read, query read, output written)."""
        rng = np.random.default_rng(seed)
        dt = jnp.dtype(dtype)
        pages = -(-self.context // self.block_size)
        num_blocks = self.b * pages
        kc = jnp.asarray(rng.standard_normal((num_blocks, self.block_size, self.hk, self.d)), dt)
        vc = jnp.asarray(rng.standard_normal((num_blocks, self.block_size, self.hk, self.d)), dt)
        q = jnp.asarray(rng.standard_normal((self.b, self.h, self.d)), dt)
        tables = jnp.asarray(rng.permutation(num_blocks).reshape(self.b, pages), jnp.int32)
        lens = jnp.full((self.b,), self.context, jnp.int32)
        nbytes = 2 * self.b * self.context * self.hk * self.d * dt.itemsize + 2 * q.nbytes
        return (q, kc, vc, lens, tables), nbytes


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


def _varlen_lengths(total: int, n: int, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(1, total), size=n - 1, replace=False))
    return list(np.diff(np.concatenate([[0], cuts, [total]])).astype(int))


def _attention_flops(shape: AttentionShape, lengths: list[int] | None) -> float:
    pairs = sum(n * n for n in lengths) if lengths else shape.b * shape.sq * shape.sk
    flops = 2.0 * pairs * shape.h * (shape.d + shape.dv)
    return flops / 2 if shape.causal else flops


def _peer_fn(shape: AttentionShape, implementation: str, lengths: list[int] | None) -> Callable[..., Any]:
    def fn(q, k, v):
        kwargs: dict[str, Any] = {"is_causal": shape.causal, "implementation": implementation}
        if shape.window is not None:
            kwargs["local_window_size"] = shape.window
        if lengths is not None:
            seq = jnp.asarray(lengths, jnp.int32)
            kwargs["query_seq_lengths"] = seq
            kwargs["key_value_seq_lengths"] = seq
        return jax.nn.dot_product_attention(q, k, v, **kwargs)

    return fn


def _check(out: Any, ref32: Any, ref_low: Any, dtype: str) -> tuple[str, float]:
    try:
        C.assert_close("bench", out, ref32, ref_low, dtype, C.ATOL)
    except AssertionError as e:
        return f"FAIL ({str(e).split(': ', 2)[-1][:60]})", float(jnp.max(jnp.abs(out.astype(jnp.float32) - ref32)))
    return "ok", float(jnp.max(jnp.abs(out.astype(jnp.float32) - ref32)))


# Device time per call. A timed program runs the function n times inside one ``lax.fori_loop``
# (the first input nudged by the step, the outputs summed, so no call can be skipped or hoisted):
# this times the device, not the host, whose per-call dispatch was measured at ~0.6 ms on a
# virtualized GPU host and would swamp sub-millisecond kernels. A program still costs a fixed
# overhead (launch, argument copies, the host's wait: ~0.75 ms per program there, against 10 back
# to back 0.25 ms decode kernels in its profile), so the time per call is the slope between two
# loop lengths, (T(n) - T(LOOP)) / (n - LOOP), with n chosen so that the longer program runs about
# SLOPE_PROGRAM_MS: the fixed cost cancels, what remains is the calls and the loop's own glue.
LOOP = 10
SLOPE_PROGRAM_MS = 40.0
MAX_LOOP = 400
TIMER = f"device: slope between fori_loop programs of {LOOP} and n calls (n <= {MAX_LOOP}, ~{SLOPE_PROGRAM_MS:g} ms)"


def _looped(fn: Callable[..., Any], loop: int = LOOP) -> Callable[..., Any]:
    """``jit`` of ``loop`` data-dependent calls of ``fn(x, *rest)`` inside one program."""

    def run(x, *rest):
        def body(i, acc):
            nudged = x + (i.astype(jnp.float32) * 1e-6).astype(x.dtype)
            leaves = jax.tree.leaves(fn(nudged, *rest))
            return acc + sum(jnp.sum(leaf.astype(jnp.float32)) for leaf in leaves)

        return lax.fori_loop(0, loop, body, jnp.zeros((), jnp.float32))

    return jax.jit(run)


def _timed(fn: Callable[..., Any], args: Sequence[Any], repeats: int) -> float | None:
    """Device milliseconds per call of ``fn(*args)`` (see :data:`LOOP`)."""
    try:
        short = _looped(fn, LOOP)
        t_short = time_callable(lambda: short(*args), repeats)
        n = int(min(MAX_LOOP, max(2 * LOOP, SLOPE_PROGRAM_MS * LOOP / max(t_short, 1e-6))))
        long = _looped(fn, n)
        t_long = time_callable(lambda: long(*args), repeats)
    except Exception as e:
        print(f"  timing failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}", file=sys.stderr)
        return None
    slope = (t_long - t_short) / (n - LOOP)
    # Noise can only make the slope meaningless when the fixed cost dwarfs n calls; then the
    # long program's average (an upper bound) is the better figure.
    return slope if slope > 0.5 * t_long / n else t_long / n


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


def bench_attention(
    op: str,
    shapes: Sequence[AttentionShape],
    dtype: str,
    *,
    impls: Sequence[str] | None = None,
    peers: bool = True,
    backward: bool = True,
    check: bool = True,
    repeats: int = 10,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Benchmark a dense attention op on ``shapes``; returns one record per implementation and shape."""
    import ejkernel

    op_fn = getattr(ejkernel, op)
    device = jax.devices()[0]
    on_gpu = device_for_arrays([]).platform == "gpu"
    records: list[dict[str, Any]] = []
    for shape in shapes:
        rng = np.random.default_rng(0)
        lengths = _varlen_lengths(shape.b * shape.sq, shape.varlen) if shape.varlen else None
        b_in = 1 if lengths else shape.b
        sq_in = shape.b * shape.sq if lengths else shape.sq
        sk_in = shape.b * shape.sk if lengths else shape.sk
        jdt = jnp.dtype(dtype)
        q = jnp.asarray(rng.standard_normal((b_in, sq_in, shape.h, shape.d)), jdt)
        k = jnp.asarray(rng.standard_normal((b_in, sk_in, shape.hk, shape.d)), jdt)
        v = jnp.asarray(rng.standard_normal((b_in, sk_in, shape.hk, shape.dv)), jdt)
        opts: dict[str, Any] = {"causal": shape.causal, "sliding_window": shape.window}
        if lengths:
            opts["cum_seqlens_q"] = jnp.asarray(np.cumsum([0, *lengths]), jnp.int32)
        cot = jnp.asarray(rng.standard_normal((*q.shape[:3], shape.dv)), jdt)
        flops = _attention_flops(shape, lengths)

        args = C.bind(op, query=q, key=k, value=v, **opts)
        candidates: list[tuple[str, Callable[..., Any], Any]] = [
            (name, functools.partial(_call_op, op_fn, name, opts), None)
            for name in _accepting(op, args, q, impls, progress, shape.label())
        ]
        if peers:
            peer_names = (["cudnn"] if on_gpu else []) + ["xla"]
            for name in peer_names:
                candidates.append((f"jax.nn[{name}]", _peer_fn(shape, name, lengths), lengths))

        # The checks compare one batch element and one head group against the reference.
        ref32 = ref_low = None
        if check:
            g = shape.h // shape.hk
            sl = (slice(0, 1), slice(None), slice(0, g))
            kv_sl = (slice(0, 1), slice(None), slice(0, 1))
            ref_kw = dict(opts)
            ref32 = attention_reference(q[sl], k[kv_sl], v[kv_sl], **ref_kw)
            ref_low = attention_reference(
                q[sl], k[kv_sl], v[kv_sl], **ref_kw, dtype=jdt, precision=C.LOW_PRECISION
            ).astype(jdt)

        for name, fn, peer_lengths in candidates:
            if progress:
                progress(f"{name}: {shape.label()}")
            qq, kk, vv = q, k, v
            if peer_lengths is not None:  # peers take a padded batch, not a packed row
                qq, kk, vv = (_pad_batch(x, peer_lengths) for x in (q, k, v))
            try:
                fwd = jax.jit(fn)
                out = jax.block_until_ready(fwd(qq, kk, vv))
            except Exception as e:
                if progress:
                    progress(f"{name}: failed on {shape.label()}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
                continue
            rec = _record_base(op, name, device.device_kind, dtype)
            rec.update(dataclasses.asdict(shape))
            rec["window"] = list(shape.window) if shape.window else None
            rec["flops_fwd"] = flops
            fwd_ms = _timed(fn, (qq, kk, vv), repeats)
            rec["fwd_ms"] = fwd_ms
            rec["fwd_tflops"] = flops / (fwd_ms * 1e-3) / 1e12 if fwd_ms else None
            rec["fwdbwd_ms"] = rec["fwdbwd_tflops"] = None
            if backward:
                cc = cot if peer_lengths is None else _pad_batch(cot, peer_lengths)
                # The cotangent is an argument, not a closed-over constant: XLA would otherwise
                # constant-fold its layout changes at compile time (seconds per large shape).
                gfn = jax.grad(lambda a, b, c, ct, fn=fn: jnp.sum(fn(a, b, c) * ct), argnums=(0, 1, 2))
                ms = _timed(gfn, (qq, kk, vv, cc), repeats)
                rec["fwdbwd_ms"] = ms
                rec["fwdbwd_tflops"] = 3.5 * flops / (ms * 1e-3) / 1e12 if ms else None
            if check and ref32 is not None:
                o = out if peer_lengths is None else _unpad_batch(out, peer_lengths)
                g = shape.h // shape.hk
                rec["check"], rec["max_err"] = _check(o[:1, :, :g], ref32, ref_low, dtype)
            records.append(rec)
    _add_ratios(records, ("fwd_tflops", "fwdbwd_tflops"), "cudnn" if on_gpu else "xla")
    return records


def _accepting(
    op: str, args: Any, array: Any, impls: Sequence[str] | None, progress: Callable[[str], None] | None, label: str
) -> list[str]:
    """Names of the implementations of ``op`` that accept ``args`` here (declines reported)."""
    dev = device_for_arrays([array])
    names = []
    for impl in kernel_registry.implementations(op):
        if impls and impl.name not in impls:
            continue
        reason = kernel_registry.check(impl, args, dev)
        if reason is None:
            names.append(impl.name)
        elif progress:
            progress(f"{impl.name}: declines {label}: {reason}")
    return names


def _call_op(op_fn: Callable[..., Any], impl: str, opts: dict[str, Any], *arrays: Any) -> Any:
    return op_fn(*arrays, platform=impl, **opts)


def _dense_decode(implementation: str, q: Any, k: Any, v: Any) -> Any:
    return jax.nn.dot_product_attention(q[:, None], k, v, implementation=implementation)[:, 0]


def _pad_batch(x: Any, lengths: list[int]) -> Any:
    """Packed ``[1, total, ...]`` → padded ``[n, max_len, ...]``."""
    n, m = len(lengths), max(lengths)
    out = jnp.zeros((n, m, *x.shape[2:]), x.dtype)
    start = 0
    for i, ln in enumerate(lengths):
        out = out.at[i, :ln].set(x[0, start : start + ln])
        start += ln
    return out


def _unpad_batch(x: Any, lengths: list[int]) -> Any:
    return jnp.concatenate([x[i, :ln] for i, ln in enumerate(lengths)], axis=0)[None]


def _add_ratios(records: list[dict[str, Any]], keys: Sequence[str], peer: str) -> None:
    peer_name = f"jax.nn[{peer}]"
    by_shape: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in records:
        if r["impl"] == peer_name:
            by_shape[_shape_key(r)] = r
    for r in records:
        p = by_shape.get(_shape_key(r))
        r["peer"] = peer_name if p else None
        for key in keys:
            mine, theirs = r.get(key), (p or {}).get(key)
            r[f"ratio_{key}"] = (mine / theirs) if (mine and theirs) else None


def _shape_key(r: dict[str, Any]) -> tuple[Any, ...]:
    skip = {"impl", "fwd_ms", "fwd_tflops", "fwdbwd_ms", "fwdbwd_tflops", "check", "max_err", "time", "ms", "gbps"}
    return tuple((k, json.dumps(v)) for k, v in sorted(r.items()) if k not in skip and not k.startswith("ratio"))


def bench_page_attention(
    shapes: Sequence[PageShape],
    dtype: str,
    *,
    impls: Sequence[str] | None = None,
    peers: bool = True,
    check: bool = True,
    repeats: int = 10,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Benchmark ``page_attention`` (every sequence at full ``context``) in GB/s."""
    import ejkernel

    device = jax.devices()[0]
    on_gpu = device_for_arrays([]).platform == "gpu"
    records: list[dict[str, Any]] = []
    jdt = jnp.dtype(dtype)
    peak = None
    for shape in shapes:
        (q, kc, vc, lens, tables), nbytes = shape.inputs(jdt)
        if peak is None:
            peak = measure_copy_gbps(min(2 * kc.nbytes, 2**31), repeats)

        args = C.bind("page_attention", query=q, key_cache=kc, value_cache=vc, context_lens=lens, block_tables=tables)
        candidates: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = []
        for name in _accepting("page_attention", args, q, impls, progress, shape.label()):
            f = functools.partial(_call_op, ejkernel.page_attention, name, {})
            candidates.append((name, f, (q, kc, vc, lens, tables)))
        if peers:
            # The peers attend the same cache gathered to a dense [b, context, hk, d] layout
            # (the gather is outside the timed region for "dense decode").
            kd = kc[tables].reshape(shape.b, -1, shape.hk, shape.d)[:, : shape.context]
            vd = vc[tables].reshape(shape.b, -1, shape.hk, shape.d)[:, : shape.context]
            for name in (["cudnn"] if on_gpu else []) + ["xla"]:
                f = functools.partial(_dense_decode, name)
                candidates.append((f"jax.nn[{name}] dense decode", f, (q, kd, vd)))
        ref32 = ref_low = None
        if check:
            sl = slice(0, min(shape.b, 4))
            ref32 = page_attention_reference(q[sl], kc, vc, lens[sl], tables[sl])
            ref_low = page_attention_reference(
                q[sl], kc, vc, lens[sl], tables[sl], dtype=jdt, precision=C.LOW_PRECISION
            ).astype(jdt)
        for name, fn, fn_args in candidates:
            if progress:
                progress(f"{name}: {shape.label()}")
            try:
                out = jax.block_until_ready(jax.jit(fn)(*fn_args))
            except Exception as e:
                if progress:
                    progress(f"{name}: failed on {shape.label()}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
                continue
            rec = _record_base("page_attention", name, device.device_kind, dtype)
            rec.update(dataclasses.asdict(shape))
            ms = _timed(fn, fn_args, repeats)
            rec["ms"] = ms
            rec["bytes"] = nbytes
            rec["gbps"] = nbytes / (ms * 1e-3) / 1e9 if ms else None
            rec["peak_gbps"] = peak
            rec["fraction_of_peak"] = rec["gbps"] / peak if (rec["gbps"] and peak) else None
            if check and ref32 is not None:
                rec["check"], rec["max_err"] = _check(out[: ref32.shape[0]], ref32, ref_low, dtype)
            records.append(rec)
    return records


def parse_attention_shape(text: str, causal: bool, window: tuple[int, int] | None, varlen: int) -> AttentionShape:
    """``B,SQ,H,D`` or ``B,SQ,SK,H,HK,D`` (or ``...,DV``)."""
    try:
        nums = [int(x) for x in text.replace("x", ",").split(",") if x.strip()]
    except ValueError:
        raise EjkernelError(f"bad --shape {text!r}: expected B,SQ,H,D or B,SQ,SK,H,HK,D[,DV]") from None
    if len(nums) == 4:
        b, sq, h, d = nums
        sk, hk, dv = sq, h, d
    elif len(nums) in (6, 7):
        b, sq, sk, h, hk, d = nums[:6]
        dv = nums[6] if len(nums) == 7 else d
    else:
        raise EjkernelError(f"bad --shape {text!r}: expected B,SQ,H,D or B,SQ,SK,H,HK,D[,DV]")
    return AttentionShape(b=b, sq=sq, sk=sk, h=h, hk=hk, d=d, dv=dv, causal=causal, window=window, varlen=varlen)


def write_json(records: list[dict[str, Any]], path: Path, command: str) -> None:
    for r in records:
        r.setdefault("command", command)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records, indent=1, default=_json_default) + "\n")


def _json_default(x: Any) -> Any:
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    raise TypeError(f"not JSON serializable: {type(x).__name__}")


def plot(records: list[dict[str, Any]], path: Path, metric: str) -> None:
    """A grouped bar chart of ``metric`` per shape and implementation (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise EjkernelError("--plot needs matplotlib: pip install 'ejkernel-core[plot]'") from e
    labels = []
    for r in records:
        lab = _label(r)
        if lab not in labels:
            labels.append(lab)
    impls = []
    for r in records:
        if r["impl"] not in impls:
            impls.append(r["impl"])
    width = 0.8 / max(1, len(impls))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(labels) * max(1, len(impls)) / 2), 4.5))
    for i, impl in enumerate(impls):
        vals = []
        for lab in labels:
            match = [r for r in records if r["impl"] == impl and _label(r) == lab]
            vals.append((match[0].get(metric) or 0.0) if match else 0.0)
        ax.bar(np.arange(len(labels)) + i * width, vals, width, label=impl)
    ax.set_xticks(np.arange(len(labels)) + width * (len(impls) - 1) / 2)
    ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(metric)
    dev = records[0]["device"] if records else ""
    ax.set_title(f"{records[0]['op'] if records else ''} on {dev} ({records[0]['dtype'] if records else ''})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _label(r: dict[str, Any]) -> str:
    if r["op"] == "page_attention":
        return f"b{r['b']} ctx{r['context']}"
    s = f"b{r['b']} s{r['sq']} h{r['h']}/{r['hk']} d{r['d']}"
    if r.get("causal"):
        s += " c"
    if r.get("varlen"):
        s += f" vl{r['varlen']}"
    return s


def fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        return f"{x:.{digits}f}"
    return str(x)
