"""``ejkernel bench <op>``: the command line over :mod:`ejkernel.ops.benchmark`.

Every op with a benchmark description (``ejkernel/ops/<op>/bench.py``) gets a subcommand with the
options it declares plus the common ones below; the records go to a table, ``--json`` and
``--plot``. Argument errors are usage errors (exit 2), never tracebacks; unusable output paths
are argument errors too, found before anything is measured.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["add_parser", "fmt", "plot"]


def add_parser(sub: Any) -> None:
    """The ``bench`` subcommand, with one sub-subcommand per op that describes a benchmark."""
    from ..ops import list_ops, op_class

    b = sub.add_parser("bench", help="time every implementation of an op that runs here, against its peers")
    ops = b.add_subparsers(dest="op", required=True, metavar="OP")
    for name in list_ops():
        desc = op_class(name).get_bench()
        if desc is None:
            continue
        p = ops.add_parser(name, help=f"benchmark {name}")
        desc.add_arguments(p)
        p.add_argument("--dtype", default=desc.default_dtype, choices=("float32", "bfloat16", "float16"))
        p.add_argument(
            "--impl", action="append", help="only these implementations (repeatable; 'default': the call naming none)"
        )
        p.add_argument("--no-peers", action="store_true", help="skip the peers")
        p.add_argument("--fwd-only", action="store_true", help="skip forward+backward timing")
        p.add_argument("--no-check", action="store_true", help="skip the comparison with the reference")
        p.add_argument("--repeats", type=_positive_int, default=10, help="timed repetitions (median)")
        p.add_argument("--json", help="write the records to this JSON file")
        p.add_argument("--plot", help="write a bar chart to this PNG file (needs matplotlib)")
        p.set_defaults(fn=run_command, parser=p)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def run_command(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import Progress
    from rich.table import Table

    from ..ops import benchmark as B
    from ..ops import kernel_registry, op_class

    parser: argparse.ArgumentParser = args.parser
    op = args.op
    desc = op_class(op).get_bench()
    known = [i.name for i in kernel_registry.implementations(op)] + [B.DEFAULT]
    unknown = [i for i in args.impl or () if i not in known]
    if unknown:
        parser.error(f"unknown --impl {', '.join(unknown)}: {op} has {', '.join(known) or 'no implementation'}")
    if args.plot:
        try:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
        except ImportError:
            parser.error("--plot needs matplotlib: pip install 'ejkernel-core[plot]'")
    for option, where in (("--json", args.json), ("--plot", args.plot)):
        if where:
            problem = _unwritable(Path(where))
            suffix = Path(where).suffix.lower().lstrip(".")
            if option == "--plot" and not problem and suffix:
                formats = FigureCanvasAgg.get_supported_filetypes()
                if suffix not in formats:
                    problem = f"matplotlib cannot write .{suffix} files; use one of {', '.join(sorted(formats))}"
            if problem:
                parser.error(f"{option} {where}: {problem} (checked before measuring, so no results are lost)")
    try:
        cases = desc.cases(args, args.dtype, peers=not args.no_peers, check=not args.no_check)
    except ValueError as e:
        parser.error(str(e))

    console = Console() if sys.stdout.isatty() else Console(width=160)
    command = "ejkernel " + " ".join(shlex.quote(a) for a in args.argv)
    with Progress(transient=True, console=console, disable=not sys.stderr.isatty()) as progress:
        task = progress.add_task("bench", total=None)

        def report(msg: str) -> None:
            if sys.stderr.isatty():
                progress.update(task, description=escape(msg))
            else:
                B.stderr_progress(msg)
            if msg.split(": ", 1)[-1].startswith(("declines", "failed", "timing failed")):
                console.print(f"[yellow]{escape(msg)}[/yellow]")

        def keep(records: list[dict[str, Any]]) -> None:  # what is measured survives a time limit
            try:
                B.write_json(records, Path(args.json), command)
            except OSError as e:  # e.g. a full disk: the final write tries again and says so
                console.print(f"[yellow]could not write {escape(args.json)} yet: {escape(str(e))}[/yellow]")

        records = B.run(
            op,
            cases,
            args.dtype,
            impls=args.impl,
            backward=not args.fwd_only,
            repeats=args.repeats,
            progress=report,
            on_record=keep if args.json else None,
        )

    peer = records[0].get("peer") if records else None
    table = Table(title=f"{op} ({args.dtype}) on {records[0]['device'] if records else '?'}; ratio vs {peer}")
    if desc.metric == "tflops":
        cols = ("fwd_ms", "fwd_tflops", "ratio_fwd_tflops", "fwdbwd_ms", "fwdbwd_tflops", "ratio_fwdbwd_tflops")
        heads = ("fwd ms", "fwd TFLOP/s", "x peer", "fwd+bwd ms", "fwd+bwd TFLOP/s", "x peer")
        if any(r.get("compile_fwdbwd_s") is not None for r in records):
            cols, heads = (*cols, "compile_s", "compile_fwdbwd_s"), (*heads, "compile s", "compile fwd+bwd s")
        else:
            cols, heads = (*cols, "compile_s"), (*heads, "compile s")
    else:
        cols = ("ms", "gbps", "ratio_gbps", "peak_gbps", "fraction_of_peak", "compile_s")
        heads = ("ms", "GB/s", "x peer", "peak GB/s", "of peak", "compile s")
    for col in ("shape", "impl", *heads, "check"):
        table.add_column(col)
    for r in records:
        values = [fmt(r.get(c), 3 if c.endswith("ms") else 2) for c in cols]
        impl = f"{r['impl']} ({r['dispatch']})" if r.get("dispatch") else r["impl"]
        table.add_row(escape(r["label"]), escape(impl), *values, escape(str(r.get("check", "-"))))
    console.print(table)
    for line in desc.summary(records, args):
        console.print(escape(line))
    written = True
    try:
        if args.json:
            B.write_json(records, Path(args.json), command)
            console.print(f"wrote {len(records)} records to {args.json}")
        if args.plot:
            plot(records, Path(args.plot), "fwd_tflops" if desc.metric == "tflops" else "gbps")
            console.print(f"wrote {args.plot}")
    except OSError as e:  # the table above keeps the numbers
        console.print(f"[red]could not write the results: {escape(str(e))}[/red]")
        written = False
    failed = [r for r in records if str(r.get("check", "ok")).startswith("FAIL") and not r["impl"].startswith("jax.nn")]
    return 1 if failed or not written else 0


def _unwritable(path: Path) -> str | None:
    """Why a file cannot be written at ``path`` (``None``: it can), found by creating its folder
    and a scratch file there, as the write will."""
    if path.is_dir():
        return "is a folder; give a file name"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as e:
        return f"cannot write there: {e.strerror or e}"
    if path.exists() and not os.access(path, os.W_OK):
        return "the file exists and is read-only"
    return None


def plot(records: list[dict[str, Any]], path: Path, metric: str) -> None:
    """A grouped bar chart of ``metric`` per shape and implementation (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise RuntimeError("--plot needs matplotlib: pip install 'ejkernel-core[plot]'") from e
    labels = []
    for r in records:
        lab = r["label"]
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
            match = [r for r in records if r["impl"] == impl and r["label"] == lab]
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


def fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        return f"{x:.{digits}f}"
    return str(x)
