"""Compile every Triton kernel launch of ``grouped_matmul``, ``mean_pooling`` and
``state_space_v1`` for sm_90 on a machine without a GPU (Triton ships ptxas): each conformance case
(``--full``: the full matrix) under each config the suite runs (heuristic for an H200, the
``test_configs``), forward and gradient of every differentiable input, plus the autotune
candidates at the benchmark shapes. The interpreter accepts code that real Triton rejects
(non-power-of-two ``tl.arange``, type mismatches in loops, shared memory over the limit): this
catches those before a GPU run. Prints one line per (op, config, case) and a summary; exits 1 on
any failure.

    python benchmarks/pool_ssm1/compile_cases_sm90.py [--ops grouped_matmul,mean_pooling,state_space_v1] [--full]

Run it in an environment with ``triton`` and WITHOUT ``TRITON_INTERPRET=1`` (e.g. the interpreter
venv with that variable unset).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from typing import Any

import jax.numpy as jnp
import numpy as np

if os.environ.get("TRITON_INTERPRET") == "1":
    sys.exit("unset TRITON_INTERPRET: this script compiles the kernels for sm_90")

import ejkernel  # noqa: F401  (loads the ops)
from ejkernel.ops import DeviceInfo, kernel_registry
from ejkernel.ops.executor import bind
from ejkernel.ops.op import op_class
from ejkernel_triton._compile import traced_launches
from ejkernel_triton._launch import compile_launch

GPU = DeviceInfo(platform="gpu", kind="NVIDIA H200", compute_capability=(9, 0))
SMEM_LIMIT = 227 * 1024  # Hopper, per block
OPS = ("grouped_matmul", "mean_pooling", "state_space_v1")
_DONE: dict[tuple, Any] = {}


def _compile_records(records: list[dict[str, Any]]) -> list[str]:
    """Compile each distinct launch once; returns problems (empty: all compiled and fit)."""
    problems = []
    for r in records:
        key = (r["kernel"].fn if hasattr(r["kernel"], "fn") else r["kernel"], tuple(r["args"]),
               tuple(sorted(r["constexprs"].items())), r["num_warps"], r["num_stages"])  # fmt: skip
        if key not in _DONE:
            try:
                k = compile_launch(r, 90)
                _DONE[key] = (k.metadata.shared, k.n_spills if hasattr(k, "n_spills") else None)
            except Exception as e:  # reported
                _DONE[key] = e
        res = _DONE[key]
        if isinstance(res, Exception):
            problems.append(f"{r['name']} {r['constexprs']}: {type(res).__name__}: {str(res).strip()[:400]}")
        elif res[0] > SMEM_LIMIT:
            problems.append(f"{r['name']} {r['constexprs']}: shared memory {res[0]} B > {SMEM_LIMIT}")
    return problems


def _trace(impl: Any, op: str, kw: dict[str, Any], cfg: Any, grads: bool) -> list[dict[str, Any]]:
    """The launches of ``impl`` on ``kw`` (forward, and with ``grads`` the VJP)."""
    return traced_launches(impl, op, kw, cfg, GPU, grads=grads)


def _bench_inputs(op: str) -> list[tuple[str, dict[str, Any]]]:
    """Abstract-sized inputs of the benchmark shapes (zeros: only shapes matter here)."""
    bf = jnp.bfloat16
    if op == "grouped_matmul":
        from ejkernel.ops.grouped_matmul.bench import group_sizes_for

        out = []
        for m, k, n, g, dist in ((16384, 4096, 2048, 8, "multinomial"), (16384, 2048, 1536, 64, "multinomial"),
                                 (65536, 4096, 1408, 64, "multinomial"), (8192, 7168, 2048, 256, "zipf")):  # fmt: skip
            kw = dict(lhs=jnp.zeros((m, k), bf), rhs=jnp.zeros((g, k, n), bf),
                      group_sizes=jnp.asarray(group_sizes_for(m, g, dist)), preferred_element_type=bf)  # fmt: skip
            out.append((f"m{m} k{k} n{n} g{g}", kw))
        return out
    if op == "mean_pooling":
        cu = jnp.asarray(np.linspace(0, 262144, 65).astype(np.int32))
        return [("262144x4096 seqs64", dict(x=jnp.zeros((262144, 4096), bf), cu_seqlens=cu))]
    b, s, d, n = 1, 4096, 4096, 16
    kw = dict(hidden_states=jnp.zeros((b, s, d), bf), A=-jnp.ones((d, n)), B=jnp.zeros((b, s, n), bf),
              C=jnp.zeros((b, s, n), bf), D=jnp.ones((d,)), dt=jnp.zeros((b, s, d), bf))  # fmt: skip
    return [("b1 s4096 d4096 n16", kw)]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--full", action="store_true", help="the full case matrix (every dtype twin)")
    p.add_argument("--no-candidates", action="store_true", help="skip the autotune candidates at bench shapes")
    ns = p.parse_args()
    failures, count, t0 = [], 0, time.time()
    for op in ns.ops.split(","):
        impl = kernel_registry.get(op, platform="triton")
        impl.available = lambda device: None  # nothing is launched: no jax-triton needed
        cases = op_class(op).get_cases(full=ns.full)
        cfgs: list[tuple[str, Any]] = [("heuristic", None), *impl.test_configs.items()]
        for cfg_id, cfg in cfgs:
            for case in cases:
                label = f"{op} {cfg_id} {case.name}"
                try:
                    recs = _trace(impl, op, case.inputs(0), cfg, grads=True)
                    problems = _compile_records(recs)
                except Exception as e:
                    problems = [f"trace: {type(e).__name__}: {e}"]
                    traceback.print_exc()
                count += 1
                print(f"{'FAIL' if problems else 'ok  '} {label} ({len(_DONE)} kernels so far)", flush=True)
                for pr in problems:
                    print(f"      {pr}", flush=True)
                    failures.append(f"{label}: {pr}")
        if ns.no_candidates:
            continue
        for shape_label, kw in _bench_inputs(op):
            args = bind(op, **kw)
            for cfg in impl.candidate_cfgs(args, GPU):
                label = f"{op} candidate {cfg.tuning_fields()} {shape_label}"
                try:
                    impl.validate_cfg(cfg, args, GPU)
                except ValueError as e:
                    print(f"skip {label}: {e}", flush=True)
                    continue
                try:
                    problems = _compile_records(_trace(impl, op, kw, cfg, grads=True))
                except Exception as e:
                    problems = [f"trace: {type(e).__name__}: {e}"]
                count += 1
                print(f"{'FAIL' if problems else 'ok  '} {label}", flush=True)
                for pr in problems:
                    print(f"      {pr}", flush=True)
                    failures.append(f"{label}: {pr}")
    print(f"\n{count} traced, {len(_DONE)} distinct kernels compiled for sm_90, {len(failures)} failures, "
          f"{time.time() - t0:.0f} s")  # fmt: skip
    for f in failures:
        print("FAILED", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
