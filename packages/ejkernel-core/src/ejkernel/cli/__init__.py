"""The ``ejkernel`` command (also ``python -m ejkernel``).

ejkernel info                       installed backends and their status, devices, cache
ejkernel bench flash_attention ...  time every implementation that runs here vs jax.nn
ejkernel cache list | clear | path  the persistent config cache
ejkernel demo                       a tour of the API on the best available backend
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

__all__ = ["main"]

_DENSE_OPS = ("flash_attention", "scaled_dot_product_attention")


def _console() -> Any:
    from rich.console import Console

    # Wide tables stay readable when the output is a log file rather than a terminal.
    return Console() if sys.stdout.isatty() else Console(width=160)


def _cmd_info(args: argparse.Namespace) -> int:
    import jax
    from rich.table import Table

    import ejkernel
    from ejkernel.ops import PersistentCache, current_policy, device_fingerprint

    console = _console()
    console.print(
        f"[bold]ejkernel[/bold] {ejkernel.__version__}  (jax {jax.__version__}, python {sys.version.split()[0]})"
    )
    devices = jax.devices()
    console.print(f"devices: {len(devices)} x {devices[0].device_kind} ({jax.default_backend()})")
    console.print(f"device fingerprint: {device_fingerprint()}")
    table = Table(title="backends (entry point group ejkernel.backends)")
    for col in ("name", "distribution", "status", "implementations / error"):
        table.add_column(col)
    for b in ejkernel.backends():
        style = {"loaded": "green", "failed": "red", "disabled": "yellow"}.get(b.status, "")
        detail = b.error if b.status == "failed" else ", ".join(b.implementations)
        table.add_row(
            b.name, f"{b.distribution or '?'} {b.version or ''}", f"[{style}]{b.status}[/{style}]", detail or "-"
        )
    console.print(table)
    if not ejkernel.backends():
        console.print("[yellow]no backend installed: pip install 'ejkernel-core[xla]'[/yellow]")
    ops = Table(title="implementations by priority (those that target another device decline here)")
    for col in ("op", "implementation", "platform", "backend", "priority", "plugin"):
        ops.add_column(col)
    for impl in ejkernel.kernel_registry.implementations():
        ops.add_row(impl.algorithm, impl.name, impl.platform.value, impl.backend.value, str(impl.priority), impl.plugin)
    console.print(ops)
    pol = current_policy()
    cache = PersistentCache()
    console.print(f"config cache: {cache.path} ({len(cache)} entries)")
    console.print(
        f"policy: autotune={pol.autotune} mode={pol.autotune_mode} on_cache_miss={pol.on_cache_miss} "
        f"persistent_cache={pol.persistent_cache} backends_allow={sorted(pol.backends_allow) if pol.backends_allow else 'all'} "
        f"backends_deny={sorted(pol.backends_deny) or '-'}"
    )
    return 0


def _cmd_cache(args: argparse.Namespace) -> int:
    import json

    from rich.table import Table

    from ejkernel.ops import PersistentCache

    cache = PersistentCache()
    console = _console()
    if args.action == "path":
        print(cache.path)
        return 0
    if args.action == "clear":
        n = len(cache)
        if not cache.clear():
            console.print(f"[red]could not clear {cache.path}[/red]")
            return 1
        console.print(f"cleared {n} entries from {cache.path}")
        return 0
    items = cache.items()
    if args.json:
        print(json.dumps(dict(items), indent=1))
        return 0
    table = Table(title=f"{cache.path} ({len(items)} entries)")
    for col in ("op", "impl", "config", "ms", "device / arguments"):
        table.add_column(col, overflow="fold")
    for key, rec in items:
        parts = key.split("::")
        table.add_row(
            str(rec.get("op", "?")),
            str(rec.get("impl", "?")),
            json.dumps(rec.get("config", {}), separators=(",", ":")),
            f"{rec['time_ms']:.3f}" if isinstance(rec.get("time_ms"), (int, float)) else "-",
            f"{parts[0]}\n{parts[-1]}" if len(parts) >= 4 else key,
        )
    console.print(table)
    return 0


def _parse_window(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    parts = [int(x) for x in text.split(",")]
    return (parts[0], parts[0]) if len(parts) == 1 else (parts[0], parts[1])


def _cmd_bench(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.progress import Progress
    from rich.table import Table

    from ejkernel.errors import EjkernelError

    from . import bench as B

    console = _console()
    command = "ejkernel " + " ".join(shlex.quote(a) for a in args.argv)
    causal_values = {"no": [False], "yes": [True], "both": [False, True]}[args.causal]
    try:
        with Progress(transient=True, console=console, disable=not sys.stderr.isatty()) as progress:
            task = progress.add_task("bench", total=None)

            def report(msg: str) -> None:
                progress.update(task, description=escape(msg))
                if msg.split(": ", 1)[-1].startswith(("declines", "failed")):
                    console.print(f"[yellow]{escape(msg)}[/yellow]")

            if args.op == "page_attention":
                shapes_p = [
                    B.PageShape(
                        b=args.b, h=args.h, hk=args.hk or args.h, d=args.d, context=c, block_size=args.block_size
                    )
                    for c in (args.context or [1024])
                ]
                records = B.bench_page_attention(
                    shapes_p,
                    args.dtype,
                    impls=args.impl,
                    peers=not args.no_peers,
                    check=not args.no_check,
                    repeats=args.repeats,
                    progress=report,
                )
            else:
                window = _parse_window(args.window)
                shape_texts = args.shape or [
                    f"{args.b},{args.sq},{args.sk or args.sq},{args.h},{args.hk or args.h},{args.d},{args.dv or args.d}"
                ]
                shapes = [
                    B.parse_attention_shape(t, c, window, args.varlen) for t in shape_texts for c in causal_values
                ]
                records = B.bench_attention(
                    args.op,
                    shapes,
                    args.dtype,
                    impls=args.impl,
                    peers=not args.no_peers,
                    backward=not args.fwd_only,
                    check=not args.no_check,
                    repeats=args.repeats,
                    progress=report,
                )
    except EjkernelError as e:
        console.print(f"[red]{e}[/red]")
        return 2

    if args.op == "page_attention":
        table = Table(title=f"page_attention ({args.dtype}) on {records[0]['device'] if records else '?'}")
        for col in ("shape", "impl", "ms", "GB/s", "peak GB/s", "of peak", "check"):
            table.add_column(col)
        for r in records:
            table.add_row(
                f"b{r['b']} h{r['h']}/{r['hk']} d{r['d']} ctx{r['context']} bs{r['block_size']}",
                escape(r["impl"]),
                B.fmt(r["ms"], 3),
                B.fmt(r["gbps"], 1),
                B.fmt(r["peak_gbps"], 1),
                B.fmt(r["fraction_of_peak"] and 100 * r["fraction_of_peak"], 1) + "%",
                escape(r.get("check", "-")),
            )
    else:
        peer = records[0].get("peer") if records else None
        table = Table(title=f"{args.op} ({args.dtype}) on {records[0]['device'] if records else '?'}; ratio vs {peer}")
        for col in (
            "shape",
            "impl",
            "fwd ms",
            "fwd TFLOP/s",
            "x peer",
            "fwd+bwd ms",
            "fwd+bwd TFLOP/s",
            "x peer",
            "check",
        ):
            table.add_column(col)
        for r in records:
            shape = B.AttentionShape(
                **{k: r[k] for k in ("b", "sq", "sk", "h", "hk", "d", "dv", "causal", "varlen")},
                window=tuple(r["window"]) if r["window"] else None,
            )
            table.add_row(
                shape.label(),
                escape(r["impl"]),
                B.fmt(r["fwd_ms"], 3),
                B.fmt(r["fwd_tflops"], 3),
                B.fmt(r["ratio_fwd_tflops"]),
                B.fmt(r["fwdbwd_ms"], 3),
                B.fmt(r["fwdbwd_tflops"], 3),
                B.fmt(r["ratio_fwdbwd_tflops"]),
                escape(r.get("check", "-")),
            )
    console.print(table)
    if args.json:
        B.write_json(records, Path(args.json), command)
        console.print(f"wrote {len(records)} records to {args.json}")
    if args.plot:
        B.plot(records, Path(args.plot), "gbps" if args.op == "page_attention" else "fwd_tflops")
        console.print(f"wrote {args.plot}")
    failed = [r for r in records if str(r.get("check", "ok")).startswith("FAIL") and not r["impl"].startswith("jax.nn")]
    return 1 if failed else 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run

    return run()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ejkernel", description="ejkernel: fast attention kernels for JAX")
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("info", help="installed backends and their status, devices, cache").set_defaults(fn=_cmd_info)

    c = sub.add_parser("cache", help="the persistent config cache")
    c.add_argument("action", choices=("list", "clear", "path"))
    c.add_argument("--json", action="store_true", help="list as JSON")
    c.set_defaults(fn=_cmd_cache)

    b = sub.add_parser("bench", help="time every implementation that runs here against jax.nn peers")
    b.add_argument("op", choices=(*_DENSE_OPS, "page_attention"))
    b.add_argument("--shape", action="append", help="B,SQ,H,D or B,SQ,SK,H,HK,D[,DV] (repeatable)")
    b.add_argument("--b", type=int, default=1, help="batch")
    b.add_argument("--sq", type=int, default=1024, help="query length")
    b.add_argument("--sk", type=int, default=None, help="key length (default: sq)")
    b.add_argument("--h", type=int, default=8, help="query heads")
    b.add_argument("--hk", type=int, default=None, help="key/value heads (default: h)")
    b.add_argument("--d", type=int, default=64, help="head dim")
    b.add_argument("--dv", type=int, default=None, help="value head dim (default: d)")
    b.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    b.add_argument("--causal", default="no", choices=("no", "yes", "both"))
    b.add_argument("--window", default=None, help="sliding window W or LEFT,RIGHT")
    b.add_argument("--varlen", type=int, default=0, help="pack N sequences of random lengths in b*sq tokens")
    b.add_argument("--context", type=int, action="append", help="page_attention: context length (repeatable)")
    b.add_argument("--block-size", type=int, default=16, help="page_attention: tokens per page")
    b.add_argument("--impl", action="append", help="only these implementations (repeatable)")
    b.add_argument("--no-peers", action="store_true", help="skip jax.nn.dot_product_attention")
    b.add_argument("--fwd-only", action="store_true", help="skip forward+backward timing")
    b.add_argument("--no-check", action="store_true", help="skip the comparison with the reference")
    b.add_argument("--repeats", type=int, default=10, help="timed repetitions (median)")
    b.add_argument("--json", help="write the records to this JSON file")
    b.add_argument("--plot", help="write a bar chart to this PNG file (needs matplotlib)")
    b.set_defaults(fn=_cmd_bench)

    sub.add_parser("demo", help="a tour of the API on the best available backend").set_defaults(fn=_cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    args.argv = argv
    return int(args.fn(args) or 0)
