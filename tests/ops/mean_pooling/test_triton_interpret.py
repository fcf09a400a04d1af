"""The Triton ``mean_pooling`` kernels with their host wrappers in Triton's interpreter (CPU).

Run by ``nox -s triton_interpret`` (``TRITON_INTERPRET=1``). Every conformance case goes through
``check_impl`` on a pretend Hopper GPU (output and gradient against the float32 reference; the
tokens that do not count are NaN, and the interpreter poisons unwritten outputs with NaN), with
the heuristic's tiles and with tiny ones that cut each sequence into many items.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.ops import DeviceInfo, kernel_registry, run_impl
from ejkernel.ops.mean_pooling import MeanPoolingConfig
from ejkernel.ops.mean_pooling.cases import FULL_CASES
from ejkernel.ops.mean_pooling.reference import mean_pooling_reference
from ejkernel.testing import conformance as C

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("run with TRITON_INTERPRET=1 (nox -s triton_interpret)", allow_module_level=True)

from ejkernel_triton._launch import interpreted
from ejkernel_triton.mean_pooling import TritonMeanPooling

pytestmark = pytest.mark.interpret

OP = "mean_pooling"
GPU = DeviceInfo(platform="gpu", kind="interpreter", compute_capability=(9, 0))
IMPL = kernel_registry.get(OP, platform="triton")
CONFIGS = {
    "heuristic": None,
    "t8-d16-split16": MeanPoolingConfig(block_size=8, block_dim=16, split_size=16, num_warps=4, num_stages=1),
    "t16-d32-split48": MeanPoolingConfig(block_size=16, block_dim=32, split_size=48, num_warps=2, num_stages=2),
}
# The interpreter computes in NumPy: float16 stands in for bfloat16.
CASES = [c for c in FULL_CASES if c.dtype != "bfloat16"]


@pytest.fixture(autouse=True)
def _interpreted():
    with interpreted():
        yield


def test_the_registered_implementation():
    assert isinstance(IMPL, TritonMeanPooling)
    assert IMPL.available(GPU) is None


@pytest.mark.parametrize("cfg_id", list(CONFIGS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_conformance(case, cfg_id):
    assert C.check_impl(IMPL, case, CONFIGS[cfg_id], device=GPU) == "ok"


def test_empty_tokens_and_all_empty_sequences():
    cfg = CONFIGS["t8-d16-split16"]
    x = jnp.zeros((0, 24), jnp.float32)
    out = run_impl(IMPL, C.bind(OP, x, jnp.zeros((4,), jnp.int32)), cfg, device=GPU)
    assert out.shape == (3, 24) and bool(jnp.all(out == 0))


def test_vmap_and_grad_of_vmap():
    """jax-triton launches cannot be vmapped; the kernel callers map over the vmapped axis."""
    cfg = CONFIGS["t8-d16-split16"]
    x = jnp.asarray(np.random.default_rng(0).standard_normal((3, 21, 20)), jnp.float32)
    cu = jnp.asarray([0, 4, 4, 19], jnp.int32)

    def ours(x):
        return jnp.sum(run_impl(IMPL, C.bind(OP, x, cu), cfg, device=GPU) ** 2)

    def ref(x):
        return jnp.sum(mean_pooling_reference(x, cu) ** 2)

    np.testing.assert_allclose(np.asarray(jax.vmap(ours)(x)), np.asarray(jax.vmap(ref)(x)), rtol=1e-5)
    np.testing.assert_allclose(
        np.asarray(jax.vmap(jax.grad(ours))(x)), np.asarray(jax.vmap(jax.grad(ref))(x)), rtol=1e-5, atol=1e-6
    )
