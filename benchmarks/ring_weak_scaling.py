"""Weak scaling of ``ejkernel.ring_attention``: fixed tokens per device, 1 → N devices.

With ``n`` devices the sequence is ``n × seq_per_device`` tokens, sharded over a one-axis mesh
``("sp",)`` (zig-zag layout, so causal work is balanced). Attention FLOPs grow with the square of
the sequence, so per-device work grows ``n``-fold: the ideal time at ``n`` devices is ``n`` times
the one-device time, and the weak-scaling efficiency is

    efficiency(n) = (FLOPs(n) / n / time(n)) / (FLOPs(1) / time(1))  =  n · time(1) / time(n),

the per-device throughput relative to one device (1.0 = perfect: communication fully hidden).
FLOPs: forward ``4·b·h·S²·d`` (half when causal), forward + backward 3.5× that (DESIGN.md).

Each run measures the ring on 1 device (the baseline: no communication) and on ``--devices``
devices (and any other ``--scales``), forward and forward + backward, plus plain
``flash_attention`` on one device for the ring's own overhead. ``--out`` gets the records (a JSON
list, like ``ejkernel bench --json``): one per device count, whose ``ratio_*`` is its efficiency,
and plain ``flash_attention``'s.

    python benchmarks/ring_weak_scaling.py --devices 4 --out ring_4.json             # GPUs
    python benchmarks/ring_weak_scaling.py --devices 8 --seq-per-device 256 --cpu   # CPU check
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--devices", type=int, default=None, help="largest device count (default: all visible)")
    p.add_argument("--scales", default=None, help="device counts to measure, e.g. 1,2,4 (default: 1 and --devices)")
    p.add_argument("--seq-per-device", type=int, default=16384, help="tokens per device (default 16384)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=None, help="GQA key/value heads (default: --heads)")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--layout", default="zigzag", choices=["zigzag", "contiguous"])
    p.add_argument("--platform", default="auto", help="inner kernel platform (auto, triton, xla, ...)")
    p.add_argument("--repeats", type=int, default=10, help="timed repeats (median)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--no-flash-baseline", action="store_true", help="skip plain flash_attention on 1 device")
    p.add_argument("--time-budget", type=float, default=None, help="seconds; scales not started by then are skipped")
    p.add_argument("--cpu", action="store_true", help="run on simulated CPU devices (XLA_FLAGS device count)")
    p.add_argument("--out", type=Path, default=None, help="write the JSON results here")
    return p.parse_args(argv)


def setup_cpu(devices: int) -> None:
    """Before JAX is imported: ``devices`` simulated CPU devices."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
    os.environ["XLA_FLAGS"] = " ".join([*flags, f"--xla_force_host_platform_device_count={devices}"])
    os.environ["JAX_PLATFORMS"] = "cpu"


