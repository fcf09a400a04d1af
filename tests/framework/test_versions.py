"""One shared version: every distribution, the extras' pins and the installed metadata agree."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import ejkernel

ROOT = Path(__file__).resolve().parents[2]


def load(pkg: str) -> dict:
    return tomllib.loads((ROOT / "packages" / pkg / "pyproject.toml").read_text())["project"]


def test_versions_agree():
    core = load("ejkernel-core")
    version = core["version"]
    extras = core["optional-dependencies"]
    backends = (
        ("ejkernel-xla", "xla"),
        ("ejkernel-triton", "triton"),
        ("ejkernel-cuda", "cuda"),
        ("ejkernel-pallas", "tpu"),
    )
    for backend, extra in backends:
        meta = load(backend)
        assert meta["version"] == version, backend
        assert f"ejkernel-core=={version}" in meta["dependencies"], backend
        assert extras[extra][0] == f"{backend}=={version}"  # (tpu also pulls jax[tpu])
        assert f"{backend}=={version}" in extras["all"]
        try:
            installed = importlib.metadata.version(backend)
        except importlib.metadata.PackageNotFoundError:
            # Only the compiled CUDA backend may be absent (the compat session skips its build).
            assert backend == "ejkernel-cuda", f"{backend} is not installed"
            continue
        assert installed == version, backend
    assert ejkernel.__version__ == version


def test_every_extra_points_at_an_existing_distribution():
    existing = {p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists()}
    for extra, reqs in load("ejkernel-core")["optional-dependencies"].items():
        for req in reqs:
            name = req.split("==")[0].split(">=")[0].split("[")[0].strip()
            if name.startswith("ejkernel"):
                assert name in existing, f"extra {extra!r} points at {name}, which this repo does not build"
