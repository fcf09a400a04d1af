"""Time one implementation of an op with several configs, on the cases of ``ejkernel bench <op>``.

    python benchmarks/config_sweep.py OP --impl NAME [--candidates] [--config JSON ...]
        [--dtype bfloat16] [--fwd-only] [--repeats N] [--json FILE] -- [the op's bench options]

The configs: the implementation's heuristic pick (always, as ``heuristic``), every config of its
autotuning space with ``--candidates`` (``candidate_cfgs``), and each ``--config`` (a JSON object of
the op's Config fields, nested ones too, e.g. ``'{"fwd_params": {"q_blocksize": 128}}'``; fields it
leaves out are filled from the heuristic pick, as a call's ``cfg=`` is). Each runs through the
public function (``ejkernel.<op>(..., platform=NAME, cfg=cfg)``) on the cases the op's bench options
describe, is checked against the reference and timed by ``ejkernel bench``'s clock (forward, and
forward+backward for trainable ops), beside the bench's peers. A config the implementation cannot
run (``validate_cfg``, or more shared memory than the device has) is reported and skipped.

The records are ``ejkernel bench``'s, plus ``config`` (the config's fields) and ``config_name``;
``--json`` writes them as a list (``records.py add`` files them, although sweeps usually stay out
of ``results/``). Examples (a GPU):

    python benchmarks/config_sweep.py flash_attention --impl triton --candidates --dtype bfloat16 -- \\
        --shape 2,8192,16,128 --causal both
    python benchmarks/config_sweep.py grouped_matmul --impl triton --dtype bfloat16 \\
        --config '{"block_m": 128, "block_n": 128, "block_k": 64}' -- --shape 16384,2048,1536,64
    python benchmarks/config_sweep.py page_attention --impl cuda --candidates --dtype bfloat16 -- \\
        --b 32 --h 32 --hk 8 --d 128 --block-size 16 --context 8192
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path
from typing import Any


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    own, _, bench = (argv[: argv.index("--")], "--", argv[argv.index("--") + 1 :]) if "--" in argv else (argv, "", [])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("op")
    p.add_argument("--impl", required=True, help="the implementation (e.g. triton, cuda, xla)")
    p.add_argument("--candidates", action="store_true", help="every config of the autotuning space")
    p.add_argument("--config", action="append", default=[], type=json.loads, help="a config as JSON (repeatable)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--fwd-only", action="store_true")
    p.add_argument("--no-peers", action="store_true")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--json", type=Path, default=None)
    return p.parse_args(own), bench


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args, bench_argv = parse_args(argv)

    import ejkernel  # noqa: F401  (registers the ops and the installed backends)
    from ejkernel.ops import benchmark as B
    from ejkernel.ops import bind, device_for_arrays, get_op, kernel_registry, list_ops, op_class
    from ejkernel.ops.impl import check_config

    if args.op not in list_ops():
        print(f"unknown op {args.op!r}; ops: {', '.join(list_ops())}", file=sys.stderr)
        return 2
    cls = op_class(args.op)
    desc = cls.get_bench()
    impls = {i.name: i for i in kernel_registry.implementations(args.op)}
    if desc is None or args.impl not in impls:
        print(f"{args.op}: no benchmark description or no implementation {args.impl!r} ({', '.join(impls)})")
        return 2
    impl = impls[args.impl]
    bp = argparse.ArgumentParser(prog=f"ejkernel bench {args.op}")
    desc.add_arguments(bp)
    cases = desc.cases(bp.parse_args(bench_argv), args.dtype, peers=not args.no_peers, check=True)
    command = "python benchmarks/config_sweep.py " + shlex.join(argv)

    def report(msg: str) -> None:
        print(f"config_sweep: {msg}", file=sys.stderr, flush=True)

    records: list[dict[str, Any]] = []
    for case in cases:
        bound = bind(args.op, *case.arrays, **case.options)
        device = device_for_arrays(get_op(args.op).arrays(bound))
        heuristic = impl.heuristic_cfg(bound, device)
        configs = [("heuristic", heuristic)]
        if args.candidates:
            configs += [(f"candidate {i}", c) for i, c in enumerate(impl.candidate_cfgs(bound, device))]
        for i, fields in enumerate(args.config):
            configs.append((f"config {i}", cls.config_cls.from_dict(fields).filled_from(heuristic)))
        swept = []
        for name, cfg in configs:
            cfg = dataclasses.replace(cfg, platform=impl.name)
            try:
                check_config(impl, cfg, bound, device)
            except ValueError as e:
                report(f"{name} on {case.label}: skipped: {e}")
                continue
            swept.append(
                dataclasses.replace(
                    case,
                    label=f"{case.label} [{name}]",
                    fields={**case.fields, "config_name": name, "config": cfg.tuning_fields()},
                    options={**case.options, "cfg": cfg},
                    peers=[],
                )
            )
        # The peers first, then one config at a time, each printed and filed as it ends, so a sweep
        # cut short by a time limit still leaves what it measured.
        run: list[dict[str, Any]] = []
        if case.peers:  # the peers alone, once per case
            run += B.run(args.op, [case], args.dtype, impls=["-"], backward=not args.fwd_only,
                         repeats=args.repeats, progress=report)  # fmt: skip
            _print(run, desc.metric)
        for one in swept:
            new = B.run(args.op, [one], args.dtype, impls=[impl.name], backward=not args.fwd_only,
                        repeats=args.repeats, progress=report)  # fmt: skip
            run += new
            _ratios(run, desc.ratio_peer(device.platform), desc.metric)
            _print(new, desc.metric)
            if args.json:
                B.write_json(records + run, args.json, command)
        records += run
    return 0


def _print(records: list[dict[str, Any]], metric: str) -> None:
    for r in records:
        figure = r.get("fwd_tflops") if metric == "tflops" else r.get("gbps")
        both = r.get("fwdbwd_tflops")
        ratio = r.get("ratio_fwd_tflops") if metric == "tflops" else r.get("ratio_gbps")
        print(
            f"{r['label']:<60} {r['impl']:<28} {_fmt(r.get('fwd_ms', r.get('ms')))} ms {_fmt(figure)} {_fmt(both)} "
            f"x{_fmt(ratio)} {r.get('check', '-')} {json.dumps(r.get('config'))}",
            flush=True,
        )


def _ratios(records: list[dict[str, Any]], peer: str | None, metric: str) -> None:
    """Each config's ratio to the peer of its case (the sweep labels differ from the peer's)."""
    keys = ("fwd_tflops", "fwdbwd_tflops") if metric == "tflops" else ("gbps",)
    ref = next((r for r in records if r["impl"] == peer), None)
    for r in records:
        r["peer"] = peer if ref else None
        for k in keys:
            mine, theirs = r.get(k), (ref or {}).get(k)
            r[f"ratio_{k}"] = mine / theirs if mine and theirs else None


def _fmt(x: Any) -> str:
    return f"{x:10.3f}" if isinstance(x, float) else f"{'-':>10}"


if __name__ == "__main__":
    sys.exit(main())
