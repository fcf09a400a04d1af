"""Session setup for the cross-package suite.

Before JAX is imported: 8 simulated CPU devices (for the sharding tests; computations still run
on device 0 unless a test shards them) and a private config-cache folder, so the suite never
reads or writes the user's real cache. Both are set only if the caller has not set them.
"""

from __future__ import annotations

import os
import tempfile

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("EJKERNEL_CACHE_DIR", tempfile.mkdtemp(prefix="ejkernel-test-cache-"))

import pytest


def pytest_collection_modifyitems(config, items):
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
