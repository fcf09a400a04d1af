"""The XLA ``grouped_matmul``'s two forms, each forced: the tiled loop (chunks of ``block_m`` rows
of one group; the CPU's form) and ``lax.ragged_dot`` (the accelerators'), against the float32
reference: output and the gradients of ``lhs``, ``rhs`` and ``existing_out``, under ``jax.jit``
with traced group sizes (and eagerly on one case). The cases put groups across chunk boundaries,
groups larger than a chunk, empty groups, every row in one group, rows past the groups, chunks
wider than ``m``, expert slices (``group_offset``) with and without ``existing_out``, the
transposed ``rhs`` and bfloat16 inputs. Then the chunk plan row by row, and which form the
heuristic picks."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.ops import DeviceInfo, record_dispatches
from ejkernel.ops.executor import bind
from ejkernel.ops.grouped_matmul.reference import grouped_matmul_reference
from ejkernel_xla.grouped_matmul import XlaGroupedMatmul
from ejkernel_xla.grouped_matmul import heuristics as H
from ejkernel_xla.grouped_matmul._kernel import grouped_matmul
from ejkernel_xla.grouped_matmul._tiled import chunks, max_chunks

HIGHEST = jax.lax.Precision.HIGHEST


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    m: int
    sizes: tuple[int, ...]
    block: int
    k: int = 24
    n: int = 20
    offset: int = 0
    groups: int | None = None  # local groups (default: all)
    transpose: bool = False
    existing: bool = False
    dtype: str = "float32"
    out_dtype: str | None = "float32"


CASES = [
    Case("empty-and-large-groups", m=110, sizes=(13, 0, 37, 1, 30, 0, 19), block=16),  # 10 rows past the groups
    Case("one-group-all-rows", m=67, sizes=(0, 67, 0), block=8),
    Case("rows-past-groups", m=91, sizes=(5, 40, 0, 20), block=32, k=37, n=29),
    Case("chunk-wider-than-m", m=20, sizes=(7, 0, 9), block=64),
    Case("every-group-empty", m=12, sizes=(0, 0, 0), block=4),
    Case("single-row-chunks", m=9, sizes=(2, 3, 0, 4), block=1),
    Case("slice-existing-out", m=96, sizes=(10, 14, 0, 22, 30, 11), block=8, offset=2, groups=3, existing=True),
    Case("slice-transposed", m=128, sizes=(20, 0, 30, 25, 13, 40), block=16, offset=3, groups=3, transpose=True),
    Case("bf16-f32-out", m=72, sizes=(30, 0, 42), block=16, dtype="bfloat16"),
    Case("bf16-out", m=72, sizes=(3, 50, 19), block=16, dtype="bfloat16", out_dtype=None),
]

EAGER = ("slice-existing-out",)  # also run op by op (slower: many small compiles)
# lax.ragged_dot is XLA's own: a few cases check the wrapping (slices, transposes, dtypes).
RAGGED = ("empty-and-large-groups", "slice-existing-out", "slice-transposed", "bf16-out")


def _inputs(c: Case) -> dict:
    rng = np.random.default_rng(len(c.name))
    dt = jnp.dtype(c.dtype)
    g = c.groups or len(c.sizes)
    out = {
        "lhs": jnp.asarray(rng.standard_normal((c.m, c.k)), dt),
        "rhs": jnp.asarray(rng.standard_normal((g, c.n, c.k) if c.transpose else (g, c.k, c.n)), dt),
        "sizes": jnp.asarray(c.sizes, jnp.int32),
        "existing": None,
    }
    if c.existing:
        out["existing"] = jnp.asarray(rng.standard_normal((c.m, c.n)), jnp.dtype(c.out_dtype or c.dtype))
    return out


def _local_rows(c: Case) -> np.ndarray:
    cum = np.concatenate([[0], np.cumsum(c.sizes)])
    rows = np.arange(c.m)
    return (rows >= cum[c.offset]) & (rows < cum[c.offset + (c.groups or len(c.sizes))])


def _loss(run, cot):
    """``sum(out · cot)`` and the output: its gradients are the VJP of ``cot``."""

    def loss(lhs, rhs, existing, sizes):
        out = run(lhs, rhs, sizes, existing)
        return jnp.sum(out.astype(jnp.float32) * cot), out

    return loss


@pytest.mark.parametrize(
    "case,form",
    [(c, "tiled") for c in CASES] + [(c, "ragged_dot") for c in CASES if c.name in RAGGED],
    ids=lambda x: x.name if isinstance(x, Case) else x,
)
def test_form_matches_reference(case, form):
    x = _inputs(case)
    opts = {"transpose_rhs": case.transpose, "preferred_element_type": case.out_dtype}

    def op(lhs, rhs, sizes, existing):
        # Under jit the sizes are traced: the chunk plan is computed on the device.
        args = bind("grouped_matmul", lhs, rhs, sizes, case.offset, existing, precision=HIGHEST, **opts)
        return grouped_matmul(args, case.block if form == "tiled" else None)

    def ref(lhs, rhs, sizes, existing):
        return grouped_matmul_reference(lhs, rhs, sizes, case.offset, existing, transpose_rhs=case.transpose)

    low = case.dtype != "float32"
    out_low = low and case.out_dtype is None
    cot = jnp.asarray(np.random.default_rng(1).standard_normal((case.m, case.n)), jnp.float32)
    argnums = (0, 1, 2) if case.existing else (0, 1)
    grad_ref, out_ref = jax.jit(jax.grad(_loss(ref, cot), argnums, has_aux=True))(
        x["lhs"], x["rhs"], x["existing"], x["sizes"]
    )
    for mode in ("eager", "jit") if case.name in EAGER else ("jit",):
        fn = jax.grad(_loss(op, cot), argnums, has_aux=True)
        grads, out = (jax.jit(fn) if mode == "jit" else fn)(x["lhs"], x["rhs"], x["existing"], x["sizes"])
        assert out.dtype == jnp.dtype(case.out_dtype or case.dtype)
        tol = 2e-2 if out_low else 1e-4
        scale = float(jnp.max(jnp.abs(out_ref))) or 1.0
        np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(out_ref), atol=tol * scale, err_msg=mode)
        if not case.existing:  # rows outside the local groups (and past them): exact zeros
            assert not np.asarray(out, np.float32)[~_local_rows(case)].any(), mode
        for name, got, want in zip(("lhs", "rhs", "existing_out")[: len(argnums)], grads, grad_ref, strict=True):
            assert got.dtype == want.dtype, name
            gtol = 2e-2 if low else 1e-4
            gscale = float(jnp.max(jnp.abs(want))) or 1.0
            np.testing.assert_allclose(
                np.asarray(got, np.float32), np.asarray(want, np.float32), atol=gtol * gscale, err_msg=f"{mode} d{name}"
            )


def test_ragged_form_backward_multiplies_in_the_inputs_dtype():
    """bfloat16 inputs, the default float32 output: the backward's ragged dots take the cotangent
    rounded to bfloat16 (as the Triton implementation's), not float32 against bfloat16 weights."""
    case = next(c for c in CASES if c.name == "bf16-f32-out")
    x = _inputs(case)

    def loss(lhs, rhs):
        args = bind("grouped_matmul", lhs, rhs, x["sizes"], preferred_element_type=jnp.float32)
        return jnp.sum(grouped_matmul(args, None) ** 2)

    jaxpr = jax.make_jaxpr(jax.grad(loss, (0, 1)))(x["lhs"], x["rhs"]).jaxpr
    dots = [e for e in jaxpr.eqns if e.primitive.name.startswith("ragged_dot")]
    assert len(dots) == 3, [e.primitive.name for e in jaxpr.eqns]  # the forward, dlhs, drhs
    for e in dots[1:]:
        assert {v.aval.dtype for v in e.invars[:2]} == {jnp.dtype(jnp.bfloat16)}, e


def test_chunks_cover_each_local_row_once():
    """Real chunks tile the local groups' rows in order, one group each, at most ``block`` rows,
    inside their window; their count is within the static bound. Random sizes (empty groups,
    rows past the groups) and slices."""
    rng = np.random.default_rng(0)
    total, m, g = 9, 60, 4
    plan = jax.jit(chunks, static_argnums=(2, 3))
    for block in (1, 4, 16, 64):
        block = min(block, m)
        for _ in range(3):
            sizes = rng.multinomial(int(rng.integers(0, m + 1)), rng.dirichlet(np.full(total, 0.3)))
            sizes[rng.random(total) < 0.3] = 0
            offset = int(rng.integers(0, total - g + 1))
            cum = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
            starts, ends = cum[offset : offset + g], cum[offset + 1 : offset + g + 1]
            ch = jax.tree.map(np.asarray, plan(jnp.asarray(starts), jnp.asarray(ends), m, block))
            count = int(ch.count)
            assert count <= len(ch.group) == max_chunks(m, g, block)
            want = []
            for j, (s, e) in enumerate(zip(starts, ends, strict=True)):
                want += [(j, lo, min(lo + block, e)) for lo in range(s, e, block)]
            assert list(zip(ch.group[:count], ch.lo[:count], ch.hi[:count], strict=True)) == want, (sizes, offset)
            assert ((ch.start >= 0) & (ch.start + block <= m)).all()
            assert ((ch.start[:count] <= ch.lo[:count]) & (ch.hi[:count] <= ch.start[:count] + block)).all()


def _args(m, g, scale=False):
    rhs = jnp.ones((g, 8, 8))
    kw = {"rhs_scale": jnp.ones((g, 1, 1, 8))} if scale else {}
    return bind("grouped_matmul", jnp.ones((m, 8)), rhs, jnp.full((g,), m // g, jnp.int32), **kw)


def test_heuristic_picks_the_tiled_form_on_the_cpu_only():
    big = _args(4096, 8)
    assert H.tiled_pays(big, "cpu") and H.tile_rows(big) == 128
    assert not H.tiled_pays(big, "gpu") and not H.tiled_pays(big, "tpu")
    assert not H.tiled_pays(_args(4096, 1), "cpu")  # one group: one dense product either way
    assert not H.tiled_pays(_args(64, 4, scale=True), "cpu")  # rhs_scale runs on lax.ragged_dot
    assert H.tile_rows(_args(64, 4)) == H.MIN_ROWS and H.tile_rows(_args(1 << 16, 2)) == H.MAX_ROWS
    assert H.heuristic(big, "gpu").block_m is None
    cpu = DeviceInfo(platform="cpu", kind="cpu")
    assert XlaGroupedMatmul().heuristic_cfg(big, cpu).block_m == 128
    with record_dispatches() as log:
        ejkernel.grouped_matmul(jnp.ones((64, 8)), jnp.ones((4, 8, 8)), jnp.full((4,), 16, jnp.int32), platform="xla")
    assert log[0].config.block_m == (H.MIN_ROWS if jax.default_backend() == "cpu" else None)


@pytest.mark.distributed
@pytest.mark.skipif(len(jax.devices()) < 4, reason="needs 4 (simulated) devices; see tests/conftest.py")
def test_tiled_gradients_under_shard_map_with_replicated_weights():
    """Rows and group sizes sharded, ``rhs`` the same on every device (``shard_map`` checking
    manual-axis types): the loops' carries vary like their inputs, and ``drhs`` sums the devices'."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("x",))
    spec = jax.sharding.PartitionSpec
    rng = np.random.default_rng(0)
    lhs = jnp.asarray(rng.standard_normal((4 * 24, 16)), jnp.float32)
    rhs = jnp.asarray(rng.standard_normal((3, 16, 8)), jnp.float32)
    sizes = jnp.asarray([[10, 0, 14], [0, 24, 0], [5, 6, 7], [1, 2, 3]], jnp.int32)  # one row per device

    def grads(local):
        f = jax.shard_map(local, mesh=mesh, in_specs=(spec("x"), spec(), spec("x")), out_specs=spec("x"))
        return jax.jit(jax.grad(lambda a, b: jnp.sum(jnp.sin(f(a, b, sizes))), (0, 1)))(lhs, rhs)

    def tiled(a, b, s):
        return grouped_matmul(bind("grouped_matmul", a, b, s[0], precision=HIGHEST), 8)

    got = grads(tiled)
    want = grads(lambda a, b, s: grouped_matmul_reference(a, b, s[0]))
    for name, x, y in zip(("lhs", "rhs"), got, want, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-4, err_msg=name)
