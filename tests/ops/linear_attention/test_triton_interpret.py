"""The Triton linear-attention kernels (``ejkernel_triton._linear``) in Triton's interpreter on the
CPU, through the shared conformance suite on a pretend Hopper GPU: every case of
``gla_attention``, ``lightning_attention``, ``recurrent_attention`` and ``state_space_v2``
(bfloat16 cases run in float16: the interpreter's ``tl.dot`` is wrong on bfloat16), output and the
gradient of every differentiable input; value-gate cases must decline with the declared reason.
Small value tiles (16) so the kernels loop over several; 16- and 32-token chunks.
"""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.ops import DeviceInfo, kernel_registry, op_class, run_impl
from ejkernel.testing import conformance as C

if os.environ.get("TRITON_INTERPRET") != "1":  # the kernels must be decorated in interpreter mode
    pytest.skip("run with TRITON_INTERPRET=1 (nox -s triton_interpret)", allow_module_level=True)

from ejkernel_triton._launch import interpreted

pytestmark = pytest.mark.interpret

GPU = DeviceInfo(platform="gpu", kind="interpreter", compute_capability=(9, 0))
OPS = ("gla_attention", "lightning_attention", "recurrent_attention", "state_space_v2")


def _cases():
    for op in OPS:
        for case in op_class(op).get_cases():
            c = case
            if case.dtype == "bfloat16":
                c = dataclasses.replace(case, name=case.name.replace("bfloat16", "float16"), dtype="float16")
            yield pytest.param(op, c, id=f"{op}-{c.name}")


@pytest.fixture(autouse=True)
def _interpreted():
    with interpreted():
        yield


@pytest.mark.parametrize(("op", "case"), list(_cases()))
def test_conformance(op, case):
    impl = kernel_registry.get(op, platform="triton")
    chunk = 32 if case.name.startswith(("varlen", "gqa", "groups")) else 16
    cfg = op_class(op).config_cls(chunk_size=chunk, block_v=16, num_warps=4, num_stages=1)
    declined = "gv" in getattr(case, "gates", ())
    assert C.check_impl(impl, case, cfg, device=GPU) == ("declined" if declined else "ok")


@pytest.mark.parametrize(("dk", "dv"), [(72, 40), (130, 24)], ids=["dk72-2tiles", "dk130-3tiles"])
def test_gradients_over_several_key_tiles(dk, dv):
    """Head dims past one 64-channel key tile (the input-gradient kernel splits the key dimension;
    the last tile partly masked), GQA, varlen with an empty sequence: Triton and XLA agree, output,
    final state and every gradient."""
    rng = np.random.default_rng(5)
    t = 37
    q = jnp.asarray(rng.standard_normal((1, t, 2, dk)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((1, t, 1, dk)) / np.sqrt(dk), jnp.float32)
    v = jnp.asarray(rng.standard_normal((1, t, 1, dv)), jnp.float32)
    g = jnp.asarray(jax.nn.log_sigmoid(rng.standard_normal((1, t, 2, dk)) + 2.0), jnp.float32)
    cu = jnp.asarray([0, 20, 20, t], jnp.int32)
    impl = kernel_registry.get("gla_attention", platform="triton")
    cfg = op_class("gla_attention").config_cls(chunk_size=16, block_v=16, num_warps=4, num_stages=1)

    def run(platform):
        def loss(q, k, v, g):
            if platform == "triton":
                args = C.bind("gla_attention", q, k, v, g, None, None, cu, return_state=True)
                o, s = run_impl(impl, args, cfg, device=GPU)
            else:
                o, s = op_class("gla_attention").function(q, k, v, g, None, None, cu, return_state=True, platform="xla")
            return jnp.sum(jnp.sin(o)) + jnp.sum(jnp.cos(s))

        return jax.value_and_grad(loss, argnums=(0, 1, 2, 3))(q, k, v, g)

    (lt, gt), (lx, gx) = run("triton"), run("xla")
    np.testing.assert_allclose(lt, lx, rtol=1e-5)
    for a, b in zip(gt, gx, strict=True):
        assert float(jnp.max(jnp.abs(b))) > 0  # every gradient is exercised
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-4, rtol=1e-4)


