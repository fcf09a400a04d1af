"""``benchmarks/`` holds tools, not a lab notebook: a bounded amount of code that reaches the kernels
through public or declared entry points only, and one record file per op and device."""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from ejkernel.ops import list_ops

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"
PACKAGES = ("ejkernel", "ejkernel_triton", "ejkernel_cuda", "ejkernel_pallas", "ejkernel_xla")
MAX_LINES = 3000
MAX_RESULTS_BYTES = 1 << 20


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _tools() -> list[Path]:
    return [p for p in sorted(BENCH.rglob("*")) if p.is_file() and RESULTS not in p.parents]


def private_imports(source: str) -> list[str]:
    """The module paths ``source`` imports that name a private module of an ejkernel package
    (a segment after the package's that starts with one underscore)."""

    def private(path: str) -> bool:
        parts = path.split(".")
        return parts[0] in PACKAGES and any(
            p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts[1:]
        )

    found = []
    for node in ast.walk(ast.parse(source)):
        paths: list[str] = []
        if isinstance(node, ast.Import):
            paths = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from pkg.mod import _kernel`` imports the module ``pkg.mod._kernel``.
            paths = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
            "import_module",
            "__import__",
        ):
            paths = [a.value for a in node.args[:1] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        found += [p for p in paths if private(p)]
    return found


def test_benchmarks_code_is_bounded():
    lines = {str(p.relative_to(ROOT)): len(p.read_text(errors="replace").splitlines()) for p in _tools()}
    assert sum(lines.values()) <= MAX_LINES, f"benchmarks/ (results/ aside) has {sum(lines.values())} lines: {lines}"


def test_benchmarks_import_no_private_backend_module():
    offenders = {str(p.relative_to(ROOT)): private_imports(p.read_text()) for p in _tools() if p.suffix == ".py"}
    offenders = {k: v for k, v in offenders.items() if v}
    assert not offenders, (
        f"benchmarks import private modules (use the op's function, a Config, kernel_registry): {offenders}"
    )


@pytest.mark.parametrize(
    "source",
    [
        "from ejkernel_triton._launch import compile_launch",
        "import ejkernel_cuda.grouped_matmul._call as C",
        "from ejkernel_triton.state_space_v1 import _call as S",
        "def f():\n    from ejkernel_pallas._kernel import k",
        "import importlib\nimportlib.import_module('ejkernel_xla._compile')",
        "from ejkernel.ops._private import x",
    ],
)
def test_private_import_check_catches(source):
    assert private_imports(source)


@pytest.mark.parametrize(
    "source",
    [
        "from ejkernel.ops import kernel_registry, run_impl",
        "from ejkernel_triton.flash_attention import heuristics",
        "from ejkernel_triton import __version__",
        "from _private_tool import x",
    ],
)
def test_private_import_check_allows(source):
    assert not private_imports(source)


def test_results_are_small():
    size = sum(p.stat().st_size for p in RESULTS.rglob("*") if p.is_file())
    assert size <= MAX_RESULTS_BYTES, f"benchmarks/results holds {size} bytes (at most {MAX_RESULTS_BYTES})"


def test_results_are_one_record_file_per_op_and_device():
    ops = set(list_ops())
    files = sorted(p for p in RESULTS.rglob("*") if p.is_file())
    assert files, "no records"
    for path in files:
        rel = path.relative_to(RESULTS)
        assert len(rel.parts) == 2 and path.suffix == ".json", f"{rel}: expected <device>/<op>.json"
        assert path.stem in ops, f"{rel}: {path.stem!r} is not a registered op"
        records = json.loads(path.read_text())
        assert isinstance(records, list) and records, f"{rel}: expected a non-empty list of records"
        assert all(isinstance(r, dict) and r.get("op") == path.stem for r in records), f"{rel}: a record of another op"
    records_py = _load(BENCH / "records.py", "bench_records")
    assert records_py.problems(RESULTS) == []


def test_records_add_replaces_the_same_case(tmp_path):
    R = _load(BENCH / "records.py", "bench_records")
    base = {"op": "mean_pooling", "device": "NVIDIA H100 80GB HBM3", "dtype": "bfloat16", "tokens": 8}
    first = tmp_path / "a.json"
    first.write_text(json.dumps([{**base, "impl": "triton", "ms": 2.0}, {**base, "impl": "xla", "ms": 9.0}]))
    second = tmp_path / "b.json"
    second.write_text(json.dumps([{**base, "impl": "triton", "ms": 1.5, "time": "later"}]))
    results = tmp_path / "results"
    assert R.add([first], "abc1234", results) == [results / "h100" / "mean_pooling.json"]
    R.add([second], "def5678", results)
    records = json.loads((results / "h100" / "mean_pooling.json").read_text())
    assert [(r["impl"], r["ms"], r["commit"]) for r in records] == [("triton", 1.5, "def5678"), ("xla", 9.0, "abc1234")]
    assert R.device_folder("NVIDIA H200") == "h200" and R.device_folder("cpu") == "cpu"


def test_records_check_finds_a_case_recorded_twice(tmp_path):
    R = _load(BENCH / "records.py", "bench_records")
    base = {"op": "mean_pooling", "device": "cpu", "impl": "xla", "tokens": 8}
    path = tmp_path / "cpu" / "mean_pooling.json"
    path.parent.mkdir()
    # Fields derived from the measurement (a roofline from the measured peak, ratios) do not make
    # another case.
    path.write_text(
        json.dumps(
            [{**base, "ms": 2.0, "roofline_ms": 1.0}, {**base, "ms": 1.0, "roofline_ms": 0.9, "ratio_gbps": 1.1}]
        )
    )
    assert R.problems(tmp_path) == [f"{path}: 1 record(s) of a case recorded twice"]


def test_docs_table_reads_the_records_and_survives_missing_fields(tmp_path):
    gen = _load(ROOT / "docs" / "gen_bench.py", "gen_bench")
    page = gen.render()
    for folder in sorted(p.name for p in RESULTS.iterdir() if p.is_dir()):
        assert f"## {folder}" in page
    assert "`grouped_matmul`" in page and "`page_attention`" in page

    (tmp_path / "h200").mkdir()
    (tmp_path / "h200" / "flash_attention.json").write_text(
        json.dumps(
            [
                {
                    "op": "flash_attention",
                    "impl": "triton",
                    "label": "s1",
                    "fwd_ms": 2.0,
                    "peer": "ref",
                    "dtype": "bf16",
                },
                {"op": "flash_attention", "impl": "ref", "label": "s1", "fwd_ms": 3.0, "dtype": "bf16"},
                {"op": "flash_attention", "impl": "triton"},
            ]
        )
    )
    (tmp_path / "h200" / "page_attention.json").write_text("{not json")
    page = gen.render(tmp_path)
    row = next(line for line in page.splitlines() if "| s1 bf16 |" in line)
    assert "| 2 ms | ref | 3 ms | 1.50 |" in row  # the ratio from the times: the peer's over ours
    assert "page_attention.json" in page.split("Unreadable record files:")[1]
