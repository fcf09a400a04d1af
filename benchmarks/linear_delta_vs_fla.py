"""The linear-attention, delta-rule and native sparse attention ops against fla-core (PyTorch +
Triton) on the same inputs, forward and forward+backward, on one GPU.

    python benchmarks/linear_delta_vs_fla.py --op gla [--cases main,varlen,long] [--shape 4,4096,16,128]
        [--varlen 4096,1000,...] [--long-t 32768] [--impls triton,xla,fla] [--json FILE]
        [--fla-bypass-640]
    python benchmarks/linear_delta_vs_fla.py --table FILE.json     # the text table of the records

Ops and their fla-core 0.6.0 peers, on the same inputs (the JAX arrays through DLPack):

- ``gla`` ``gla_attention(q, k, v, g)`` vs ``fla.ops.gla.chunk_gla(q, k, v, g)``;
- ``lightning`` ``lightning_attention(q, k, v, layer_idx=5, num_layers=24)`` vs
  ``fla.ops.lightning_attn.chunk_lightning_attn`` (the same per-head decays);
- ``ssd`` ``state_space_v2(x, A, B, C, D, dt)`` (one group) vs ``fla.ops.simple_gla.chunk_simple_gla``
  on its linear-attention form (``q = C``, ``k = B``, ``v = x·dt``, ``g = A·dt``, scale 1) plus
  ``D·x``: fla's SSD-equivalent peer;
- ``kda`` ``kernel_delta_attention(q, k, v, beta, g, use_qk_l2norm=True)`` vs
  ``fla.ops.kda.chunk_kda(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)``;
- ``gdn`` ``gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)`` vs
  ``fla.ops.gated_delta_rule.chunk_gated_delta_rule`` (same arguments);
- ``nsa`` ``native_sparse_attention(q, k, v, g_cmp, g_slc, g_swa=, block_counts=16, block_size=64,
  window_size=512)`` vs ``fla.ops.nsa.parallel_nsa`` (same arguments; ``H`` query heads over
  ``H/16`` kv heads; ``g_swa`` is not differentiated).

Cases: ``main`` the ``--shape`` (default the issue's B=4, T=4096, H=16, D=128), ``varlen`` one
packed row of ``--varlen`` lengths (default: 7 sequences, 16384 tokens, as many as ``main``), ``long``
B=1, T=``--long-t`` (default 32768). bfloat16 by default. ``state_space_v2`` has no ``cu_seqlens``
(no ``varlen`` case).

ejkernel's implementations are timed with ``ejkernel.ops.timing.device_ms`` (the slope between two
``fori_loop`` programs; calls over 50 ms: the wall clock of synchronized calls, ``"timer": "wall"``), fla's with CUDA events around a loop of calls after warm-up (fla autotunes
on its first calls). Forward+backward differentiates every floating input (gates, beta, ``A``,
``D``, ``dt`` included) against a random cotangent of the output. The fla records carry the largest
difference of its output and of each input's gradient from ejkernel's first implementation
(relative to that implementation's largest value).

fla refuses the backward of its scalar-gated kernels (``chunk_bwd_dqkwg`` with ``g``: GDN, simple
GLA / SSD) on Hopper with Triton >= 3.4 and < 3.7.1 (fla issue #640, a miscompile); the refusal is
recorded. ``--fla-bypass-640`` then times it again with fla's guard switched off (record
``fla-bypass640``: a timing; its gradients may be wrong, as the recorded differences show).

Each record is added to the JSON list in ``--json`` the moment it is measured, so a step killed
by a timeout keeps what it finished. ejkernel's records name ``fla`` as their ``peer`` when it runs;
``python benchmarks/records.py add FILE`` files them by op and device.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

PEERS = {
    "gla": ("gla_attention", "chunk_gla"),
    "lightning": ("lightning_attention", "chunk_lightning_attn"),
    "ssd": ("state_space_v2", "chunk_simple_gla"),
    "kda": ("kernel_delta_attention", "chunk_kda"),
    "gdn": ("gated_delta_rule", "chunk_gated_delta_rule"),
    "nsa": ("native_sparse_attention", "parallel_nsa"),
}
# NSA as DeepSeek sized it (block 64, 16 selected blocks, window 512), with the query group of 16
# heads per kv head that fla's kernels require.
NSA = {"group": 16, "block_size": 64, "block_counts": 16, "window_size": 512}
DEFAULT_VARLEN = "4096,1000,3000,17,2048,5000,1223"
LIGHTNING_LAYER = {"layer_idx": 5, "num_layers": 24}
SLOW_MS = 50.0


# -- inputs -------------------------------------------------------------------------------------


def make_case(name: str, b: int, t: int, h: int, d: int, dtype: Any, lens: list[int] | None) -> dict[str, Any]:
    """``{"arrays", "opts", "names"}``: the ejkernel call's positional arrays (in order), its
    options (``cu_seqlens`` included), the arrays' names."""
    import jax.numpy as jnp

    op = PEERS[name][0]
    if name == "nsa":
        rng = np.random.default_rng(0)
        hk = max(1, h // NSA["group"])
        q = jnp.asarray(rng.standard_normal((b, t, h, d)), dtype)
        k, v = (jnp.asarray(rng.standard_normal((b, t, hk, d)), dtype) for _ in range(2))
        g_cmp, g_slc, g_swa = (jnp.asarray(rng.random((b, t, h)), dtype) for _ in range(3))
        opts = {n: NSA[n] for n in ("block_counts", "block_size", "window_size")} | {"g_swa": g_swa}
        if lens is not None:
            opts["cu_seqlens"] = jnp.asarray(np.concatenate([[0], np.cumsum(lens)]), jnp.int32)
        return {"arrays": (q, k, v, g_cmp, g_slc), "opts": opts, "names": ("q", "k", "v", "g_cmp", "g_slc")}
    if name in ("kda", "gdn"):
        from ejkernel.ops.kernel_delta_attention.bench import DeltaShape, delta_inputs

        q, k, v, beta, gate = delta_inputs(DeltaShape(b, t, h, h, d, d), dtype, per_channel=name == "kda")
        if name == "kda":
            arrays, names, opts = (q, k, v, beta, gate), ("q", "k", "v", "beta", "g"), {"use_qk_l2norm": True}
        else:
            arrays, names = (q, k, v, gate, beta), ("q", "k", "v", "g", "beta")
            opts = {"use_qk_l2norm_in_kernel": True}
    else:
        from ejkernel.ops.gla_attention.bench import LinearShape, linear_inputs

        arrays, opts = linear_inputs(op, LinearShape(b, t, h, d, d), dtype)
        names = {
            "gla": ("q", "k", "v", "g"),
            "lightning": ("q", "k", "v"),
            "ssd": ("x", "A", "B", "C", "D", "dt"),
        }[name]
        if name == "lightning":
            opts = dict(LIGHTNING_LAYER)
    if lens is not None:
        opts = {**opts, "cu_seqlens": jnp.asarray(np.concatenate([[0], np.cumsum(lens)]), jnp.int32)}
    return {"arrays": tuple(arrays), "opts": opts, "names": names}


# -- ejkernel -------------------------------------------------------------------------------------


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, tuple) else out


