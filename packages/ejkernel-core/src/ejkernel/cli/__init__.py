"""The ``ejkernel`` command (also ``python -m ejkernel``).

ejkernel info                       installed backends, ops and implementations, devices, cache
ejkernel info --support-table       the op x backend table (Markdown)
ejkernel bench OP ...               time every implementation of OP that runs here vs its peers
ejkernel cache list | clear | path  the persistent config cache
ejkernel demo                       a tour of the API on the best available backend
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["main"]


def _console() -> Any:
    from rich.console import Console

    # Wide tables stay readable when the output is a log file rather than a terminal.
    return Console() if sys.stdout.isatty() else Console(width=160)


def _cmd_info(args: argparse.Namespace) -> int:
    if args.support_table:
        from ejkernel.ops.support import support_table

        sys.stdout.write(support_table())
        return 0
    import jax
    from rich.markup import escape
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
    for col in ("name", "distribution", "status", "implementations / why / install"):
        table.add_column(col, overflow="fold")
    found = ejkernel.backends(include_missing=True)
    for b in found:
        style = {"loaded": "green", "failed": "red", "disabled": "yellow", "not installed": "yellow"}.get(b.status, "")
        if b.status == "failed":
            detail = f"{b.error}\nreinstall: {b.install}" if b.install else str(b.error)
        elif b.status == "not installed":
            detail = f"install: {b.install}"
        elif b.status == "disabled":
            detail = "denied by the policy (EJKERNEL_BACKENDS)"
        else:
            detail = ", ".join(b.implementations)
        table.add_row(
            b.name,
            f"{b.distribution or '?'} {b.version or ''}",
            f"[{style}]{escape(b.state)}[/{style}]" if style else escape(b.state),
            escape(detail or "-"),
        )
    console.print(table)
    if not any(b.status == "loaded" for b in found):
        console.print("[yellow]no backend loaded: pip install 'ejkernel-core[xla]'[/yellow]")
    ops = Table(title="ops and their implementations by priority (those that target another device decline here)")
    for col in ("op", "implementation", "platform", "backend", "priority", "plugin", "here"):
        ops.add_column(col)
    from ejkernel.ops import device_for_arrays, kernel_registry, list_ops

    device = device_for_arrays([])
    for op in list_ops():
        impls = kernel_registry.implementations(op)
        if not impls:
            ops.add_row(op, "[yellow]none registered[/yellow]", "-", "-", "-", "-", "-")
        for impl in impls:
            env = kernel_registry.environment(impl, device)
            here = "[green]runs[/green]" if env is None else f"[yellow]{env}[/yellow]"
            ops.add_row(op, impl.name, impl.platform.value, impl.backend.value, str(impl.priority), impl.plugin, here)
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


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run

    return run()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ejkernel", description="ejkernel: fast kernels for JAX")
    sub = p.add_subparsers(dest="command", required=True)

    i = sub.add_parser("info", help="installed backends and their status, devices, cache")
    i.add_argument(
        "--support-table",
        action="store_true",
        help="print the op x backend table (Markdown) instead: which backend implements which op",
    )
    i.set_defaults(fn=_cmd_info)

    c = sub.add_parser("cache", help="the persistent config cache")
    c.add_argument("action", choices=("list", "clear", "path"))
    c.add_argument("--json", action="store_true", help="list as JSON")
    c.set_defaults(fn=_cmd_cache)

    from .bench import add_parser

    add_parser(sub)

    sub.add_parser("demo", help="a tour of the API on the best available backend").set_defaults(fn=_cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    args.argv = argv
    return int(args.fn(args) or 0)
