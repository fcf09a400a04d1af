"""What the packaging tests share: a shell helper and fresh environments (uv, a copy of the checkout)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HAVE_NVCC = shutil.which("nvcc") is not None


def sh(*cmd: object, cwd: Path | None = None, env: dict | None = None, timeout: int = 900) -> str:
    res = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{cmd}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


@pytest.fixture(scope="module")
def uv() -> Path:
    """The uv binary: on PATH, or the one of the ``uv`` package (the packaging session installs it)."""
    found = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
    if not found:
        from uv import find_uv_bin  # the nox session installs uv; a missing one fails here

        found = find_uv_bin()
    return Path(found)


@pytest.fixture(scope="module")
def bare_env() -> dict:
    """A fresh shell's environment on the CPU: no outer virtual environment, source tree or
    simulated devices of the test session."""
    drop = ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH", "XLA_FLAGS")
    e = {k: v for k, v in os.environ.items() if k not in drop}
    e.update(JAX_PLATFORMS="cpu", EJKERNEL_PERSISTENT_CACHE="0", COLUMNS="200")  # COLUMNS: rich's tables unwrapped
    return e


@pytest.fixture(scope="module")
def env(uv, bare_env) -> dict:
    """``bare_env`` with this Python for uv (no managed download) and uv on PATH."""
    return {
        **bare_env,
        "UV_PYTHON": sys.executable,
        "UV_PYTHON_DOWNLOADS": "never",
        "PATH": f"{uv.parent}{os.pathsep}{bare_env.get('PATH', '')}",
    }


# --- a copy of the checkout -------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of the checkout as git would clone it (tracked and unignored files)."""
    dst = tmp_path_factory.mktemp("checkout")
    try:
        files = sh("git", "ls-files", "-co", "--exclude-standard", "-z", cwd=ROOT).split("\0")
    except (AssertionError, FileNotFoundError):  # not a git checkout: everything but outputs
        ignore = shutil.ignore_patterns(".git", ".venv*", ".nox", "dist", "build", "__pycache__", "uv.lock")
        shutil.copytree(ROOT, dst, ignore=ignore, dirs_exist_ok=True)
        return dst
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dst / f)
    return dst
