"""The Triton delta-rule kernels (``kernel_delta_attention``, ``gated_delta_rule``) with their host
wrappers, in Triton's interpreter on the CPU (``TRITON_INTERPRET=1``; ``nox -s triton_interpret``).

Every conformance case of both ops (outputs, final states and the gradients of every input) on
a pretend Hopper GPU with 16-token chunks and 16 value columns per program (several chunks and
value blocks per head), through the shared suite; bfloat16 cases run in float16 (the
interpreter's ``tl.dot`` is wrong on bfloat16).
"""

from __future__ import annotations

import os

import pytest

from ejkernel.ops import DeviceInfo, kernel_registry
from ejkernel.ops.gated_delta_rule import GatedDeltaRuleConfig
from ejkernel.ops.gated_delta_rule.cases import CASES as GDN_CASES
from ejkernel.ops.gated_delta_rule.cases import FULL_CASES as GDN_FULL
from ejkernel.ops.kernel_delta_attention import KernelDeltaAttentionConfig
from ejkernel.ops.kernel_delta_attention.cases import CASES as KDA_CASES
from ejkernel.ops.kernel_delta_attention.cases import FULL_CASES as KDA_FULL
from ejkernel.testing import conformance as C

if os.environ.get("TRITON_INTERPRET") != "1":  # the kernels must be decorated in interpreter mode
    pytest.skip("run with TRITON_INTERPRET=1 (nox -s triton_interpret)", allow_module_level=True)

import triton
import triton.language as tl

from ejkernel_triton._delta._intra import _unit_lower_inverse
from ejkernel_triton._launch import interpreted

pytestmark = pytest.mark.interpret

GPU = DeviceInfo(platform="gpu", kind="interpreter", compute_capability=(9, 0))
CONFIGS = {
    "kernel_delta_attention": KernelDeltaAttentionConfig(chunk_size=16, chunked=True, block_v=16, num_warps=4),
    "gated_delta_rule": GatedDeltaRuleConfig(chunk_size=16, chunked=True, block_v=16, num_warps=4),
}


def _f16(c):
    return c.with_dtype("float16") if c.dtype == "bfloat16" else c


PARAMS = [("kernel_delta_attention", _f16(c)) for c in KDA_CASES] + [("gated_delta_rule", _f16(c)) for c in GDN_CASES]
# the full matrix's richest varlen batch (empty and one-token sequences, sequences across chunks,
# GVA): the state walks run one program per sequence
PARAMS += [("kernel_delta_attention", c) for c in KDA_FULL if c.name == "varlen-many"]
PARAMS += [("gated_delta_rule", c) for c in GDN_FULL if c.name == "varlen-many"]


@pytest.fixture(autouse=True)
def _interpreted():
    with interpreted():
        yield


@pytest.mark.parametrize(("op", "case"), PARAMS, ids=lambda x: x if isinstance(x, str) else x.name)
def test_conformance(op, case):
    impl = kernel_registry.get(op, platform="triton")
    assert C.check_impl(impl, case, CONFIGS[op], device=GPU) == "ok"


@triton.jit
def _inverse_kernel(a, m, C: tl.constexpr):
    o = tl.arange(0, C)
    p = o[:, None] * C + o[None, :]
    tl.store(m + p, _unit_lower_inverse(tl.load(a + p), o, C, "ieee"))