def time_ejkernel(name: str, case: dict[str, Any], impl: str, repeats: int) -> tuple[dict[str, Any], Any]:
    """``(record, (output, cotangent, gradients))`` of one ejkernel implementation."""
    import jax
    import jax.numpy as jnp

    import ejkernel
    from ejkernel.ops.timing import device_ms, time_callable

    op = PEERS[name][0]
    fn = getattr(ejkernel, op)
    arrays, opts = case["arrays"], case["opts"]
    rec: dict[str, Any] = {"impl": impl}
    try:
        from ejkernel.ops import default_executor, get_op

        cfg = default_executor().choose_config(get_op(op), *arrays, platform=impl, **opts)
        rec["config"] = {k: v for k, v in cfg.tuning_fields().items() if v is not None}
    except Exception as e:  # the record is still useful without it
        rec["config"] = f"? ({type(e).__name__})"

    def ms(f: Callable[..., Any], args: tuple[Any, ...]) -> float:
        # Calls over SLOW_MS: the wall clock of synchronized calls (the ~1 ms a program costs the
        # host is noise there, and device_ms's two loop programs would take minutes).
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        if (time.perf_counter() - t0) * 1e3 > SLOW_MS:
            rec["timer"] = "wall"
            return time_callable(lambda: f(*args), repeats)
        return device_ms(f, args, repeats)

    fwd = jax.jit(lambda *a: _first(fn(*a, platform=impl, **opts)))
    out = jax.block_until_ready(fwd(*arrays))
    rec["fwd_ms"] = ms(fwd, arrays)
    cot = jnp.asarray(np.random.default_rng(1).standard_normal(out.shape), out.dtype)
    argnums = tuple(range(len(arrays)))  # every input is floating (cu_seqlens is an option)
    # value_and_grad: with the loss unused XLA would drop the forward kernels whose outputs are
    # no residual (the output's), timing less than fla's forward + backward.
    grad = jax.jit(jax.value_and_grad(lambda *a: jnp.sum(fwd(*a[:-1]).astype(jnp.float32) * a[-1]), argnums=argnums))
    _, grads = jax.block_until_ready(grad(*arrays, cot))
    rec["fwdbwd_ms"] = ms(grad, (*arrays, cot))
    f32 = lambda x: np.asarray(x.astype(jnp.float32))  # noqa: E731
    return rec, (f32(out), cot, [f32(g) for g in grads])


