"""How the benchmark's device timer (``ejkernel.cli.bench._looped``: LOOP calls in one rolled
``fori_loop``) relates to the kernels' own time, on the CUDA paged decode and cuDNN dense decode:
per-call ms at several loop lengths, and the GPU timeline of one 10-call program (profiler trace,
``benchmarks/gpu_trace_summary.py``).

    python benchmarks/h200/loop_probe.py --context 8192 --out probe.json
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import jax

import ejkernel
from ejkernel.cli.bench import PageShape, _dense_decode, _looped
from ejkernel.ops import time_callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_trace_summary import render_timeline, summarize, timeline


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=8192)
    ap.add_argument("--loops", default="10,40,160")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    shape = PageShape(b=32, h=32, hk=8, d=128, context=a.context, block_size=16)
    (q, kc, vc, lens, tables), nbytes = shape.inputs("bfloat16")
    kd = kc[tables].reshape(shape.b, -1, shape.hk, shape.d)
    vd = vc[tables].reshape(shape.b, -1, shape.hk, shape.d)
    cases = {
        "cuda": (lambda qq, kc, vc: ejkernel.page_attention(qq, kc, vc, lens, tables, platform="cuda"), (q, kc, vc)),
        "cudnn dense": (functools.partial(_dense_decode, "cudnn"), (q, kd, vd)),
    }
    report = {"context": a.context, "bytes": nbytes, "cases": {}}
    for name, (fn, args) in cases.items():
        row = {}
        for loop in (int(x) for x in a.loops.split(",")):
            run = _looped(fn, loop)
            ms = time_callable(lambda run=run, args=args: run(*args), 10) / loop
            row[f"loop{loop}_ms"] = ms
            print(f"{name:12} loop {loop:4d}: {ms:.4f} ms/call  {nbytes / ms / 1e6:6.0f} GB/s", flush=True)
        run = _looped(fn, 10)
        jax.block_until_ready(run(*args))
        folder = Path(f"/tmp/loop_probe_{name.replace(' ', '_')}")
        with jax.profiler.trace(str(folder)):
            for _ in range(3):
                jax.block_until_ready(run(*args))
        summary = summarize(folder, calls=3, top=8)["devices"].get(0)
        rows = timeline(folder, 0, call=1, merge_us=0.0)
        print(render_timeline(rows[:40]), flush=True)
        kernels = {k["name"]: k["ms_per_call"] / 10 for k in summary["kernels"]} if summary else {}
        print(
            f"{name}: per call, kernels {kernels}; span/10 {summary['span_ms'] / 10 if summary else None}", flush=True
        )
        row.update({"kernels_ms_per_call": kernels, "summary": summary, "timeline_program1": rows})
        report["cases"][name] = row
    if a.out:
        a.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