@pytest.mark.parametrize("size", [16, 32, 64, 128])
def test_unit_lower_inverse_matches_numpy(size):
    """``_intra._unit_lower_inverse`` (diagonal blocks by forward substitution, then the
    nilpotent product over the blocks below them) against ``numpy.linalg.inv`` in float64, for
    ``A = tril(diag(β) K Kᵀ, −1)`` of unit keys: one block (16), one merge (32), one doubling (64),
    two (128). Fails with a doubling or the block-diagonal step dropped."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from ejkernel_triton._launch import launch

    rng = np.random.default_rng(size)
    k = rng.standard_normal((size, 8))
    k /= np.linalg.norm(k, axis=1, keepdims=True)
    beta = rng.uniform(0.2, 1.0, size)
    a = np.tril(beta[:, None] * (k @ k.T), -1)
    (m,) = launch(
        _inverse_kernel, jnp.asarray(a, jnp.float32), out_shape=[jax.ShapeDtypeStruct((size, size), jnp.float32)],
        grid=(1,), num_warps=4, num_stages=1, C=size,
    )  # fmt: skip
    ref = np.linalg.inv(np.eye(size) + a)
    assert np.abs(np.tril(ref, -17)).max() > 1e-3 or size == 16  # the blocks below the diagonal matter
    np.testing.assert_allclose(np.asarray(m), ref, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize(
    ("gate", "chunk", "dtype"),
    [(g, c, "float32") for g in ("scalar", "none", "channel") for c in (16, 32, 64)]
    + [("scalar", 64, "float16"), ("channel", 32, "float16")],
)
def test_intra_chunk_kernels_match_the_jax_transform(gate, chunk, dtype):
    """The Triton intra-chunk WY transform (``_delta._call.triton_intra_chunk``) against
    ``delta_rule_math.intra_chunk`` in float32: every output (W, U, Aqk, Qg, Kg, glast) and the
    VJP of a random cotangent into q, k, v, β and the gate; odd head dims (masked tiles), a
    padded last chunk, decays up to ~3 nats per token (chunk totals past e^-40; a per-channel
    gate's steep head takes the column steps inside its sub-blocks, the mild one the factored
    product), β in (0, 1).
    ``float16``: the kernels as 16-bit inputs run them (q, k, v chunked in float16, TF32 products
    and inverse, outputs stored and cotangents read in float16), at float16 tolerances."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from ejkernel.ops.families import delta_rule_math as M
    from ejkernel_triton._delta import _call as D

    rng = np.random.default_rng(3)
    # per-channel gates: two key tiles of the _pc kernels (PC_BLOCK_K = 32), the second masked
    b, t, h, dk, dv = 2, 2 * chunk + 5, 2, 40 if gate == "channel" else 20, 12
    q = jnp.asarray(rng.standard_normal((b, t, h, dk)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((b, t, h, dk)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((b, t, h, dv)), jnp.float32)
    beta = jnp.asarray(1 / (1 + np.exp(-rng.standard_normal((b, t, h)))), jnp.float32)
    g = None
    if gate == "scalar":
        g = jnp.asarray(-np.abs(rng.standard_normal((b, t, h, 1))) * np.linspace(0.05, 3.0, h)[:, None], jnp.float32)
    elif gate == "channel":  # per key channel (KDA): the first head mild (factored), the second steep
        scale = np.asarray([0.1, 6.0])[:, None]  # chunks past 30 nats: column by column
        g = jnp.asarray(-np.abs(rng.standard_normal((b, t, h, dk))) * scale, jnp.float32)

    def chunks(q, k, v, beta, g, dtype=jnp.float32):
        return M.to_chunks(q, k, v, beta, g, None, None, scale=dk**-0.5, use_qk_l2norm=True, chunk=chunk, dtype=dtype)

    args = (q, k, v, beta) + ((g,) if g is not None else ())

    def run(fn, dtype=jnp.float32):
        def f(q, k, v, beta, *rest):
            c = chunks(q, k, v, beta, rest[0] if rest else None, dtype)
            return tuple(fn(c))

        out, vjp = jax.vjp(f, *args)
        cot = tuple(jnp.asarray(rng.standard_normal(o.shape), jnp.float32).astype(o.dtype) for o in out)
        return out, vjp(cot)

    assert D.intra_chunk_supported(chunk) and not any(D.intra_chunk_supported(c) for c in (8, 48, 512))
    # float32: exact products; float16: TF32 products and 16-bit outputs (a few 1e-3 relative)
    tol_out, tol_grad, rtol = (2e-5, 5e-5, 1e-4) if dtype == "float32" else (4e-3, 1e-2, 1e-2)
    rng_state = rng.bit_generator.state
    # q, k, v chunked at the op's width, as the op runs the kernels (converted on load)
    out_t, grads_t = run(lambda c: D.triton_intra_chunk(c, jnp.dtype(dtype)), jnp.dtype(dtype))
    rng.bit_generator.state = rng_state  # the same cotangents
    out_r, grads_r = run(lambda c: M.intra_chunk(c))
    for name, a, r in zip(M.Intra._fields, out_t, out_r, strict=True):
        a, r = np.asarray(a, np.float32), np.asarray(r)
        np.testing.assert_allclose(a, r, atol=tol_out * max(1.0, float(np.abs(r).max())), err_msg=name)
    for a, r in zip(grads_t, grads_r, strict=True):
        r = np.asarray(r)
        assert np.abs(r).max() > 0
        np.testing.assert_allclose(np.asarray(a), r, atol=tol_grad * np.abs(r).max(), rtol=rtol)


@pytest.mark.parametrize("size", [16, 32, 64, 128, 256])
def test_solve_kernel_matches_numpy(size):
    """``_intra.delta_intra_solve_kernel`` (a per-channel gate's inverse, from the stored ``S`` and
    β: the diagonal blocks side by side, written to ``M`` and read back for the products that join
    them) against ``numpy.linalg.inv`` in float64, three chunks (each program's rows and columns
    offset), ``A = diag(β) S`` of unit keys; 256: three doublings, whose float32 products drift
    to ~1e-4 of the largest entry (as :func:`_unit_lower_inverse`'s do)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from ejkernel_triton._delta._intra import delta_intra_solve_kernel
    from ejkernel_triton._launch import launch

    rng = np.random.default_rng(size)
    n = 3
    k = rng.standard_normal((n, size, 8))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    s = np.tril(k @ k.transpose(0, 2, 1), -1)
    beta = rng.uniform(0.2, 1.0, (n, size))
    (m,) = launch(
        delta_intra_solve_kernel, jnp.asarray(s, jnp.float32), jnp.asarray(beta, jnp.float32),
        out_shape=[jax.ShapeDtypeStruct((n, size, size), jnp.float32)],
        grid=(n,), num_warps=4, num_stages=1, C=size, IPREC="ieee",
    )  # fmt: skip
    ref = np.linalg.inv(np.eye(size) + beta[..., None] * s)
    assert np.abs(np.tril(ref, -17)).max() > 1e-3 or size == 16  # the blocks below the diagonal matter
    np.testing.assert_allclose(np.asarray(m), ref, atol=(1e-5 if size <= 128 else 3e-4) * np.abs(ref).max())


@pytest.mark.parametrize("rows", ["long", "many"])
@pytest.mark.parametrize("gate", ["channel", "scalar"])
def test_long_grid_axes_come_first(monkeypatch, gate, rows):
    """CUDA allows 65535 programs on grid axes 1 and 2: every intra-chunk and inter-chunk launch
    of the forward and backward puts the chunks and the head rows on axis 0: here 16 heads x
    4608 chunks = 73728, or 4200 x 16 = 67200 head rows of one chunk (a serving batch)."""
    import jax
    import jax.numpy as jnp

    from ejkernel.ops.families import delta_rule_math as M
    from ejkernel_triton._delta import _call as D

    grids = []

    def fake_launch(kernel, *args, out_shape, grid, **kw):
        grids.append((kw.get("name"), tuple(grid)))
        return [jnp.zeros(o.shape, o.dtype) for o in out_shape]

    monkeypatch.setattr(D, "launch", fake_launch)
    b, t, h, d = (1, 4608 * 16, 16, 16) if rows == "long" else (4200, 16, 16, 16)
    x = jnp.zeros((b, t, h, d), jnp.float16)
    beta = jnp.zeros((b, t, h), jnp.float32)
    g = jnp.zeros((b, t, h, d if gate == "channel" else 1), jnp.float32)

    def loss(x, beta, g):
        c = M.to_chunks(x, x, x, beta, g, None, None, scale=0.25, use_qk_l2norm=False, chunk=16, dtype=x.dtype)
        o, _ = D.triton_delta_rule(c, D.triton_intra_chunk(c, x.dtype), x.dtype, block_v=16, num_warps=4, num_stages=1)
        return jnp.sum(o.astype(jnp.float32))

    jax.eval_shape(jax.grad(loss, argnums=(0, 1, 2)), x, beta, g)
    names = {n for n, _ in grids}
    assert {"ejkernel_delta_intra_inverse", "ejkernel_delta_intra_fwd", "ejkernel_delta_intra_bwd_qk"} <= names, names
    if gate == "channel":
        assert "ejkernel_delta_intra_pairs" in names, names
    for name, grid in grids:
        assert all(n <= 65535 for n in grid[1:]), (name, grid)
        assert grid[0] < 2**31, (name, grid)
