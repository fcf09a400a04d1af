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
import time
from pathlib import Path

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("EJKERNEL_CACHE_DIR", tempfile.mkdtemp(prefix="ejkernel-test-cache-"))

import collections
import functools

import pytest

# The quick suite (``--quick``, the README's test command): the tests under tests/ and the Pallas
# package's own, without these markers, and of each conformance matrix the first case of each
# test x implementation x config. ``--after-quick`` runs what ``--quick`` leaves out (CI runs both,
# the quick suite first); with ``--sample=N`` it keeps only the quick suite's complement within the
# N-case sample (the ``tests`` session's default: noxfile.py), so quick + after-quick is the sample.
QUICK_SKIPS = ("slow", "distributed", "interpret")
QUICK_SAMPLE = 1
_TESTS = Path(__file__).resolve().parent


def pytest_addoption(parser):
    parser.addoption(
        "--sample",
        type=int,
        default=None,
        metavar="N",
        help="run N conformance cases of each test x implementation x config, spread over its case list from "
        f"the first to the last (0: every case; --quick takes {QUICK_SAMPLE}: the first)",
    )
    group = parser.getgroup("ejkernel")
    group.addoption("--quick", action="store_true", help="the quick suite (tests/conftest.py says what it holds)")
    group.addoption("--after-quick", action="store_true", help="every selected test that --quick leaves out")


# A run bounded by a time limit (the GPU suites: benchmarks/h200/gpu_suites.sh) sets
# EJKERNEL_TEST_DEADLINE (Unix seconds): tests not started by then are skipped, so the session ends
# on its own with every failure's traceback printed, instead of being killed before its summary.
_DEADLINE = float(os.environ.get("EJKERNEL_TEST_DEADLINE") or "inf")


def pytest_runtest_setup(item):
    if time.time() > _DEADLINE:
        pytest.skip("not started before EJKERNEL_TEST_DEADLINE")


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


def _sample_key(item):
    """The conformance key of a parametrized item, whose cases ``--sample`` samples: (test function,
    op, implementation[, config]) for a conformance ``Param`` or an ``impl`` with a ``case``; for an
    interpreter test (marked ``interpret``) with a ``case``, its module, function and other
    parameters (op, config). ``None`` for any other item (always kept)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    param, impl = params.get("param"), params.get("impl")
    if param is not None and hasattr(param, "impl"):
        return (item.originalname, param.impl.op_name, param.impl.name, param.cfg_id)
    if hasattr(impl, "op_name") and "case" in params:
        return (item.originalname, impl.op_name, impl.name)
    if "case" in params and "interpret" in item.keywords:
        others = tuple(sorted((k, str(v)) for k, v in params.items() if k != "case"))
        return (str(item.path), item.originalname, others)
    return None


@functools.cache
def _spread(size: int, n: int) -> frozenset[int]:
    """The positions of ``n`` of ``size`` cases: the first, the last and evenly spaced between (all of
    them when ``n >= size``; ``n == 1``: the first)."""
    if n >= size:
        return frozenset(range(size))
    if n == 1:
        return frozenset({0})
    return frozenset((2 * i * (size - 1) + n - 1) // (2 * (n - 1)) for i in range(n))


def _in_sample(items, n):
    """Whether each item is among the ``n`` sampled cases of its conformance key (items without one:
    yes). Cases are ordered basic-first in each op's ``cases.py`` and features follow, so the first
    case is the basic one and a spread sample reaches the later features (masks, segments, sinks,
    ...): a sample still covers every op, implementation and config."""
    keys = [_sample_key(item) for item in items]
    sizes = collections.Counter(k for k in keys if k is not None)
    seen = collections.Counter()
    out = []
    for key in keys:
        if key is None or not n:
            out.append(True)
            continue
        out.append(seen[key] in _spread(sizes[key], n))
        seen[key] += 1
    return out


def _is_quick(item, in_sample):
    path = Path(str(item.path)).resolve()
    under = _TESTS in path.parents or _PALLAS_PACKAGE_TESTS in path.parents
    return under and in_sample and not any(m in item.keywords for m in QUICK_SKIPS)


def _select(config, items):
    """``--sample=N``, ``--quick`` and ``--after-quick``: deselect what they leave out."""
    quick, after = config.getoption("quick"), config.getoption("after_quick")
    if quick and after:
        raise pytest.UsageError("--quick and --after-quick select complementary sets: pass one")
    n = config.getoption("sample")
    if quick:
        keep_flags = [
            _is_quick(item, s)
            for item, s in zip(items, _in_sample(items, QUICK_SAMPLE if n is None else n), strict=True)
        ]
    elif after:
        # The complement of the default quick suite, within the sample (every case without --sample).
        in_quick = [_is_quick(item, s) for item, s in zip(items, _in_sample(items, QUICK_SAMPLE), strict=True)]
        keep_flags = [s and not q for s, q in zip(_in_sample(items, n or 0), in_quick, strict=True)]
    else:
        keep_flags = _in_sample(items, n or 0)
    keep = [item for item, k in zip(items, keep_flags, strict=True) if k]
    drop = [item for item, k in zip(items, keep_flags, strict=True) if not k]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collection_modifyitems(config, items):
    _select(config, items)
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
