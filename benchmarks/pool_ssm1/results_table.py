"""Markdown table of an ``ejkernel bench --json`` record file (for the results READMEs).

python benchmarks/pool_ssm1/results_table.py benchmarks/results/h200/mean_pooling/mean_pooling.json
"""

from __future__ import annotations

import json
import sys


def fmt(v, digits=3):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def table(records: list[dict]) -> str:
    if records and "gbps" in records[0]:
        head = "| shape | impl | ms | GB/s | of copy | x peer | check |\n|---|---|---|---|---|---|---|"
        rows = [
            f"| {r['label']} | {r['impl']} | {fmt(r['ms'])} | {fmt(r['gbps'], 0)} | {fmt(r['fraction_of_peak'], 2)} "
            f"| {fmt(r.get('ratio_gbps'), 2)} | {r.get('check', '-')} |"
            for r in records
        ]
        peak = records[0].get("peak_gbps")
        foot = f"\n\nDevice-to-device copy measured in the same run: {peak:.0f} GB/s (read + write)." if peak else ""
    else:
        head = "| shape | impl | fwd ms | x peer | fwd+bwd ms | x peer | check |\n|---|---|---|---|---|---|---|"
        rows = [
            f"| {r['label']} | {r['impl']} | {fmt(r['fwd_ms'])} | {fmt(r.get('ratio_fwd_tflops'), 1)} "
            f"| {fmt(r.get('fwdbwd_ms'))} | {fmt(r.get('ratio_fwdbwd_tflops'), 1)} | {r.get('check', '-')} |"
            for r in records
        ]
        foot = ""
    return "\n".join([head, *rows]) + foot


if __name__ == "__main__":
    for path in sys.argv[1:]:
        with open(path) as f:
            print(table(json.load(f)))
