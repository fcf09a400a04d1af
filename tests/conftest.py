"""Session setup for the cross-package suite.

Before JAX is imported: 8 simulated CPU devices (for the sharding tests; computations still run
on device 0 unless a test shards them) and a private config-cache folder, so the suite never
reads or writes the user's real cache. Both are set only if the caller has not set them.

The layout: ``tests/framework`` tests the framework itself (registry, configs, policy, caches,
validation, CLI, compatibility, READMEs); ``tests/ops/<op or family>/`` holds an op's tests
(``test_conformance.py`` for the shared matrix, the rest by what they test), selected by the
markers ``gpu``, ``tpu``, ``interpret``, ``distributed`` and ``full``; ``tests/ops/*.py`` are
the checks over every op (call modes, sharding, declared resources).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("EJKERNEL_CACHE_DIR", tempfile.mkdtemp(prefix="ejkernel-test-cache-"))

import collections

import pytest


def pytest_addoption(parser):
    parser.addoption(
        "--sample",
        type=int,
        default=0,
        metavar="N",
        help="run the first N conformance cases of each test x implementation x config (0: every case)",
    )


# The TPU interpreter turns each kernel into a large XLA CPU program (a loop over the grid with a
# host callback per memory access); compiling it dominates the Pallas interpret-mode tests, and
# LLVM's optimizations roughly double that time while buying nothing for programs that run for
# milliseconds. When only the Pallas tests run (the op folders' ``test_pallas_interpret*.py`` and
# the package's own) and the caller has not chosen an optimization level, XLA's CPU backend is
# created without them; set before the first computation creates it.
_PALLAS_INTERPRET_FLAG = "--xla_backend_optimization_level=0"
_PALLAS_PACKAGE_TESTS = Path(__file__).resolve().parents[1] / "packages" / "ejkernel-pallas" / "tests"


def _is_pallas_test(path: Path) -> bool:
    return path.name.startswith("test_pallas_interpret") or _PALLAS_PACKAGE_TESTS in (path, *path.parents)


def pytest_configure(config):
    paths = [Path(str(a).split("::")[0]).resolve() for a in config.args]
    flags = os.environ.get("XLA_FLAGS", "")
    if paths and all(map(_is_pallas_test, paths)) and "xla_backend_optimization_level" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {_PALLAS_INTERPRET_FLAG}".strip()


def _sample(config, items):
    """``--sample=N``: of the items parametrized with a conformance ``Param`` (or an ``impl`` and a
    ``case``), the first N of each test function x op x implementation x config; the others are
    deselected. Cases are ordered basic-first in each op's ``cases.py``, so a sample still covers
    every op, implementation and config."""
    n = config.getoption("sample")
    if not n:
        return
    seen = collections.Counter()
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        param, impl = params.get("param"), params.get("impl")
        if param is not None and hasattr(param, "impl"):
            key = (item.originalname, param.impl.op_name, param.impl.name, param.cfg_id)
        elif impl is not None and "case" in params:
            key = (item.originalname, impl.op_name, impl.name)
        else:
            keep.append(item)
            continue
        seen[key] += 1
        (keep if seen[key] <= n else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collection_modifyitems(config, items):
    _sample(config, items)
    try:
        import jax
    except ImportError:  # the packaging session runs without JAX in its own environment
        return
    platform = jax.default_backend()
    skip_gpu = pytest.mark.skip(reason=f"needs an NVIDIA GPU (default backend: {platform})")
    skip_tpu = pytest.mark.skip(reason=f"needs a TPU (default backend: {platform})")
    for item in items:
        if "gpu" in item.keywords and platform != "gpu":
            item.add_marker(skip_gpu)
        if "tpu" in item.keywords and platform != "tpu":
            item.add_marker(skip_tpu)


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(0)
