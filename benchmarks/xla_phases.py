"""Where an op's XLA path spends its time at a benchmark shape: tracing, compiling, the first and
second call, then ``device_ms`` (the figure the benchmarks record), forward and forward+backward,
each phase printed (and appended to ``--jsonl``) the moment it ends.

    python benchmarks/xla_phases.py --op kda [--shape 4,4096,16,128] [--what fwd,fwdbwd] [--device-ms] [--jsonl FILE]

The time per call is the wall clock of ``--calls`` back-to-back calls of the compiled program (one
synchronization at the end; median of ``--repeats``): exact enough for calls of milliseconds, and
it compiles nothing more. ``--device-ms`` adds ``ejkernel.ops.timing.device_ms`` (two more
compilations of looped programs).

Written for kernel_delta_attention's XLA path, whose B4 T4096 timing in
``linear_delta_vs_fla.py`` did not finish within 230 s on an H100 while the other ops' took
seconds; the inputs are that script's (``make_case``), bfloat16.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from linear_delta_vs_fla import PEERS, make_case


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--op", default="kda", choices=sorted(PEERS))
    p.add_argument("--shape", default="4,4096,16,128")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--what", default="fwd,fwdbwd")
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--device-ms", action="store_true")
    p.add_argument("--stages", action="store_true", help="kda/gdn: compile the chunked algorithm's steps one by one")
    p.add_argument("--jsonl")
    ns = p.parse_args()
    import ejkernel
    from ejkernel.ops.timing import device_ms

    b, t, h, d = (int(x) for x in ns.shape.split(","))
    case = make_case(ns.op, b, t, h, d, jnp.bfloat16, None)
    fn = getattr(ejkernel, PEERS[ns.op][0])
    arrays, opts = case["arrays"], case["opts"]

    def fwd(*a):
        return fn(*a, **opts, platform="xla")

    def fwdbwd(*a):
        out, vjp = jax.vjp(fwd, *a)
        return vjp(out)

    def emit(**rec):
        rec = {"op": PEERS[ns.op][0], "impl": "xla", "shape": ns.shape, "device": jax.devices()[0].device_kind,
               "xla_flags": os.environ.get("XLA_FLAGS", ""), **rec}  # fmt: skip
        print(json.dumps(rec), flush=True)
        if ns.jsonl:
            with open(ns.jsonl, "a") as f:
                f.write(json.dumps(rec) + "\n")

    if ns.stages:
        _stages(ns, arrays, opts, emit)
        return
    for name, f in (("fwd", fwd), ("fwdbwd", fwdbwd)):
        if name not in ns.what.split(","):
            continue
        compiled = _compile(emit, name, f, arrays)
        for i in (1, 2):
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(*arrays))
            emit(what=name, phase=f"call {i}", s=round(time.perf_counter() - t0, 3))
        samples = []
        for _ in range(ns.repeats):
            t0 = time.perf_counter()
            out = [compiled(*arrays) for _ in range(ns.calls)]
            jax.block_until_ready(out)
            samples.append((time.perf_counter() - t0) * 1e3 / ns.calls)
            del out
        emit(what=name, phase="wall ms per call", ms=float(np.median(samples)), calls=ns.calls, repeats=ns.repeats)
        if ns.device_ms:
            t0 = time.perf_counter()
            ms = device_ms(f, arrays, ns.repeats)
            emit(what=name, phase="device_ms", ms=ms, s=round(time.perf_counter() - t0, 1))


def _compile(emit, what, f, args):
    """``jax.jit(f)`` compiled for ``args``: its trace+lower and compile times (and the compiled
    program's temporary memory) emitted as two phases."""
    t0 = time.perf_counter()
    lowered = jax.jit(f).lower(*args)
    emit(what=what, phase="trace+lower", s=round(time.perf_counter() - t0, 2))
    t0 = time.perf_counter()
    compiled = lowered.compile()
    mem = compiled.memory_analysis()
    emit(what=what, phase="compile", s=round(time.perf_counter() - t0, 2),
         temp_gb=round(getattr(mem, "temp_size_in_bytes", 0) / 1e9, 3))  # fmt: skip
    return compiled


def _stages(ns, arrays, opts, emit) -> None:
    """The delta rule's XLA forward step by step (``delta_rule_math``): each step jitted alone on
    the previous step's outputs, its compile time and memory reported; then the per-channel pair
    sum ``_pair`` alone (the key-key and query-key products of the intra-chunk step)."""
    from ejkernel.ops.families import delta_rule_math as M

    q, k, v = arrays[:3]
    beta, gate = (arrays[3], arrays[4]) if ns.op == "kda" else (arrays[4], arrays[3])
    scale = q.shape[-1] ** -0.5
    l2 = opts.get("use_qk_l2norm", opts.get("use_qk_l2norm_in_kernel", False))

    def compile_(what, f, *a):
        return _compile(emit, what, f, a)(*a)

    def layout(q, k, v, beta, gate):
        return M.to_chunks(q, k, v, beta, gate, None, None, scale=scale, use_qk_l2norm=l2, chunk=64)

    c = compile_("to_chunks", layout, q, k, v, beta, gate)
    x = compile_("intra_chunk", M.intra_chunk, c)
    states, vn, _ = compile_("inter_chunk", M.inter_chunk, c, x)
    compile_("chunk_output", M.chunk_output, x, states, vn)
    i = jnp.arange(64)
    gam = jnp.cumsum(c.g, axis=-2)
    compile_("_pair k k (strict)", lambda k, g: M._pair(k, k, g, i[:, None] > i[None, :]), c.k, gam)
    compile_("cumsum + _pair q k (causal)", lambda q, k, g: M._pair(q, k, jnp.cumsum(g, axis=-2), i[:, None] >= i[None, :]),
             c.q, c.k, c.g)  # fmt: skip


if __name__ == "__main__":
    main()