# -- fla ------------------------------------------------------------------------------------------


def fla_call(name: str, t: list[Any], opts: dict[str, Any], cu: Any) -> tuple[Callable[[], Any], list[Any]]:
    """``(call, leaves)``: fla's output for the torch tensors ``t`` (the ejkernel arrays, in
    order) and the tensors to differentiate, aligned with ``t`` (float32 copies of the gates)."""
    if name == "gla":
        from fla.ops.gla import chunk_gla

        q, k, v, g = t
        return (lambda: chunk_gla(q, k, v, g, cu_seqlens=cu)[0]), [q, k, v, g]
    if name == "lightning":
        from fla.ops.lightning_attn import chunk_lightning_attn

        q, k, v = t
        lay = {n: opts[n] for n in ("layer_idx", "num_layers")}
        return (lambda: chunk_lightning_attn(q, k, v, **lay, cu_seqlens=cu)[0]), [q, k, v]
    if name == "ssd":
        from fla.ops.simple_gla import chunk_simple_gla

        x, A, B, C, D, dt = t
        h = x.shape[2]

        def call() -> Any:
            v = (x.float() * dt.float()[..., None]).to(x.dtype)
            g = A.float()[None, None, :] * dt.float()
            qq, kk = (z.expand(-1, -1, h, -1).contiguous() if z.shape[2] == 1 else z for z in (C, B))
            o = chunk_simple_gla(qq, kk, v, g=g, scale=1.0, cu_seqlens=cu)[0]
            return (o.float() + D.float()[:, None] * x.float()).to(x.dtype).reshape(*x.shape[:2], -1)

        return call, [x, A, B, C, D, dt]
    if name == "kda":
        from fla.ops.kda import chunk_kda

        q, k, v, beta, g = t
        g = g.float()
        return (lambda: chunk_kda(q, k, v, g, beta, use_qk_l2norm_in_kernel=True, cu_seqlens=cu)[0]), [
            q, k, v, beta, g,
        ]  # fmt: skip
    if name == "nsa":
        from fla.ops.nsa import parallel_nsa
        from torch.utils.dlpack import from_dlpack

        q, k, v, g_cmp, g_slc = t
        g_swa = from_dlpack(opts["g_swa"]).clone()
        kw = {n: NSA[n] for n in ("block_counts", "block_size", "window_size")}
        return (lambda: parallel_nsa(q, k, v, g_cmp, g_slc, g_swa, **kw, cu_seqlens=cu)), [q, k, v, g_cmp, g_slc]
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    q, k, v, g, beta = t
    g = g.float()
    return (lambda: chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True, cu_seqlens=cu)[0]), [
        q, k, v, g, beta,
    ]  # fmt: skip


