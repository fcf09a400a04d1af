"""Where one call's time goes inside the bench's loop: the grouped matmul forward (CUDA, Triton,
the CUDA FFI call alone) beside the dense matmul of the same FLOPs and the loop's own glue.

``ejkernel bench`` times ``looped(fn, n)`` (``ejkernel.ops.timing``): ``n`` calls in one
``fori_loop``. This traces one such program per function with ``jax.profiler`` and splits its
time per call into the kernels (by name), the GPU's busy time (the union of kernel spans) and
the idle time between kernels (launch gaps, the loop's host round trips). It also reports the
bench's own figure (``device_ms``) for each, so the two can be compared.

    python3 benchmarks/gmm_call_trace.py --json out.json [--shape 16384,2048,1536,64] [--calls 20] [--configs 0]

Group sizes are the bench's (``group_sizes_for``, multinomial by default).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import ejkernel
from ejkernel.ops.executor import bind
from ejkernel.ops.grouped_matmul.bench import group_sizes_for
from ejkernel.ops.grouped_matmul.op import group_bounds
from ejkernel.ops.timing import device_ms, looped


def _kernels(trace_dir: str) -> tuple[list[tuple[int, int, str]], float]:
    """GPU 0's kernel spans (start ns, end ns, short name) in the newest trace under the folder,
    and the ns of their union (the GPU's busy time)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from gpu_trace_summary import _STREAM_LINE, _length, _load, _short, _union

    _, data = _load(trace_dir)
    plane = next(p for p in data.planes if p.name.endswith("/device:GPU:0"))
    spans = sorted(
        (ev.start_ns, ev.end_ns, _short(ev.name))
        for ln in plane.lines
        if _STREAM_LINE.match(ln.name)
        for ev in ln.events
    )
    return spans, _length(_union([(s, e) for s, e, _ in spans]))


def trace_one(fn: Any, args: tuple, calls: int) -> dict[str, Any]:
    prog = looped(fn, calls)
    for _ in range(2):
        jax.block_until_ready(prog(*args))
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d):
            jax.block_until_ready(prog(*args))
        spans, busy_ns = _kernels(d)
    if not spans:
        return {"error": "no kernels in the trace"}
    by_name: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for s, e, name in spans:
        by_name[name][0] += 1
        by_name[name][1] += (e - s) * 1e-6
    span_ms = (spans[-1][1] - spans[0][0]) * 1e-6
    busy_ms = busy_ns * 1e-6
    return {
        "calls": calls,
        "span_ms_per_call": span_ms / calls,
        "busy_ms_per_call": busy_ms / calls,
        "idle_ms_per_call": (span_ms - busy_ms) / calls,
        "kernels": sorted(
            ({"name": k, "launches_per_call": v[0] / calls, "ms_per_call": v[1] / calls} for k, v in by_name.items()),
            key=lambda r: -r["ms_per_call"],
        ),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--json", required=True)
    p.add_argument("--shape", default="16384,2048,1536,64", help="M,K,N,G")
    p.add_argument("--dist", default="multinomial")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--configs", default="0", help="CUDA config indices for the FFI-only rows (gmm_sm90.cuh)")
    ns = p.parse_args()
    ns.configs = [int(c) for c in ns.configs.split(",")]
    m, k, n, g = (int(x) for x in ns.shape.split(","))
    dt = jnp.bfloat16
    k1, k2 = jax.random.split(jax.random.key(0))
    lhs = jax.random.normal(k1, (m, k), jnp.float32).astype(dt)
    rhs = (jax.random.normal(k2, (g, k, n), dt) / np.sqrt(k)).astype(dt)
    sizes = jnp.asarray(group_sizes_for(m, g, ns.dist))
    # The FFI rows take the bounds the CUDA implementation computes (the op's group_bounds).
    starts, ends = group_bounds(bind("grouped_matmul", lhs, rhs, sizes, preferred_element_type=dt))
    b0 = rhs[0]

    fns: dict[str, tuple[Any, tuple]] = {
        "dense": (lambda a, b: jnp.dot(a, b, preferred_element_type=dt), (lhs, b0)),
        # The loop's glue alone: a call that only slices its input.
        "glue": (lambda a: a[:1], (lhs,)),
    }
    for impl in ("cuda", "triton"):
        fns[impl] = (
            lambda a, b, s, impl=impl: ejkernel.grouped_matmul(a, b, s, platform=impl, preferred_element_type=dt),
            (lhs, rhs, sizes),
        )
    try:
        from ejkernel_cuda.grouped_matmul._call import ROW_ROW, ffi_gmm

        for c in ns.configs:
            fns[f"cuda_ffi_only_config{c}"] = (
                lambda a, b, s, e, c=c: ffi_gmm(a, b, s, e, ROW_ROW, dt, c),
                (lhs, rhs, starts, ends),
            )
    except ImportError as e:
        print(f"no CUDA extension: {e}")

    out: dict[str, Any] = {"shape": [m, k, n, g], "dist": ns.dist, "device": str(jax.devices()[0]), "results": {}}
    for name, (fn, args) in fns.items():
        try:
            rec = trace_one(fn, args, ns.calls)
            rec["device_ms"] = device_ms(fn, args, ns.repeats)
        except Exception as e:  # an impl that declines or fails here: reported, the rest still run
            rec = {"error": f"{type(e).__name__}: {e}"}
        out["results"][name] = rec
        print(f"== {name}: " + json.dumps({k: v for k, v in rec.items() if k != "kernels"}), flush=True)
        for kr in rec.get("kernels", [])[:8]:
            print(f"   {kr['ms_per_call']:8.4f} ms  x{kr['launches_per_call']:.2f}  {kr['name']}")
        Path(ns.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