def attention_flops(b: int, h: int, s: int, d: int, causal: bool) -> float:
    fwd = 4.0 * b * h * s * s * d
    return fwd / 2 if causal else fwd


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.cpu:
        setup_cpu(args.devices or 8)

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import ejkernel
    from ejkernel.ops import record_dispatches, time_callable

    available = jax.devices()
    top = args.devices or len(available)
    if top > len(available):
        print(
            f"--devices {top}: only {len(available)} devices are visible ({available[0].device_kind})", file=sys.stderr
        )
        return 2
    scales = sorted({1, top} if args.scales is None else {int(x) for x in args.scales.split(",")})
    if any(n < 1 or n > len(available) for n in scales):
        print(f"--scales {scales}: between 1 and {len(available)} devices", file=sys.stderr)
        return 2
    b, h, d, s_dev = args.batch, args.heads, args.head_dim, args.seq_per_device
    hk = args.kv_heads or h
    dtype = jnp.dtype(args.dtype)
    spec = P(None, "sp", None, None)
    start = time.perf_counter()
    config = {
        "seq_per_device": s_dev,
        "batch": b,
        "heads": h,
        "kv_heads": hk,
        "head_dim": d,
        "dtype": args.dtype,
        "causal": args.causal,
        "layout": args.layout,
        "platform": args.platform,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "scales": scales,
    }
    env = {
        "device_kind": available[0].device_kind,
        "backend": jax.default_backend(),
        "devices_visible": len(available),
        "jax": jax.__version__,
        "ejkernel": ejkernel.__version__,
        "python": platform.python_version(),
        "cpu_simulated": bool(args.cpu),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }
    report = _report_factory(env, config, start)
    write = _writer(args.out, "python " + shlex.join(sys.argv))

    def sharded_normal(key: Any, shape: tuple[int, ...], mesh: Any) -> Any:
        make = jax.jit(
            lambda k: jax.random.normal(k, shape, jnp.float32).astype(dtype),
            out_shardings=NamedSharding(mesh, spec),
        )
        return make(key)

    def measure(fn: Any, inputs: tuple[Any, ...], dout: Any) -> dict[str, Any]:
        """Compile and time the forward and the forward + backward of ``fn``."""
        fwd = jax.jit(fn)
        t0 = time.perf_counter()
        fwd_c = fwd.lower(*inputs).compile()
        compile_fwd = time.perf_counter() - t0

        def fwdbwd(q: Any, k: Any, v: Any, do: Any) -> Any:
            _, vjp = jax.vjp(fn, q, k, v)
            return vjp(do)

        t0 = time.perf_counter()
        bwd_c = jax.jit(fwdbwd).lower(*inputs, dout).compile()
        compile_bwd = time.perf_counter() - t0
        fwd_ms = time_callable(lambda: fwd_c(*inputs), args.repeats, warmup=args.warmup)
        fwdbwd_ms = time_callable(lambda: bwd_c(*inputs, dout), args.repeats, warmup=args.warmup)
        mem = bwd_c.memory_analysis()
        return {
            "fwd_ms": fwd_ms,
            "fwdbwd_ms": fwdbwd_ms,
            "compile_s": round(compile_fwd + compile_bwd, 2),
            "fwdbwd_temp_bytes_per_device": None if mem is None else int(mem.temp_size_in_bytes),
        }

    results: list[dict[str, Any]] = []
    skipped: list[int] = []
    flash_baseline = None
    # The largest scale first: if time runs out, the multi-device figure is there.
    for n in sorted(scales, reverse=True):
        if args.time_budget is not None and results and time.perf_counter() - start > args.time_budget:
            skipped.append(n)
            continue
        mesh = Mesh(np.array(available[:n]), ("sp",))
        s = n * s_dev
        keys = jax.random.split(jax.random.key(0), 4)
        q = sharded_normal(keys[0], (b, s, h, d), mesh)
        k = sharded_normal(keys[1], (b, s, hk, d), mesh)
        v = sharded_normal(keys[2], (b, s, hk, d), mesh)
        do = sharded_normal(keys[3], (b, s, h, d), mesh)

        def ring(q: Any, k: Any, v: Any, mesh: Any = mesh) -> Any:
            return ejkernel.ring_attention(
                q,
                k,
                v,
                axis_name="sp",
                causal=args.causal,
                layout=args.layout,
                platform=args.platform,
                mesh=mesh,
                in_specs=(spec, spec, spec),
            )

        with record_dispatches() as log:
            jax.eval_shape(ring, q, k, v)
        row: dict[str, Any] = {
            "devices": n,
            "seq_total": s,
            "impl": f"ring_attention/{log[0].impl}" if log else None,
            "config": log[0].config.tuning_fields() if log else None,
        }
        row.update(measure(ring, (q, k, v), do))
        flops = attention_flops(b, h, s, d, args.causal)
        row["tflops_per_device_fwd"] = flops / n / (row["fwd_ms"] * 1e-3) / 1e12
        row["tflops_per_device_fwdbwd"] = 3.5 * flops / n / (row["fwdbwd_ms"] * 1e-3) / 1e12
        results.append(row)
        print(
            f"n={n} seq={s} ({row['impl']}): fwd {row['fwd_ms']:.3f} ms "
            f"({row['tflops_per_device_fwd']:.3g} TFLOP/s/device), fwd+bwd {row['fwdbwd_ms']:.3f} ms "
            f"({row['tflops_per_device_fwdbwd']:.3g} TFLOP/s/device), compile {row['compile_s']} s",
            flush=True,
        )
        write(report(results, flash_baseline, skipped))
        if n == 1 and not args.no_flash_baseline:

            def flash(q: Any, k: Any, v: Any) -> Any:
                return ejkernel.flash_attention(q, k, v, causal=args.causal, platform=args.platform)

            with record_dispatches() as log:
                jax.eval_shape(flash, q, k, v)
            flash_baseline = {
                "impl": f"flash_attention/{log[0].impl}" if log else None,
                **measure(flash, (q, k, v), do),
            }
            print(f"     flash_attention on 1 device: fwd {flash_baseline['fwd_ms']:.3f} ms, "
                  f"fwd+bwd {flash_baseline['fwdbwd_ms']:.3f} ms", flush=True)  # fmt: skip
            write(report(results, flash_baseline, skipped))

    final = report(results, flash_baseline, skipped)
    print(f"{'devices':>7} {'seq':>8} {'fwd ms':>10} {'eff':>6} {'fwd+bwd ms':>11} {'eff':>6}")
    for r in final["results"]:
        eff_f = "-" if r["efficiency_fwd"] is None else f"{r['efficiency_fwd']:.2f}"
        eff_b = "-" if r["efficiency_fwdbwd"] is None else f"{r['efficiency_fwdbwd']:.2f}"
        print(
            f"{r['devices']:>7} {r['seq_total']:>8} {r['fwd_ms']:>10.3f} {eff_f:>6} {r['fwdbwd_ms']:>11.3f} {eff_b:>6}"
        )
    if skipped:
        print(f"skipped (time budget {args.time_budget} s): {skipped}")
    write(final)
    if args.out is not None:
        print(f"wrote {args.out}")
    return 0


