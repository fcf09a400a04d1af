"""Probe: the warp-specialized TMA loop of ``ws_probe.py`` launched from JAX through
``ejkernel_triton._launch.launch_compiled`` (jaxlib's Triton custom call), one shape per
subprocess with a time limit, so a hang is reported instead of stalling the run. It separates a
launcher problem (hangs at every length) from a kernel problem (hangs only on short key loops).

    python benchmarks/h200/ws_launch_probe.py --seqs 8192,2048,512,256 --out ws_launch.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

_CHILD = """
import sys, time, jax, jax.numpy as jnp, numpy as np
sys.path.insert(0, "benchmarks/h200")
from ws_probe import _fwd_ws_out_last
from ejkernel_triton._launch import launch_compiled
from ejkernel.cli.bench import _timed
from ejkernel.testing import attention_reference
b, s, h, d, bm, bn, warps, stages, ws = (int(x) for x in sys.argv[1:10])
rng = np.random.default_rng(0)
q, k, v = (jnp.asarray(rng.standard_normal((b, s, h, d)), jnp.bfloat16) for _ in range(3))
def fn(q, k, v):
    return launch_compiled(_fwd_ws_out_last, q, k, v, np.float32(d ** -0.5), s, b * s, out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype)],
                           grid=(s // bm, b * h), num_warps=warps, num_stages=stages, H=h, D=d, BM=bm, BN=bn, WS=bool(ws))[0]
out = jax.jit(fn)(q, k, v).block_until_ready()
ref = attention_reference(q.astype(jnp.float32), k.astype(jnp.float32), v.astype(jnp.float32))
err = float(jnp.max(jnp.abs(out.astype(jnp.float32) - ref)))
ms = _timed(fn, (q, k, v), 3) if s >= 2048 else None
print("RESULT", err, ms, 4.0 * b * h * s * s * d / ms / 1e9 if ms else None)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", default="8192,2048,512,256")
    ap.add_argument("--config", default="128x128x4x2")
    ap.add_argument("--ws", default="1,0")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--out")
    a = ap.parse_args()
    bm, bn, warps, stages = (int(x) for x in a.config.split("x"))
    records = []
    for ws in a.ws.split(","):
        for s in (int(x) for x in a.seqs.split(",")):
            b = max(1, 16384 // s)
            argv = [str(x) for x in (b, s, 16, 128, bm, bn, warps, stages, ws)]
            rec = {"b": b, "s": s, "config": a.config, "warp_specialize": ws == "1"}
            try:
                r = subprocess.run(
                    [sys.executable, "-c", _CHILD, *argv], capture_output=True, text=True, timeout=a.timeout
                )
                line = [x for x in r.stdout.splitlines() if x.startswith("RESULT")]
                if line:
                    err, ms, tf = line[0].split()[1:]
                    rec.update(
                        max_abs_err=float(err),
                        ms=None if ms == "None" else float(ms),
                        tflops=None if tf == "None" else float(tf),
                    )
                else:
                    rec["error"] = (
                        r.stderr.strip().splitlines()[-1][:300] if r.stderr.strip() else f"exit {r.returncode}"
                    )
            except subprocess.TimeoutExpired:
                rec["error"] = f"timed out after {a.timeout:.0f} s (hang)"
            print(rec, flush=True)
            records.append(rec)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(records, fh, indent=1)


if __name__ == "__main__":
    main()
