"""Every example of the spec (``../shared/spec/*.md``, ``*.rst``) that names an op of this library runs.

The examples are copied into ``tests/framework/spec_examples/<specfile>_<n>.py`` (CI runs without the
spec folder), each verbatim between the markers ``# ---- spec example`` and ``# ---- end of the
spec example ----``, except for the edits its header lists (``# edit: old => new``: only
``platform="triton"``/``"pallas"`` → ``"xla"``, or, in a ``_fixed`` variant, the one fix of a
bug of the example itself). Above the example, scaffolding defines what a fragment leaves
undefined (its header says what); below it, checks compare the results with a naive NumPy
reference (``spec_examples/_naive.py``) or with what the example's comments state.

Header lines the runner reads:

- ``# needs-op: name``: skipped while ``ejkernel.list_ops()`` lacks the op (it runs once it lands);
- ``# xfail: reason`` (+ ``# xfail-raises: Error``): an API this library does not provide, or a
  bug of the example; a strict expected failure, so the test fails once the example passes;
- ``# devices: n``: needs ``n`` devices (the suite's conftest simulates 8 CPU devices).

``spec_examples/README.md`` lists every other code block of the spec with why it is not run;
when the spec folder is present (``../shared/spec`` or ``$EJKERNEL_SPEC_DIR``) the tests also
check that each copy matches its block and that every block is accounted for.
"""

from __future__ import annotations

import os
import re
import runpy
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "tests" / "framework" / "spec_examples"
SPEC = Path(os.environ.get("EJKERNEL_SPEC_DIR", ROOT.parent / "shared" / "spec"))
BEGIN = "# ---- spec example (verbatim but for the edits above) ----\n"
END = "# ---- end of the spec example ----\n"


def header(path: Path) -> dict[str, list[str]]:
    meta: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if line.startswith("# ---- "):
            break
        m = re.match(r"# ([a-z-]+): (.*)$", line)
        if m:
            meta.setdefault(m.group(1), []).append(m.group(2))
    return meta


def example_files() -> list[Path]:
    return sorted(p for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))


def marks(path: Path) -> list[pytest.MarkDecorator]:
    meta = header(path)
    out = []
    if "xfail" in meta:
        raises = tuple(getattr(__import__("builtins"), n) for n in meta.get("xfail-raises", []))
        out.append(pytest.mark.xfail(strict=True, raises=raises or None, reason=meta["xfail"][0]))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("path", [pytest.param(p, marks=marks(p), id=p.stem) for p in example_files()])
def test_spec_example_runs(path, monkeypatch):
    import jax

    import ejkernel

    meta = header(path)
    for op in meta.get("needs-op", []):
        if op not in ejkernel.list_ops():
            pytest.skip(f"op {op!r} is not in ejkernel.list_ops() yet")
    for n in meta.get("devices", []):
        if jax.device_count() < int(n):
            pytest.skip(f"needs {n} devices (XLA_FLAGS=--xla_force_host_platform_device_count={n})")
    monkeypatch.syspath_prepend(str(EXAMPLES))  # the checks import _naive
    monkeypatch.delitem(sys.modules, "_naive", raising=False)
    runpy.run_path(str(path), run_name="__main__")


def test_every_example_file_is_well_formed():
    files = example_files()
    assert len(files) >= 20
    for p in files:
        meta, text = header(p), p.read_text()
        assert meta.get("spec") and meta.get("edit"), f"{p.name}: header needs '# spec:' and '# edit:' lines"
        assert text.count(BEGIN) == 1 and text.count(END) == 1, f"{p.name}: the example's markers"
        assert ("xfail" in meta) == ("xfail-raises" in meta), f"{p.name}: xfail needs xfail-raises"


# -- against the spec itself, when it is there ------------------------------------------------------


def spec_blocks(path: Path) -> dict[int, str]:
    """``{line of the opening fence/directive: code}`` of the python blocks of one spec file."""
    lines = path.read_text().splitlines()
    out: dict[int, str] = {}
    i = 0
    while i < len(lines):
        if re.match(r"^\s*```python\s*$", lines[i]):
            j = i + 1
            while not re.match(r"^\s*```\s*$", lines[j]):
                j += 1
            out[i + 1] = "\n".join(lines[i + 1 : j])
            i = j
        elif re.match(r"^\.\. code-block::\s*python", lines[i]):
            j = i + 1
            body = []
            while j < len(lines) and (lines[j].startswith(" ") or not lines[j].strip()):
                body.append(lines[j])
                j += 1
            out[i + 1] = textwrap.dedent("\n".join(body)).strip("\n")
            i = j - 1
        elif lines[i].lstrip().startswith(">>>"):
            out[i + 1] = lines[i]
        i += 1
    return out


needs_spec = pytest.mark.skipif(not SPEC.is_dir(), reason=f"the spec folder {SPEC} is not here (CI)")


@needs_spec
def test_copies_match_the_spec():
    for p in example_files():
        meta, text = header(p), p.read_text()
        name, line = meta["spec"][0].rsplit(":", 1)
        block = spec_blocks(SPEC / name).get(int(line))
        assert block is not None, f"{p.name}: no python block at {name}:{line}"
        for edit in meta["edit"]:
            if edit != "none":
                old, new = edit.split(" => ")
                assert old in block, f"{p.name}: edit {edit!r} does not apply"
                block = block.replace(old, new)
        copy = text.split(BEGIN, 1)[1].split(END, 1)[0]
        assert copy.rstrip("\n") == block.rstrip("\n"), f"{p.name} differs from {name}:{line}"


@needs_spec
def test_every_spec_block_is_accounted_for():
    copied = {h for p in example_files() for h in header(p)["spec"]}
    readme = (EXAMPLES / "README.md").read_text().split("\n## Excluded", 1)[1]
    excluded = set(re.findall(r"^\| `([\w.-]+\.(?:md|rst):\d+)` \|", readme, re.M))  # a table row's first cell
    for path in sorted([*SPEC.glob("*.md"), *SPEC.glob("*.rst")]):
        for line in spec_blocks(path):
            where = f"{path.name}:{line}"
            assert where in copied or where in excluded, f"{where}: neither copied nor listed as excluded"
            assert not (where in copied and where in excluded), f"{where}: both copied and excluded"
