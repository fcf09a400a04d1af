"""Registers, spills and shared memory of every Triton kernel the wave-2 ops launch at their
benchmark shapes, compiled for sm_90 on a machine without a GPU (Triton ships ``ptxas``).

    python benchmarks/sm90_registers.py [--ops gla_attention,state_space_v1,...] [--cfg FIELD=V ...]

A kernel using 255 registers with spill stores runs one program per SM or pays local-memory
traffic: the first thing to look at when a kernel is slow, and checkable without a GPU. One line
per distinct kernel (forward and the gradient of every differentiable input): registers per
thread, spill stores/loads in bytes, shared memory, warps, and the programs of that kernel one SM
holds (by registers, 65536 per SM, and shared memory, 228 KiB). Run it WITHOUT ``TRITON_INTERPRET=1``, in an environment with
``triton`` (e.g. the interpreter's venv with the variable unset).

Found this way (2026-11-25): the linear family's one-kernel input gradient used 255 registers and
spilled at head dim 128; state_space_v1's backward uses 254 registers at 8 warps (one program per
SM) at the heuristic's tiles.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from typing import Any

if os.environ.get("TRITON_INTERPRET") == "1":
    sys.exit("unset TRITON_INTERPRET: this script compiles the kernels for sm_90")

import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pool_ssm1"))
from compile_cases_sm90 import _trace

import ejkernel  # noqa: F401  (loads the ops)
from ejkernel.ops import kernel_registry
from ejkernel.ops.op import op_class
from ejkernel_triton._launch import compile_launch

REGS_PER_SM = 65536
SMEM_PER_SM = 228 * 1024  # Hopper


def bench_inputs(op: str) -> dict[str, Any]:
    """The benchmark shape of each op (zeros: only shapes and dtypes matter)."""
    bf = jnp.bfloat16
    b, t, h, d = 4, 4096, 16, 128
    x = jnp.zeros((b, t, h, d), bf)
    if op in ("gla_attention", "recurrent_attention"):
        return dict(query=x, key=x, value=x, g=jnp.zeros((b, t, h, d), jnp.float32))
    if op == "lightning_attention":
        return dict(query=x, key=x, value=x, layer_idx=5, num_layers=24)
    if op == "state_space_v2":
        return dict(x=x, A=-jnp.ones((h,)), B=jnp.zeros((b, t, 1, d), bf), C=jnp.zeros((b, t, 1, d), bf),
                    D=jnp.ones((h,)), dt=jnp.zeros((b, t, h), bf))  # fmt: skip
    if op == "kernel_delta_attention":
        return dict(query=x, key=x, value=x, beta=jnp.zeros((b, t, h), bf), decay=jnp.zeros((b, t, h, d), jnp.float32))
    if op == "gated_delta_rule":
        return dict(query=x, key=x, value=x, g=jnp.zeros((b, t, h), jnp.float32), beta=jnp.zeros((b, t, h), bf))
    if op == "state_space_v1":
        s, dd, n = 4096, 4096, 16
        return dict(hidden_states=jnp.zeros((1, s, dd), bf), A=-jnp.ones((dd, n)), B=jnp.zeros((1, s, n), bf),
                    C=jnp.zeros((1, s, n), bf), D=jnp.ones((dd,)), dt=jnp.zeros((1, s, dd), bf))  # fmt: skip
    if op == "grouped_matmul":
        from ejkernel.ops.grouped_matmul.bench import group_sizes_for

        m, k, n, g = 16384, 2048, 1536, 64
        return dict(lhs=jnp.zeros((m, k), bf), rhs=jnp.zeros((g, k, n), bf),
                    group_sizes=jnp.asarray(group_sizes_for(m, g, "multinomial")), preferred_element_type=bf)  # fmt: skip
    if op == "mean_pooling":
        return dict(
            x=jnp.zeros((262144, 4096), bf), cu_seqlens=jnp.asarray(np.linspace(0, 262144, 65).astype(np.int32))
        )
    raise ValueError(f"no benchmark shape for {op}")


def ptxas_info(ptx: str) -> tuple[int, int, int]:
    """``(registers, spill store bytes, spill load bytes)`` of one compiled kernel."""
    import triton

    arch = re.search(r"\.target (sm_\w+)", ptx).group(1)  # type: ignore[union-attr]
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    path = "/tmp/ejkernel_sm90_registers.ptx"
    with open(path, "w") as f:
        f.write(ptx)
    err = subprocess.run([ptxas, "-v", f"-arch={arch}", path, "-o", os.devnull], capture_output=True, text=True).stderr
    regs = int(re.search(r"Used (\d+) registers", err).group(1))  # type: ignore[union-attr]
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", err)
    return regs, int(spills.group(1)) if spills else 0, int(spills.group(2)) if spills else 0


def main() -> int:
    ops = ("gla_attention,lightning_attention,state_space_v2,kernel_delta_attention,gated_delta_rule,"
           "state_space_v1,grouped_matmul,mean_pooling")  # fmt: skip
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", default=ops)
    p.add_argument("--cfg", action="append", default=[], help="FIELD=VALUE of the op's Config (default: heuristic)")
    ns = p.parse_args()
    fields = {k: int(v) if v.isdigit() else v for k, v in (c.split("=", 1) for c in ns.cfg)}
    for op in ns.ops.split(","):
        impl = kernel_registry.get(op, platform="triton")
        impl.available = lambda device: None  # nothing is launched
        cfg = op_class(op).config_cls(**fields) if fields else None
        seen = set()
        for r in _trace(impl, op, bench_inputs(op), cfg, grads=True):
            key = (r["name"], tuple(sorted(r["constexprs"].items())), r["num_warps"])
            if key in seen:
                continue
            seen.add(key)
            k = compile_launch(r, 90)
            regs, st, ld = ptxas_info(k.asm["ptx"])
            by_regs = REGS_PER_SM // max(1, regs * 32 * r["num_warps"])
            smem = k.metadata.shared
            per_sm = min(by_regs, SMEM_PER_SM // smem) if smem else by_regs
            print(f"{op:24s} {r['name']:28s} warps {r['num_warps']:2d}  regs {regs:3d}  spill st/ld {st:5d}/{ld:5d} B"
                  f"  smem {smem:6d} B  programs/SM {per_sm} (registers: {by_regs})", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