def _report_factory(env: dict[str, Any], config: dict[str, Any], start: float) -> Any:
    def report(results: list[dict[str, Any]], flash_baseline: Any, skipped: list[int]) -> dict[str, Any]:
        rows = sorted((dict(r) for r in results), key=lambda r: r["devices"])
        one = next((r for r in rows if r["devices"] == 1), None)
        for r in rows:
            for mode in ("fwd", "fwdbwd"):
                r[f"efficiency_{mode}"] = None if one is None else r["devices"] * one[f"{mode}_ms"] / r[f"{mode}_ms"]
        return {
            "benchmark": "ring_attention weak scaling",
            "efficiency": "n · time(1 device) / time(n devices): per-device throughput relative to one device",
            "config": config,
            "environment": env,
            "results": rows,
            "flash_attention_1_device": flash_baseline,
            "skipped_scales_time_budget": skipped,
            "seconds": round(time.perf_counter() - start, 1),
        }

    return report


def as_records(report: dict[str, Any], command: str) -> list[dict[str, Any]]:
    """The records of a weak-scaling report: one per device count (its ``ratio_*``: the
    efficiency against one device) and plain ``flash_attention`` on one device."""
    cfg, env = report["config"], report["environment"]
    b, h, hk, d, causal = cfg["batch"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["causal"]
    shape = f"b{b} h{h}/{hk} d{d} {cfg['seq_per_device']} tokens/device{' causal' if causal else ''}"
    base = {
        "op": "ring_attention",
        "device": env["device_kind"],
        "dtype": cfg["dtype"],
        "jax": env["jax"],
        "ejkernel": env["ejkernel"],
        "timer": "host: median of synchronized calls",
        "command": command,
    }
    fields = {"b": b, "h": h, "hk": hk, "d": d, "causal": causal, "layout": cfg["layout"]}
    out = []
    for r in report["results"]:
        out.append({
            **base, "impl": r["impl"], "label": f"{r['devices']} devices, {shape}", **fields,
            "devices": r["devices"], "seq_total": r["seq_total"], "config": r["config"],
            "fwd_ms": r["fwd_ms"], "fwd_tflops": r["tflops_per_device_fwd"],
            "fwdbwd_ms": r["fwdbwd_ms"], "fwdbwd_tflops": r["tflops_per_device_fwdbwd"],
            "peer": "1 device", "ratio_fwd_tflops": r["efficiency_fwd"], "ratio_fwdbwd_tflops": r["efficiency_fwdbwd"],
        })  # fmt: skip
    flash = report.get("flash_attention_1_device")
    if flash:
        flops = attention_flops(b, h, cfg["seq_per_device"], d, causal)
        out.append({
            **base, "impl": flash["impl"], "label": f"1 device, {shape}", **fields, "devices": 1,
            "seq_total": cfg["seq_per_device"], "fwd_ms": flash["fwd_ms"],
            "fwd_tflops": flops / (flash["fwd_ms"] * 1e-3) / 1e12, "fwdbwd_ms": flash["fwdbwd_ms"],
            "fwdbwd_tflops": 3.5 * flops / (flash["fwdbwd_ms"] * 1e-3) / 1e12,
        })  # fmt: skip
    return out


def _writer(path: Path | None, command: str) -> Any:
    def write(data: dict[str, Any]) -> None:
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(as_records(data, command), indent=1) + "\n")
        tmp.replace(path)

    return write


if __name__ == "__main__":
    sys.exit(main())