def _torch_timer(repeats: int) -> Callable[[Callable[[], Any]], float]:
    import torch

    cuda = torch.cuda.is_available()

    def timed(f: Callable[[], Any]) -> float:
        for _ in range(3):  # warm-up: fla autotunes on its first calls
            f()
        if cuda:
            torch.cuda.synchronize()
        samples = []
        for _ in range(max(3, repeats // 2)):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(repeats):
                    f()
                end.record()
                torch.cuda.synchronize()
                samples.append(start.elapsed_time(end) / repeats)
            else:  # CPU (a dry run of this script)
                t0 = time.perf_counter()
                for _ in range(repeats):
                    f()
                samples.append((time.perf_counter() - t0) * 1e3 / repeats)
        return float(np.median(samples))

    return timed


def _rel(a: Any, b: Any) -> float:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if a.shape != b.shape:
        return float("nan")
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-6))


def _triton_cache_dir() -> None:
    """jax-triton 0.3.1 sets ``TRITON_CACHE_DIR=""`` when imported (ejkernel's launches set a
    directory of their own, scoped): Triton then cannot build its CUDA driver module for fla
    ("Could not create or locate cache dir"), and fla, imported after it, falls back to the CPU.
    Give Triton a directory before fla is imported: ``FLA_TRITON_CACHE_DIR`` if set, else the
    current one, else a temporary one. Triton's autotuner also keeps its results there
    (``TRITON_CACHE_AUTOTUNING=1`` unless set otherwise: ``<key>/<kernel>.autotune.json``): fla
    autotunes every kernel for minutes on a fresh machine: keep that directory from one GPU call to
    the next."""
    chosen = os.environ.get("FLA_TRITON_CACHE_DIR") or os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = chosen or os.path.join(tempfile.gettempdir(), f"triton-fla-{os.getuid()}")
    os.environ.setdefault("TRITON_CACHE_AUTOTUNING", "1")
    try:
        import triton

        triton.knobs.cache.dir = os.environ["TRITON_CACHE_DIR"]
        triton.knobs.autotuning.cache = os.environ["TRITON_CACHE_AUTOTUNING"] == "1"
    except (ImportError, AttributeError):
        pass


