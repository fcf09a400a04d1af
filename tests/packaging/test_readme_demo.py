"""The README's main job and every one of its code blocks, as written, in the environment it makes.

``bash scripts/demo.sh`` (the README's first command) installs into ``.venv`` of a fresh copy of
the checkout and runs the demo; then the README's python programs, its backend test file (with
pytest, which must run real cases and fail on a wrong kernel) and its shell commands run with
that ``.venv`` as the active environment, on the CPU as it comes (one device, no XLA_FLAGS).
How the blocks group into programs, and which commands other sessions run: ``tests/framework/test_readme.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from ..framework.test_readme import ELSEWHERE, README, commands, programs
from .conftest import sh

pytestmark = pytest.mark.packaging

PROGRAMS = [p for p in programs(README) if not p.test_file]
TEST_FILES = [p for p in programs(README) if p.test_file]
COMMANDS = [c for c in commands(README) if c not in ELSEWHERE]
# A wrong kernel for each test file (what it must catch): the text it replaces, and the mutant.
MUTANTS = {"seqs.mean(axis=1)": "seqs.sum(axis=1)"}


@pytest.fixture(scope="module")
def demo(checkout, bare_env, tmp_path_factory) -> tuple[Path, str]:
    """``bash scripts/demo.sh`` in a fresh copy of the checkout: its ``.venv`` and its output."""
    cache = tmp_path_factory.mktemp("cache")  # never the user's real config cache
    out = sh("bash", "scripts/demo.sh", cwd=checkout, env={**bare_env, "EJKERNEL_CACHE_DIR": str(cache)}, timeout=1800)
    return checkout / ".venv", out


@pytest.fixture
def active(demo, bare_env, tmp_path) -> dict:
    """The environment of a reader who ran the set-up command and activated its ``.venv``."""
    venv, _ = demo
    e = {k: v for k, v in bare_env.items() if k != "EJKERNEL_PERSISTENT_CACHE"}
    e.update(VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{e['PATH']}")
    e["EJKERNEL_CACHE_DIR"] = str(tmp_path / "cache")
    return e


def run(cmd: list[str] | str, env: dict, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, shell=isinstance(cmd, str)
    )


def test_the_main_job_runs_the_demo(demo):
    _, out = demo
    assert "flash_attention causal GQA" in out and "page_attention" in out and "done" in out


@pytest.mark.parametrize("program", PROGRAMS, ids=str)
def test_readme_programs_run(program, active, tmp_path):
    (tmp_path / "readme.py").write_text(program.code)
    res = run(["python", "readme.py"], active, tmp_path)
    assert res.returncode == 0, f"{program}:\n{res.stderr[-4000:]}"


@pytest.mark.parametrize("test_file", TEST_FILES, ids=str)
def test_readme_test_files_run_real_cases_and_catch_a_wrong_kernel(test_file, active, tmp_path):
    (tmp_path / "test_readme_example.py").write_text(test_file.code)
    res = run(["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_readme_example.py"], active, tmp_path)
    assert res.returncode == 0, res.stdout[-4000:]
    passed = re.search(r"(\d+) passed", res.stdout)
    assert passed and int(passed.group(1)) > 0 and "skipped" not in res.stdout, res.stdout[-2000:]

    (original, mutant), *_ = [(a, b) for a, b in MUTANTS.items() if a in test_file.code]
    (tmp_path / "test_readme_example.py").write_text(test_file.code.replace(original, mutant))
    res = run(["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_readme_example.py"], active, tmp_path)
    assert res.returncode == 1 and "failed" in res.stdout, f"a wrong kernel ({mutant}) passed:\n{res.stdout[-2000:]}"


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_commands_run(command, active, tmp_path):
    res = run(command, active, tmp_path)
    assert res.returncode == 0, f"{command}:\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    if command == "ejkernel info":
        # The demo installs the XLA backend alone: the others are listed with their install commands.
        for name in ("triton", "cuda", "pallas"):
            assert re.search(rf"{name}\s.*not installed", res.stdout), res.stdout
        assert "pip install 'ejkernel-core[cuda]'" in res.stdout