def test_long_grid_axes_come_first(monkeypatch):
    """CUDA allows 65535 programs on grid axes 1 and 2: every launch of the forward and backward
    puts sequences x heads or chunks on axis 0 (5000 packed sequences x 16 heads = 80000)."""
    from ejkernel.ops import get_op
    from ejkernel_triton._linear import _call as L

    grids = []

    def fake_launch(kernel, *args, out_shape, grid, **kw):
        grids.append((kw.get("name"), tuple(grid)))
        return [jnp.zeros(o.shape, o.dtype) for o in out_shape]

    monkeypatch.setattr(L, "launch", fake_launch)
    seqs, h, d = 5000, 16, 16
    t = 2 * seqs
    q = jnp.zeros((1, t, h, d), jnp.float16)
    g = jnp.zeros((1, t, h, d), jnp.float32)
    cu = jnp.arange(seqs + 1, dtype=jnp.int32) * 2
    op = get_op("gla_attention")

    def loss(q, g):
        out, _ = L.linear_attention(op.problem(C.bind("gla_attention", q, q, q, g, None, None, cu)), 16, 16, 4, 1)
        return jnp.sum(out.astype(jnp.float32))

    jax.eval_shape(jax.grad(loss, argnums=(0, 1)), q, g)
    names = {n for n, _ in grids}
    assert {"ejkernel_linear_fwd_h", "ejkernel_linear_fwd_o", "ejkernel_linear_bwd_dh"} <= names, names
    assert {"ejkernel_linear_bwd_dv", "ejkernel_linear_bwd_dqk"} <= names, names
    for name, grid in grids:
        assert all(n <= 65535 for n in grid[1:]), (name, grid)
        assert grid[0] < 2**31, (name, grid)


def test_triton_matches_xla_on_a_long_steep_sequence():
    """300 tokens (19 chunks) of steep per-channel gates, GQA, initial state: Triton and XLA agree,
    outputs and every gradient."""
    rng = np.random.default_rng(3)
    q = jnp.asarray(rng.standard_normal((1, 300, 4, 32)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((1, 300, 2, 32)) / 6, jnp.float32)
    v = jnp.asarray(rng.standard_normal((1, 300, 2, 16)), jnp.float32)
    g = jnp.asarray(jax.nn.log_sigmoid(rng.standard_normal((1, 300, 4, 32)) * 3), jnp.float32)
    h0 = jnp.asarray(rng.standard_normal((1, 4, 32, 16)), jnp.float32)
    impl = kernel_registry.get("gla_attention", platform="triton")
    cfg = op_class("gla_attention").config_cls(chunk_size=16, block_v=16, num_warps=4, num_stages=1)

    def run(platform):
        def loss(q, k, v, g, h0):
            if platform == "triton":
                o, s = run_impl(impl, C.bind("gla_attention", q, k, v, g, None, h0, return_state=True), cfg, device=GPU)
            else:
                o, s = op_class("gla_attention").function(q, k, v, g, None, h0, return_state=True, platform="xla")
            return jnp.sum(jnp.sin(o)) + jnp.sum(jnp.cos(s))

        return jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4))(q, k, v, g, h0)

    (lt, gt), (lx, gx) = run("triton"), run("xla")
    np.testing.assert_allclose(lt, lx, rtol=1e-5)
    for a, b in zip(gt, gx, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-4, rtol=1e-4)


