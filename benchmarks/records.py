"""The benchmark records: one file per op and device, ``benchmarks/results/<device>/<op>.json``.

    python benchmarks/records.py add RUN.json [RUN.json ...] [--commit HASH] [--results DIR]

files the records of ``ejkernel bench <op> --json RUN.json`` runs (or of the sweeps here that write
the same kind of list) into the op's record of their device: a record of the same case (same
implementation and the same shape and option fields) replaces the one there, the others are added.
Each added record gets ``commit``: ``--commit``, by default the checkout's ``git rev-parse --short
HEAD`` (add ``+`` yourself when the measured tree had uncommitted changes).

    python benchmarks/records.py check [--results DIR]

reads every record file and says what is wrong (exit 1): a file not named after a registered op,
not a JSON list of objects, or a record of another op or device.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"

# Fields that describe a measurement, not the case measured: two records that differ only in
# these are the same case, and the newer replaces the older.
MEASUREMENT = {
    "time", "timer", "command", "commit", "source", "jax", "ejkernel", "device", "label", "check",
    "max_err", "peer", "fwd_ms", "fwd_tflops", "fwdbwd_ms", "fwdbwd_tflops", "ms", "gbps",
    "fraction_of_peak", "flops_fwd", "bytes", "peak_gbps", "wall_s", "note", "compile_s", "compile_fwdbwd_s",
    "roofline_ms",
}  # fmt: skip


def device_folder(device: str) -> str:
    """The results folder of a device kind: ``"NVIDIA H100 80GB HBM3"`` -> ``h100``, ``cpu``."""
    model = re.search(r"\b([A-Z]+\d{2,4}[A-Za-z]*)\b", device)
    if model:
        return model.group(1).lower()
    return re.sub(r"[^a-z0-9]+", "_", device.lower()).strip("_") or "unknown"


def case_key(record: dict[str, Any]) -> str:
    """What identifies a record's case: its implementation and shape and option fields."""
    fields = {k: v for k, v in record.items() if k not in MEASUREMENT and not k.startswith("ratio_")}
    return json.dumps(fields, sort_keys=True, default=str)


def merge(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``old`` with each record of ``new`` replacing the one of the same case (kept in place) or
    appended."""
    out = list(old)
    where = {case_key(r): i for i, r in enumerate(out)}
    for r in new:
        k = case_key(r)
        if k in where:
            out[where[k]] = r
        else:
            where[k] = len(out)
            out.append(r)
    return out


def read(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text())
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise ValueError(f"{path}: expected a JSON list of records (objects)")
    return data


def write(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(records, indent=1) + "\n")
    tmp.replace(path)


def add(runs: list[Path], commit: str, results: Path) -> list[Path]:
    """File the records of ``runs`` under ``results``; the record files written."""
    grouped: dict[Path, list[dict[str, Any]]] = {}
    for run in runs:
        for r in read(run):
            if "op" not in r or "device" not in r:
                raise ValueError(f"{run}: a record without 'op' or 'device': {sorted(r)}")
            r.setdefault("commit", commit)
            grouped.setdefault(results / device_folder(str(r["device"])) / f"{r['op']}.json", []).append(r)
    for path, records in grouped.items():
        write(path, merge(read(path) if path.exists() else [], records))
    return sorted(grouped)


def problems(results: Path) -> list[str]:
    """What is wrong with the record files under ``results`` (empty: nothing)."""
    from ejkernel.ops import list_ops

    ops = set(list_ops())
    found = []
    for path in sorted(results.glob("*/*")):
        if path.suffix != ".json":
            found.append(f"{path}: not a record file (<op>.json)")
            continue
        if path.stem not in ops:
            found.append(f"{path}: {path.stem!r} is not a registered op")
        try:
            records = read(path)
        except (ValueError, json.JSONDecodeError) as e:
            found.append(f"{path}: {e}")
            continue
        keys = [case_key(r) for r in records]
        if len(set(keys)) < len(keys):
            found.append(f"{path}: {len(keys) - len(set(keys))} record(s) of a case recorded twice")
        for r in records:
            if r.get("op") != path.stem:
                found.append(f"{path}: a record of op {r.get('op')!r}")
            if "device" in r and device_folder(str(r["device"])) != path.parent.name:
                found.append(f"{path}: a record of device {r['device']!r}")
    return found


def _head() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("add", help="file runs' records into results/<device>/<op>.json")
    a.add_argument("runs", nargs="+", type=Path)
    a.add_argument("--commit", default=None, help="the commit measured (default: git rev-parse --short HEAD)")
    a.add_argument("--results", type=Path, default=RESULTS)
    c = sub.add_parser("check", help="check the record files")
    c.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if args.cmd == "add":
        for path in add(args.runs, args.commit or _head(), args.results):
            print(f"wrote {path}")
        return 0
    found = problems(args.results)
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
