"""Where a traced JAX program spends its GPU time: per device, per kernel, and how much of the
communication overlaps compute.

Reads the ``*.xplane.pb`` that ``jax.profiler.trace`` writes (with ``jax.profiler.ProfileData``,
no TensorBoard needed) and, for each ``/device:GPU:i`` plane, sums the kernels' durations by
name (per traced call), the busy time of communication kernels (NCCL) and of everything else,
and the time both run at once.

    python benchmarks/gpu_trace_summary.py TRACE_DIR --calls 3 [--top 25] [--json out.json]
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

_GPU_PLANE = re.compile(r"/device:GPU:(\d+)$")
# Per-stream kernel lines are named "Stream #N(...)"; other lines ("XLA Ops", "XLA Modules",
# "Launch Stats", ...) repeat the same time spans one level up.
_STREAM_LINE = re.compile(r"^Stream #\d+")


def _is_comm(name: str) -> bool:
    return "nccl" in name.lower()


def _short(name: str) -> str:
    """Kernel names without template arguments and parameters, so that launches group."""
    name = re.sub(r"\(.*", "", name)
    return name if len(name) < 90 else name[:87] + "..."


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _length(spans: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in spans)


def _intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _load(trace_dir: str | Path) -> tuple[str, Any]:
    from jax.profiler import ProfileData

    paths = sorted(glob.glob(str(Path(trace_dir) / "**" / "*.xplane.pb"), recursive=True))
    if not paths:
        raise FileNotFoundError(f"no *.xplane.pb under {trace_dir}")
    return paths[-1], ProfileData.from_file(paths[-1])


def _stream(line_name: str) -> str:
    return line_name.split("(")[0].replace("Stream ", "")


def timeline(trace_dir: str | Path, device: int = 0, call: int = 1, merge_us: float = 50.0) -> list[dict[str, Any]]:
    """GPU ``device``'s kernels during traced call number ``call`` (0-based; by the spans of the
    "XLA Modules" line), in start order: offset and duration (ms), stream, name. Runs of short
    kernels (< ``merge_us``) on one stream are merged into one row."""
    _, data = _load(trace_dir)
    plane = next((p for p in data.planes if p.name.endswith(f"/device:GPU:{device}")), None)
    if plane is None:
        return []
    lines = list(plane.lines)
    modules = next((ln for ln in lines if ln.name == "XLA Modules"), None)
    windows = sorted((ev.start_ns, ev.end_ns) for ev in modules.events) if modules is not None else []
    events = sorted(
        (ev.start_ns, ev.end_ns, _stream(ln.name), _short(ev.name))
        for ln in lines
        if _STREAM_LINE.match(ln.name)
        for ev in ln.events
    )
    if not events:
        return []
    lo, hi = windows[call] if call < len(windows) else (events[0][0], events[-1][1])
    rows: list[dict[str, Any]] = []
    for s, e, stream, name in events:
        if s < lo or s > hi:
            continue
        last = rows[-1] if rows else None
        short = (e - s) < merge_us * 1e3
        if last is not None and short and last["short"] and last["stream"] == stream:
            last["end"], last["count"] = e, last["count"] + 1
            last["name"] = "(short kernels)" if last["name"] != name else name
            continue
        rows.append({"start": s, "end": e, "stream": stream, "name": name, "count": 1, "short": short})
    return [
        {
            "at_ms": round((r["start"] - lo) * 1e-6, 3),
            "ms": round((r["end"] - r["start"]) * 1e-6, 3),
            "stream": r["stream"],
            "kernels": r["count"],
            "name": r["name"],
        }
        for r in rows
    ]


def render_timeline(rows: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"  {r['at_ms']:9.3f} +{r['ms']:7.3f} ms  {r['stream']:>5} x{r['kernels']:<3} {r['name']}" for r in rows
    )


def summarize(trace_dir: str | Path, calls: int = 1, top: int = 25) -> dict[str, Any]:
    """Per-GPU summary of the newest trace under ``trace_dir`` (times in ms per call)."""
    path, data = _load(trace_dir)
    devices = {}
    for plane in data.planes:
        m = _GPU_PLANE.search(plane.name)
        if m is None:
            continue
        per_kernel: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        comm, compute = [], []
        streams = set()
        for line in plane.lines:
            if not _STREAM_LINE.match(line.name):
                continue
            for ev in line.events:
                span = (ev.start_ns, ev.end_ns)
                streams.add(line.name)
                (comm if _is_comm(ev.name) else compute).append(span)
                entry = per_kernel[_short(ev.name)]
                entry[0] += 1
                entry[1] += ev.duration_ns
        if not comm and not compute:
            continue
        comm_u, compute_u = _union(comm), _union(compute)
        everything = _union(comm + compute)
        ms = 1e-6 / calls
        kernels = sorted(per_kernel.items(), key=lambda kv: -kv[1][1])
        devices[int(m.group(1))] = {
            "streams": sorted(streams),
            "span_ms": (everything[-1][1] - everything[0][0]) * ms,
            "busy_ms": _length(everything) * ms,
            "compute_busy_ms": _length(compute_u) * ms,
            "comm_busy_ms": _length(comm_u) * ms,
            "comm_overlapped_ms": _intersection(comm_u, compute_u) * ms,
            "kernels": [
                {"name": name, "launches_per_call": n / calls, "ms_per_call": t * ms} for name, (n, t) in kernels[:top]
            ],
            "other_kernels_ms": sum(t for _, (_, t) in kernels[top:]) * ms,
        }
    return {"trace": path, "calls": calls, "devices": devices}


def render(summary: dict[str, Any]) -> str:
    lines = []
    for dev, s in sorted(summary["devices"].items()):
        lines.append(
            f"GPU {dev}: span {s['span_ms']:.3f} ms/call, busy {s['busy_ms']:.3f}, compute {s['compute_busy_ms']:.3f}, "
            f"comm {s['comm_busy_ms']:.3f} (overlapped with compute {s['comm_overlapped_ms']:.3f}); "
            f"{len(s['streams'])} streams"
        )
        for k in s["kernels"]:
            lines.append(f"  {k['ms_per_call']:9.3f} ms  x{k['launches_per_call']:<6g} {k['name']}")
        if s["other_kernels_ms"]:
            lines.append(f"  {s['other_kernels_ms']:9.3f} ms  (other kernels)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace_dir")
    p.add_argument("--calls", type=int, default=1, help="traced calls, to report per call")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--timeline", type=int, default=None, metavar="CALL", help="also list GPU 0's kernels in this call")
    args = p.parse_args(argv)
    summary = summarize(args.trace_dir, args.calls, args.top)
    print(render(summary))
    if args.timeline is not None:
        summary["timeline_gpu0"] = timeline(args.trace_dir, 0, args.timeline)
        print(render_timeline(summary["timeline_gpu0"]))
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
