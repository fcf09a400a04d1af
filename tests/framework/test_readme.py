"""The READMEs' code blocks run as written, so a snippet cannot rot.

README.md: every block, python and shell, runs in the environment its set-up command makes (the
``.venv`` of ``bash scripts/demo.sh``): ``tests/packaging/test_readme_demo.py`` (``nox -s
packaging``) makes it and runs them there. Its python blocks run as a reader would run them: a
block that uses names it does not define continues the blocks before it in one interpreter; a
block that defines everything it uses is a program of its own, in a fresh interpreter; a block
that defines ``test_*`` functions is a test file, run with pytest. Each shell command runs there
too, but the set-up commands, which other sessions run (:data:`ELSEWHERE`). This file checks,
quickly, that the blocks parse into such programs.

The package READMEs and the migration page: their ``python`` blocks run here, in order in one
fresh interpreter, on 8 simulated CPU devices.
"""

from __future__ import annotations

import builtins
import dataclasses
import os
import re
import subprocess
import symtable
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [*sorted((ROOT / "packages").glob("*/README.md")), ROOT / "docs/pages/migrating.md"]
FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.S | re.M)

# README.md's commands that other sessions run as written, and where.
ELSEWHERE = {
    "bash scripts/demo.sh": "tests/packaging/test_readme_demo.py (it makes the environment of the rest)",
    "ejkernel demo": "bash scripts/demo.sh ends with it",
    "bash scripts/test.sh": ".ci/run (CI itself)",
    "uv sync --extra xla": "tests/packaging/test_wheels.py",
    "uv sync --extra gpu": "tests/packaging/test_wheels.py (resolved)",
    "uv sync --extra tpu": "tests/packaging/test_wheels.py (resolved)",
    "bash scripts/wheelhouse.sh": "tests/packaging/test_wheels.py",
    'pip install --find-links dist "ejkernel-core[xla]"': "tests/packaging/test_wheels.py",
    'pip install --find-links dist "ejkernel-core[gpu]"': "tests/packaging/test_wheels.py (resolved)",
    'pip install --find-links dist "ejkernel-core[xla,triton,cuda]" "jax[cuda12]"': "tests/packaging/test_wheels.py (resolved)",
}


def fenced(path: Path, lang: str) -> list[str]:
    """The code of the ``lang`` blocks of ``path``, dedented (blocks may sit in a list item)."""
    return [textwrap.dedent(m.group(3)) for m in FENCE.finditer(path.read_text()) if m.group(2) == lang]


def blocks(path: Path) -> list[str]:
    return fenced(path, "python")


def free_names(code: str) -> set[str]:
    """Names ``code`` reads without binding them (builtins aside), in any of its scopes."""
    top = symtable.symtable(code, "<block>", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    free: set[str] = set()

    def walk(table: symtable.SymbolTable) -> None:
        for s in table.get_symbols():
            if s.is_referenced() and (s.is_global() or table is top) and s.get_name() not in bound:
                free.add(s.get_name())
        for child in table.get_children():
            walk(child)

    walk(top)
    return free - set(dir(builtins))


@dataclasses.dataclass(frozen=True)
class Program:
    """Blocks a reader runs together: ``test_file`` ones with pytest, the others with python."""

    code: str
    blocks: int
    test_file: bool

    def __str__(self) -> str:
        first = self.code.splitlines()[1].strip()
        return f"{'test file' if self.test_file else 'program'} from {first[:40]!r}"


def programs(path: Path) -> list[Program]:
    out: list[Program] = []
    for i, code in enumerate(blocks(path)):
        tests = re.search(r"^def test_", code, re.M) is not None
        text = f"# --- block {i}\n{code}"
        if free_names(code) and out and not tests and not out[-1].test_file:
            last = out.pop()
            out.append(Program(f"{last.code}\n\n{text}", last.blocks + 1, False))
        else:
            out.append(Program(text, 1, tests))
    return out


def commands(path: Path) -> list[str]:
    """The shell commands of the ``bash`` blocks, one per line, without their comments."""
    lines = (re.sub(r"\s+#.*$", "", line).strip() for b in fenced(path, "bash") for line in b.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def test_the_fence_pattern_finds_the_blocks():
    assert len(blocks(README)) >= 4
    assert blocks(ROOT / "packages/ejkernel-core/README.md"), "the indented 'Adding an op' block"
    assert "ejkernel info" in commands(README)


def test_the_readme_blocks_are_programs_a_reader_can_run():
    progs = programs(README)
    for prog in progs:
        compile(prog.code, str(prog), "exec")
        if not prog.test_file:
            assert not free_names(prog.code), f"{prog} uses names no block before it defines"
    assert sum(p.blocks for p in progs) == len(blocks(README))
    assert [p.test_file for p in progs].count(True) == 1  # the backend example of "Writing a backend"
    # A block that continues: the mesh example uses the arrays of the one before it.
    assert any(p.blocks > 1 for p in progs)
    assert free_names("x = 1\nf = lambda: x + y\n") == {"y"}


def test_what_runs_elsewhere_is_in_the_readme():
    from tests.packaging.test_wheels import PIP_CUDA12, PIP_GPU, PIP_XLA, UV_SYNC, WHEELHOUSE

    cmds = commands(README)
    assert set(ELSEWHERE) <= set(cmds), set(ELSEWHERE) - set(cmds)
    tested = {*UV_SYNC.values(), WHEELHOUSE, PIP_XLA, PIP_GPU, PIP_CUDA12}
    assert {c for c, where in ELSEWHERE.items() if "test_wheels" in where} == tested
    assert "scripts/test.sh" in (ROOT / ".ci/run").read_text()
    assert "ejkernel demo" in (ROOT / "scripts/demo.sh").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_page_python_blocks_run(page, tmp_path):
    if "pallas" in page.parent.name:
        pytest.importorskip("ejkernel_pallas")
    script = "\n\n".join(f"# --- block {i}\n{b}" for i, b in enumerate(blocks(page)))
    (tmp_path / "page.py").write_text(script)
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
        "JAX_PLATFORMS": "cpu",
        "EJKERNEL_PERSISTENT_CACHE": "0",
    }
    r = subprocess.run(
        [sys.executable, str(tmp_path / "page.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, f"{page.name} blocks failed:\n{r.stderr[-4000:]}"
