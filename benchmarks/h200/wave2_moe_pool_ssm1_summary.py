"""The bars of issues 18 (``state_space_v1``) and 19 (``grouped_matmul``, ``mean_pooling``) from the
``ejkernel bench`` records that ``wave2_moe_pool_ssm1.sh`` writes, as one table per op plus a
verdict per bar; to ``OUT/summary.txt`` and ``OUT/summary.json``.

    python3 benchmarks/h200/wave2_moe_pool_ssm1_summary.py OUT [--impl triton]

Bars: grouped_matmul forward >= 0.7x and forward+backward >= 0.6x the dense matmul's TFLOP/s on
the 8- and 64-expert shapes (goal 0.85x); mean_pooling >= 80% of the device copy's GB/s at
(262144, 4096) bf16; state_space_v1 Triton >= 5x faster than the XLA ``lax.associative_scan``
formulation at T = 4096, d_inner = 4096, d_state = 16.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

DENSE = "dense matmul"
RAGGED = "lax.ragged_dot"
ASSOC = "xla associative_scan"


def _load(out: Path, stem: str) -> list[dict[str, Any]]:
    recs: list[dict[str, Any]] = []
    for path in sorted(out.glob(f"{stem}*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            print(f"{path.name}: unreadable ({e})")
            continue
        if isinstance(data, list):
            recs += [r for r in data if isinstance(r, dict) and "impl" in r]
    return recs


def _f(x: Any, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _by(recs: list[dict[str, Any]], label: str, impl: str) -> dict[str, Any] | None:
    return next((r for r in recs if r.get("label") == label and r.get("impl") == impl), None)


def grouped(recs: list[dict[str, Any]], impl: str, lines: list[str], verdicts: list[dict[str, Any]]) -> None:
    lines.append("grouped_matmul, bf16: TFLOP/s fwd / fwd+bwd (ratio to the dense matmul of the same FLOPs)")
    labels = list(dict.fromkeys(r["label"] for r in recs))
    for label in labels:
        mine, dense, ragged = _by(recs, label, impl), _by(recs, label, DENSE), _by(recs, label, RAGGED)
        row = [f"  {label:40s}"]
        for name, r in ((impl, mine), (RAGGED, ragged), (DENSE, dense)):
            if r is not None:
                row.append(f"{name} {_f(r.get('fwd_tflops'))} / {_f(r.get('fwdbwd_tflops'))}")
        if mine is not None:
            fwd, fb = mine.get("ratio_fwd_tflops"), mine.get("ratio_fwdbwd_tflops")
            row.append(f"ratio {_f(fwd, 2)} / {_f(fb, 2)} check {mine.get('check', '-')}")
            if int(mine.get("g", 0)) in (8, 64):  # the bar's shapes
                verdicts.append(
                    dict(op="grouped_matmul", case=label, bar="fwd >= 0.7x dense", value=fwd,
                         ok=fwd is not None and fwd >= 0.7, goal_0_85=fwd is not None and fwd >= 0.85)
                )  # fmt: skip
                verdicts.append(
                    dict(op="grouped_matmul", case=label, bar="fwd+bwd >= 0.6x dense", value=fb,
                         ok=fb is not None and fb >= 0.6, goal_0_85=fb is not None and fb >= 0.85)
                )  # fmt: skip
        lines.append("  ".join(row))


def pooling(recs: list[dict[str, Any]], impl: str, lines: list[str], verdicts: list[dict[str, Any]]) -> None:
    lines.append("mean_pooling: GB/s (fraction of the device copy's)")
    for label in dict.fromkeys(r["label"] for r in recs):
        row = [f"  {label:40s}"]
        for r in (r for r in recs if r["label"] == label):
            row.append(f"{r['impl']} {_f(r.get('gbps'), 0)} ({_f(r.get('fraction_of_peak'), 2)})")
        mine = _by(recs, label, impl)
        if mine is not None:
            row.append(f"copy {_f(mine.get('peak_gbps'), 0)} check {mine.get('check', '-')}")
            frac = mine.get("fraction_of_peak")
            if mine.get("tokens") == 262144 and mine.get("hidden") == 4096:
                verdicts.append(
                    dict(op="mean_pooling", case=label, bar=">= 0.8 of the HBM copy bandwidth", value=frac,
                         ok=frac is not None and frac >= 0.8)
                )  # fmt: skip
        lines.append("  ".join(row))


def ssm(recs: list[dict[str, Any]], impl: str, lines: list[str], verdicts: list[dict[str, Any]]) -> None:
    lines.append("state_space_v1: ms fwd / fwd+bwd (speed-up over the lax.associative_scan formulation)")
    for label in dict.fromkeys(r["label"] for r in recs):
        row = [f"  {label:40s}"]
        for r in (r for r in recs if r["label"] == label):
            row.append(f"{r['impl']} {_f(r.get('fwd_ms'), 3)} / {_f(r.get('fwdbwd_ms'), 3)}")
        mine = _by(recs, label, impl)
        if mine is not None:
            fwd, fb = mine.get("ratio_fwd_tflops"), mine.get("ratio_fwdbwd_tflops")
            row.append(f"speed-up {_f(fwd, 2)} / {_f(fb, 2)} check {mine.get('check', '-')}")
            if (mine.get("s"), mine.get("d"), mine.get("n")) == (4096, 4096, 16):
                verdicts.append(
                    dict(op="state_space_v1", case=label, bar="fwd >= 5x the associative scan", value=fwd,
                         ok=fwd is not None and fwd >= 5)
                )  # fmt: skip
                verdicts.append(
                    dict(op="state_space_v1", case=label, bar="fwd+bwd >= 5x the associative scan", value=fb,
                         ok=fb is not None and fb >= 5)
                )  # fmt: skip
        lines.append("  ".join(row))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--impl", default="triton", help="the implementation the bars are about")
    ns = p.parse_args()
    lines: list[str] = []
    verdicts: list[dict[str, Any]] = []
    for stem, fn in (("gmm_", grouped), ("mean_pooling", pooling), ("state_space_v1", ssm)):
        recs = _load(ns.out, stem)
        if recs:
            fn(recs, ns.impl, lines, verdicts)
        else:
            lines.append(f"{stem.rstrip('_')}: no records")
        lines.append("")
    failed = [r for r in recs_checks(ns.out) if str(r.get("check", "ok")).startswith("FAIL")]
    lines.append("bars:")
    for v in verdicts:
        lines.append(f"  {'PASS' if v['ok'] else 'MISS'} {v['op']} {v['case']}: {v['bar']} ({_f(v['value'], 2)})")
    lines += [f"  CHECK FAILED: {r['op']} {r['impl']} {r.get('label')}: {r['check']}" for r in failed]
    text = "\n".join(lines)
    print(text)
    (ns.out / "summary.txt").write_text(text + "\n")
    (ns.out / "summary.json").write_text(json.dumps({"bars": verdicts, "check_failures": failed}, indent=1) + "\n")


def recs_checks(out: Path) -> list[dict[str, Any]]:
    return _load(out, "gmm_") + _load(out, "mean_pooling") + _load(out, "state_space_v1")


if __name__ == "__main__":
    main()
