"""The benchmark page: a table per device of the records in ``benchmarks/results/<device>/<op>.json``.

Nothing in the table is written by hand: each row is one record of one of the op's
implementations (``ejkernel bench <op> --json``, or a sweep of ``benchmarks/`` writing the same
records), beside the record of its ``peer`` on the same case when the file has one. Figures are
TFLOP/s for compute-bound ops, GB/s for memory-bound ones, milliseconds where a record has no
rate; the ratio is the record's own ``ratio_*`` field, else the peer's time over the
implementation's (above 1: faster than the peer). A field a record lacks shows as ``-``; a file
that does not parse is named under its device's table, never a reason to fail the build.

Run it alone to print the page: ``python docs/gen_bench.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

# (label, rate field, time field, ratio field)
FIGURES = (
    ("fwd", "fwd_tflops", "fwd_ms", "ratio_fwd_tflops"),
    ("fwd+bwd", "fwdbwd_tflops", "fwdbwd_ms", "ratio_fwdbwd_tflops"),
    ("", "gbps", "ms", "ratio_gbps"),
)
UNITS = {"fwd_tflops": "TFLOP/s", "fwdbwd_tflops": "TFLOP/s", "gbps": "GB/s"}


def implementations(op: str) -> set[str]:
    """The names of ``op``'s registered implementations (empty for an unknown op)."""
    from ejkernel.ops import kernel_registry, list_ops

    return {i.name for i in kernel_registry.implementations(op)} if op in list_ops() else set()


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x else None


def _shape(r: dict[str, Any]) -> str:
    return str(r.get("label") or r.get("shape") or "-")


def _figure(r: dict[str, Any] | None, rate: str, time: str) -> str:
    if r is None:
        return "-"
    if _num(r.get(rate)) is not None:
        return f"{r[rate]:.4g} {UNITS[rate]}"
    if _num(r.get(time)) is not None:
        return f"{r[time]:.4g} ms"
    return "-"


def _ratio(r: dict[str, Any], peer: dict[str, Any] | None, field: str, time: str) -> str:
    value = _num(r.get(field))
    if value is None and peer is not None:
        mine, theirs = _num(r.get(time)), _num(peer.get(time))
        value = theirs / mine if mine and theirs else None
    return "-" if value is None else f"{value:.2f}"


def rows(op: str, records: list[dict[str, Any]]) -> list[str]:
    """The table rows of one op's records: one per implementation record and figure it has."""
    names = implementations(op)
    out = []
    for r in records:
        impl = str(r.get("impl", "-"))
        if impl.rpartition("/")[2] not in names:
            continue  # a peer's record: shown beside the implementations'
        peer_name = r.get("peer")
        peer = next(
            (
                p
                for p in records
                if peer_name
                and p.get("impl") == peer_name
                and _shape(p) == _shape(r)
                and p.get("dtype") == r.get("dtype")
            ),
            None,
        )
        for what, rate, time, ratio in FIGURES:
            if _num(r.get(rate)) is None and _num(r.get(time)) is None:
                continue
            cells = [
                f"`{op}`",
                f"{_shape(r)} {r.get('dtype', '')}".strip(),
                f"{impl} {what}".strip(),
                _figure(r, rate, time),
                str(peer_name or "-"),
                _figure(peer, rate, time),
                _ratio(r, peer, ratio, time),
                str(r.get("commit") or "-"),
                str(r.get("time") or "-")[:10],
            ]
            out.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return out


def render(results: Path = RESULTS) -> str:
    lines = [
        "# Benchmarks",
        "",
        "The committed records of `benchmarks/results/<device>/<op>.json`, one table per device. Each row",
        "is an implementation's figure on one case beside its peer's on the same inputs (TFLOP/s, GB/s,",
        "or ms); the ratio is above 1 where ejkernel is faster. `commit` is the commit that recorded the",
        "figures. Compare figures within one device only. How to measure and file new records:",
        "`benchmarks/README.md`.",
        "",
    ]
    folders = sorted(p for p in results.iterdir() if p.is_dir()) if results.is_dir() else []
    if not folders:
        lines.append("No records.")
    for folder in folders:
        table, broken, devices = [], [], set()
        for path in sorted(folder.glob("*.json")):
            try:
                records = json.loads(path.read_text())
                if not isinstance(records, list):
                    raise ValueError("not a list of records")
            except (OSError, ValueError) as e:
                shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                broken.append(f"- `{shown}`: {e}")
                continue
            records = [r for r in records if isinstance(r, dict)]
            devices |= {str(r["device"]) for r in records if r.get("device")}
            table += rows(path.stem, records)
        lines += [f"## {folder.name}", ""]
        if devices:
            lines += [f"Device: {', '.join(sorted(devices))}.", ""]
        if table:
            lines += ["| op | case | implementation | figure | peer | peer figure | ratio | commit | date |"]
            lines += ["|---|---|---|---|---|---|---|---|---|", *table, ""]
        else:
            lines += ["No records.", ""]
        if broken:
            lines += ["Unreadable record files:", "", *broken, ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render(Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS))