def time_fla(
    name: str,
    case: dict[str, Any],
    ref: Any,
    repeats: int,
    bypass_640: bool,
    partial: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """fla's records (a second one, ``fla-bypass640``, when its #640 guard refused and
    ``bypass_640``): times, and differences from ejkernel's output and gradients ``ref``.
    ``partial`` gets the forward-only record as soon as it is measured (fla autotunes its
    backward for minutes on a fresh machine: a time limit then keeps the forward)."""
    _triton_cache_dir()
    import torch
    from torch.utils.dlpack import from_dlpack

    out_ref, cot, grads_ref = ref
    t = [from_dlpack(a).clone() for a in case["arrays"]]
    cu = case["opts"].get("cu_seqlens")
    cu_t = None if cu is None else from_dlpack(cu).clone().long()
    call, leaves = fla_call(name, t, case["opts"], cu_t)
    do = from_dlpack(cot).clone()
    timed = _torch_timer(repeats)
    rec: dict[str, Any] = {"impl": "fla", "peer": PEERS[name][1]}
    with torch.no_grad():
        out = call()
        rec["fwd_ms"] = timed(call)
    rec["out_rel_diff"] = _rel(out.float().cpu().numpy(), out_ref)
    if partial is not None:
        partial({**rec, "note": "forward only (forward+backward not measured yet)"})
    for x in leaves:
        x.requires_grad_(True)

    def fwdbwd() -> None:
        for x in leaves:
            x.grad = None
        call().backward(do)

    def grads_diff() -> dict[str, float]:
        fwdbwd()
        return {
            n: (_rel(x.grad.float().cpu().numpy(), g) if x.grad is not None else float("nan"))
            for n, x, g in zip(case["names"], leaves, grads_ref, strict=True)
        }

    records = [rec]
    try:
        rec["fwdbwd_ms"] = timed(fwdbwd)
        rec["grad_rel_diff"] = grads_diff()
    except Exception as e:  # fla issue #640: refused on Hopper with Triton 3.4 to 3.7.0
        rec["fwdbwd_ms"] = None
        rec["fwdbwd_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:240]}"
        if bypass_640 and "640" in str(e):
            import fla.ops.common.chunk_o as chunk_o

            chunk_o.TRITON_ABOVE_3_7_1 = True  # the guard's flag: fla's kernel runs as on Triton 3.7.1
            by: dict[str, Any] = {"impl": "fla-bypass640", "peer": PEERS[name][1], "fwd_ms": rec["fwd_ms"]}
            by["note"] = "fla's #640 guard switched off: a timing; its gradients may be wrong"
            try:
                by["fwdbwd_ms"] = timed(fwdbwd)
                by["grad_rel_diff"] = grads_diff()
            except Exception as e2:
                by["fwdbwd_ms"] = None
                by["fwdbwd_error"] = f"{type(e2).__name__}: {str(e2).splitlines()[0][:240]}"
            records.append(by)
    return records


# -- driver -------------------------------------------------------------------------------------


def _emit(record: dict[str, Any], path: str | None) -> None:
    print(json.dumps(record), flush=True)
    if path:
        records = _read(path) if os.path.exists(path) else []
        records.append(record)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps(records, indent=1) + "\n")
        os.replace(tmp, path)


def _read(path: str) -> list[dict[str, Any]]:
    """The records of a JSON list (or of a JSONL file, as earlier runs wrote)."""
    with open(path) as f:
        text = f.read()
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def run(ns: argparse.Namespace) -> int:
    import jax
    import jax.numpy as jnp

    import ejkernel

    b, t, h, d = (int(x) for x in ns.shape.split(","))
    lens = [int(x) for x in ns.varlen.split(",")]
    cases = {
        "main": (b, t, None, f"b{b} t{t} h{h} d{d}"),
        "varlen": (1, sum(lens), lens, f"varlen {len(lens)} seqs {sum(lens)} tokens h{h} d{d}"),
        "long": (1, ns.long_t, None, f"b1 t{ns.long_t} h{h} d{d}"),
    }
    dtype = jnp.dtype(ns.dtype)
    device = str(jax.devices()[0].device_kind)
    command = "python " + shlex.join(sys.argv)
    for which in ns.cases.split(","):
        if which == "varlen" and ns.op == "ssd":
            continue  # state_space_v2 has no cu_seqlens
        cb, ct, clens, label = cases[which]
        case = make_case(ns.op, cb, ct, h, d, dtype, clens)
        base = {"op": PEERS[ns.op][0], "case": which, "shape": label, "dtype": ns.dtype, "device": device,
                "jax": jax.__version__, "ejkernel": ejkernel.__version__, "command": command}  # fmt: skip
        peer = {"peer": "fla"} if "fla" in ns.impls.split(",") else {}
        ref = None
        for impl in ns.impls.split(","):
            if impl == "fla":
                continue
            t0 = time.time()
            try:
                rec, result = time_ejkernel(ns.op, case, impl, ns.repeats)
                ref = ref or result
            except Exception as e:
                rec = {"impl": impl, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
            rec["wall_s"] = round(time.time() - t0, 1)
            _emit({**base, **peer, **rec}, ns.json)
        if "fla" in ns.impls.split(",") and ref is not None:
            t0 = time.time()
            try:
                recs = time_fla(
                    ns.op, case, ref, ns.repeats, ns.fla_bypass_640,
                    partial=lambda r, base=base, t0=t0: _emit({**base, **r, "wall_s": round(time.time() - t0, 1)}, ns.json),
                )  # fmt: skip
            except Exception as e:
                recs = [{"impl": "fla", "peer": PEERS[ns.op][1], "error": f"{type(e).__name__}: {str(e)[:300]}"}]
            for rec in recs:
                rec["wall_s"] = round(time.time() - t0, 1)
                _emit({**base, **rec}, ns.json)
        del case, ref
    return 0


def table(path: str) -> str:
    """The records of a JSON file as a text table: one row per (op, case), ejkernel's
    implementations and fla side by side, and Triton's fwd+bwd time over fla's."""
    rows: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in _read(path):
        rows.setdefault((r["op"], r["shape"]), {})[r["impl"]] = r
    impls = ["triton", "xla", "fla", "fla-bypass640"]

    def cell(r: dict[str, Any] | None, key: str) -> str:
        if r is None:
            return "-"
        if r.get("error"):
            return "ERR"
        v = r.get(key)
        return "ERR" if v is None and r.get(key.replace("_ms", "_error")) else ("-" if v is None else f"{v:.3f}")

    head = f"{'op':<24}{'case':<40}" + "".join(f"{i + ' fwd':>20}{i + ' f+b':>20}" for i in impls)
    lines = [head + f"{'triton/fla f+b':>16}", "-" * (len(head) + 16)]
    notes = []
    for (op, shape), recs in rows.items():
        line = f"{op:<24}{shape:<40}" + "".join(
            f"{cell(recs.get(i), 'fwd_ms'):>20}{cell(recs.get(i), 'fwdbwd_ms'):>20}" for i in impls
        )
        tri = (recs.get("triton") or {}).get("fwdbwd_ms")
        peer = (recs.get("fla") or {}).get("fwdbwd_ms") or (recs.get("fla-bypass640") or {}).get("fwdbwd_ms")
        line += f"{(tri / peer) if tri and peer else float('nan'):>16.2f}"
        lines.append(line)
        for i, r in recs.items():
            for key in ("error", "fwdbwd_error"):
                if r.get(key):
                    notes.append(f"{op} / {shape} / {i}: {r[key]}")
            if r.get("grad_rel_diff"):
                diffs = ", ".join(f"d{n} {v:.2g}" for n, v in r["grad_rel_diff"].items())
                notes.append(
                    f"{op} / {shape} / {i} vs ejkernel: out {r.get('out_rel_diff', float('nan')):.2g}, {diffs}"
                )
    lines.append("")
    lines.append("times in ms (bfloat16 unless noted); f+b = forward+backward (gradients of every input)")
    return "\n".join(lines + notes) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", choices=sorted(PEERS))
    p.add_argument("--cases", default="main", help="comma list of main, varlen, long")
    p.add_argument("--shape", default="4,4096,16,128", help="B,T,H,D of the main case")
    p.add_argument("--varlen", default=DEFAULT_VARLEN, help="packed sequence lengths of the varlen case")
    p.add_argument("--long-t", type=int, default=32768, help="sequence length of the long case (batch 1)")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--impls", default="triton,xla,fla")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None, help="add each record to the JSON list in this file as it is measured")
    p.add_argument("--fla-bypass-640", action="store_true", help="time fla's refused backward without its guard")
    p.add_argument("--table", default=None, help="print the text table of this JSON file and exit")
    ns = p.parse_args(argv)
    if ns.table:
        sys.stdout.write(table(ns.table))
        return 0
    if ns.op is None:
        p.error("--op is required")
    return run(ns)


if __name__ == "__main__":
    sys.exit(main())