def test_state_tiles_do_not_change_the_states():
    """The state recurrences over 32x32 tiles (``Spec.state_block``: ``_call.state_block`` picks 64
    or 32) store the same chunk states, final state and state gradients: head dims 40 (key) and 72
    (value) make partly masked last tiles at both sizes; two packed sequences, one empty."""
    from ejkernel_triton._linear import _call as L

    rng = np.random.default_rng(11)
    t, h, dk, dv = 37, 2, 40, 72
    arr = lambda *s: jnp.asarray(rng.standard_normal(s), jnp.float32)  # noqa: E731
    k, v, q, do = arr(t, h, dk), arr(t, h, dv), arr(t, h, dk), arr(t, h, dv)
    g = -jnp.abs(arr(t, h, dk)) * 0.1
    h0, dht = arr(3, h, dk, dv), arr(3, h, dk, dv)
    cu = jnp.asarray([0, 20, 20, t], jnp.int32)
    spec = L.Spec(
        tokens=t, batch=1, seq=t, num_seqs=3, n_chunks=-(-t // 16) + 3, heads=h, kv_heads=h, head_dim=dk,
        value_head_dim=dv, chunk=16, block_v=16, warps=4, stages=1, scale=dk**-0.5, varlen=True,
    )  # fmt: skip
    choff, _, _ = L.chunk_tables(cu, spec)
    out = {}
    for block in (64, 32):
        s = dataclasses.replace(spec, state_block=block)
        hs, ht = L.fwd_states(s, k, v, g, h0, cu, choff, jnp.float32)
        dhs, dh0 = L.bwd_states(s, q, g, do, dht, cu, choff)
        out[block] = [np.asarray(x) for x in (hs, ht, dhs, dh0)]
    used = int(choff[-1])  # chunk slots past it are never written
    for i, (a, b) in enumerate(zip(out[64], out[32], strict=True)):
        if i in (0, 2):
            a, b = a[:used], b[:used]
        assert np.isfinite(a).all() and np.abs(a).max() > 0
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_factored_and_column_chunks_match_the_reference():
    """The intra-chunk products factor through a chunk's middle row when its gates stay within
    ``_kernel.SPAN`` (30 nats) of that row, else run column by column: one sequence with gentle
    chunks, a chunk decaying 15 nats per token (120 across half a chunk: the column steps; factored,
    its products would overflow), a chunk of growing gates (g > 0) and a partly filled last chunk.
    Output, final state and every gradient against the naive token-by-token recurrence (float32)."""
    from ejkernel_triton._linear._kernel import SPAN

    assert SPAN.value == 30.0
    rng = np.random.default_rng(11)
    t, dk, dv = 61, 32, 16
    q = rng.standard_normal((1, t, 2, dk))
    k = rng.standard_normal((1, t, 2, dk)) / 4
    v = rng.standard_normal((1, t, 2, dv))
    g = np.array(jax.nn.log_sigmoid(rng.standard_normal((1, t, 2, dk)) + 3.0), np.float64)
    g[:, 16:32] = -15.0 + 0.1 * rng.standard_normal((1, 16, 2, dk))
    g[:, 32:48] = 0.3 * np.abs(rng.standard_normal((1, 16, 2, dk)))
    impl = kernel_registry.get("gla_attention", platform="triton")
    cfg = op_class("gla_attention").config_cls(chunk_size=16, block_v=16, num_warps=4, num_stages=1)
    reference = op_class("gla_attention").get_reference()

    def grads(platform, dtype):
        def loss(q, k, v, g):
            if platform == "triton":
                o, s = run_impl(
                    impl, C.bind("gla_attention", q, k, v, g, None, None, return_state=True), cfg, device=GPU
                )
            else:
                o, s = reference(q, k, v, g, return_state=True, dtype=dtype)
            return jnp.sum(jnp.sin(o)) + jnp.sum(jnp.cos(s))

        args = [jnp.asarray(x, dtype) for x in (q, k, v, g)]
        return jax.value_and_grad(loss, argnums=(0, 1, 2, 3))(*args)

    lt, gt = grads("triton", jnp.float32)
    lr, gr = grads("reference", jnp.float32)
    np.testing.assert_allclose(float(lt), float(lr), rtol=3e-5)
    for a, b in zip(gt, gr, strict=True):
        assert np.isfinite(np.asarray(a)).all()
        # Gradients reach ~360 here (growing gates): float32's error is relative to that scale.
        b = np.asarray(b)
        np.testing.assert_allclose(np.asarray(a), b, atol=1e-4 * np.abs(b).max(), rtol=1e-4)


@pytest.mark.parametrize("chunk", [16, 64, 128])
def test_scalar_gates_take_the_scalar_path_for_any_decay(chunk):
    """A per-head gate alone (``g_gamma``: lightning, Mamba2's SSD) builds its scores as
    ``(q kᵀ) ⊙ exp(G_t − G_s)`` (``Spec.scalar_gate``): exact for any decay, here from 0 to 40
    nats per token across the heads (factored per channel, 40 nats over half a chunk would
    overflow), varlen with an empty sequence, an initial state; output, final state and the
    gradients of q, k, v and the initial state against the naive recurrence. 128-token chunks
    (long sequences' heuristic): the last sequence spans two chunks, the backward at
    ``WIDE_CHUNK_WARPS``."""
    from ejkernel_triton._linear import _call as L

    rng = np.random.default_rng(12)
    t, h, dk, dv = max(45, 2 * chunk + 13), 4, 16, 16
    q = jnp.asarray(rng.standard_normal((1, t, h, dk)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((1, t, h, dk)) / 4, jnp.float32)
    v = jnp.asarray(rng.standard_normal((1, t, h, dv)), jnp.float32)
    gamma = jnp.asarray([0.0, -0.3, -6.0, -40.0], jnp.float32)
    h0 = jnp.asarray(rng.standard_normal((3, h, dk, dv)), jnp.float32)
    cu = jnp.asarray([0, 20, 20, t], jnp.int32)
    impl = kernel_registry.get("gla_attention", platform="triton")
    cfg = op_class("gla_attention").config_cls(chunk_size=chunk, block_v=16, num_warps=4, num_stages=1)
    reference = op_class("gla_attention").get_reference()
    specs = []
    real_core = L._core

    def spy(spec, *a):
        specs.append(spec)
        return real_core(spec, *a)

    def grads(platform):
        def loss(q, k, v, h0):
            if platform == "triton":
                o, s = run_impl(
                    impl, C.bind("gla_attention", q, k, v, None, gamma, h0, cu, return_state=True), cfg, device=GPU
                )
            else:
                o, s = reference(q, k, v, None, gamma, h0, cu, return_state=True)
            return jnp.sum(jnp.sin(o)) + jnp.sum(jnp.cos(s))

        return jax.value_and_grad(loss, argnums=(0, 1, 2, 3))(q, k, v, h0)

    L._core = spy
    try:
        lt, gt = grads("triton")
    finally:
        L._core = real_core
    assert specs and all(s.scalar_gate for s in specs)
    lr, gr = grads("reference")
    np.testing.assert_allclose(float(lt), float(lr), rtol=1e-5)
    for a, b in zip(gt, gr, strict=True):
        assert np.isfinite(np.asarray(a)).all()
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-4, rtol=1e-4)


def test_the_heuristic_gives_scalar_gates_longer_chunks():
    """64-token chunks for a gate that is one number per token and head (lightning, Mamba2's SSD,
    ``g_gamma`` alone), 32 for a per-channel gate (whose scores cost more per chunk); 128 for a
    scalar gate over few long sequences (B1 T8192 H2: few state walks), not for many heads or
    shorter rows, nor for a per-channel gate."""
    from ejkernel_triton._linear import impl as I

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((1, 8, 2, 16)), jnp.float32)
    gamma = jnp.asarray([-0.1, -0.5], jnp.float32)
    calls = {
        "gla_attention": (C.bind("gla_attention", x, x, x, x), I.CHUNK),
        "gla_attention g_gamma": (C.bind("gla_attention", x, x, x, None, gamma), I.SCALAR_CHUNK),
        "lightning_attention": (C.bind("lightning_attention", x, x, x, layer_idx=1, num_layers=4), I.SCALAR_CHUNK),
    }
    xl = jnp.zeros((1, I.LONG_SEQ, 2, 16), jnp.float32)
    xw = jnp.zeros((1, I.LONG_SEQ, 128, 16), jnp.float32)
    xs = jnp.zeros((2, I.LONG_SEQ // 2, 2, 16), jnp.float32)
    calls |= {
        "lightning_attention long": (C.bind("lightning_attention", xl, xl, xl, layer_idx=1, num_layers=4), 128),
        "lightning_attention many-heads": (C.bind("lightning_attention", xw, xw, xw, layer_idx=1, num_layers=4), 64),
        "lightning_attention shorter": (C.bind("lightning_attention", xs, xs, xs, layer_idx=1, num_layers=4), 64),
        "gla_attention long": (C.bind("gla_attention", xl, xl, xl, xl), I.CHUNK),
    }
    for what, (args, chunk) in calls.items():
        op = what.split()[0]
        impl = kernel_registry.get(op, platform="triton")
        assert impl.heuristic_cfg(args, GPU).chunk_size == chunk, what
        assert {c.chunk_size for c in impl.candidate_cfgs(args, GPU)} >= {chunk}, what
