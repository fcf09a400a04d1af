"""``ring_attention``: sequence parallelism over a mesh axis equals attention on the whole sequence.

On the 8 simulated CPU devices of ``tests/conftest.py`` (and, in one test, across 2 CPU processes
joined by ``jax.distributed.initialize``), the ring's output and gradients match the float32
reference on the unsharded sequence: causal and not, both layouts, GQA/MQA, packed sequences
crossing shard boundaries, sliding windows, soft cap, sinks, biases and pairwise masks, inside a
user's ``shard_map`` (``check_vma`` on and off) or set up by ``mesh=``. Also: memory per device
that does not grow with the number of devices, transfers issued before each step computes, the
dispatch, the zig-zag helpers and the errors. The inner kernels' log-sum-exp protocol has its own
tests in ``test_lse_protocol.py``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import ejkernel
from ejkernel.errors import NoImplementationError, UnsupportedError
from ejkernel.ops import device_for_arrays, kernel_registry, record_dispatches
from ejkernel.testing import attention_reference

from ._ring_cases import ATOL_FWD, ATOL_GRAD, CASES, RTOL_FWD, RTOL_GRAD, RingCase, check_case

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.skipif(len(jax.devices()) < 8, reason="needs 8 (simulated) devices; see tests/conftest.py"),
]

REPO = Path(__file__).resolve().parents[3]
SEQ = P(None, "sp", None, None)  # [batch, seq, heads, head_dim]: the sequence over the ring
MP_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def ring_mesh():
    return Mesh(np.array(jax.devices()[:8]), ("sp",))


def close(actual, expected, atol=ATOL_FWD, rtol=RTOL_FWD, msg=""):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), atol=atol, rtol=rtol, err_msg=msg)


def randn(rng, *shape):
    return jnp.asarray(rng.standard_normal(shape), jnp.float32)


# -- the ring equals the reference (8 devices, mesh=) ------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_ring_equals_reference(ring_mesh, case):
    check_case(case, ring_mesh)


def test_ring_with_batch_sharded_too():
    """A 2 × 4 mesh: batch over ``dp``, the ring over ``sp``."""
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("dp", "sp"))
    check_case(RingCase("dp-causal-zigzag", causal=True, layout="zigzag"), mesh, batch_axis="dp")


def test_ring_on_fewer_devices_and_a_single_one():
    """The ring over 2 devices (other chunk sizes), and over 1 (no communication at all)."""
    for n in (2, 1):
        mesh = Mesh(np.array(jax.devices()[:n]), ("sp",))
        check_case(RingCase(f"causal-zigzag-{n}", causal=True, layout="zigzag", seq_per_device=12), mesh)


def test_bfloat16_within_twice_the_low_precision_error(ring_mesh, rng):
    """bf16 inputs: the ring's error is at most ~2× that of the reference computed in bf16."""
    b, n, h, hk, d = 1, 128, 4, 2, 32
    q, k, v = (randn(rng, b, n, hh, d).astype(jnp.bfloat16) for hh in (h, hk, hk))

    @jax.jit
    def ring(q, k, v):
        perm = lambda x: ejkernel.zigzag_permute(x, 8)  # noqa: E731
        out = ejkernel.ring_attention(
            perm(q), perm(k), perm(v), axis_name="sp", causal=True, layout="zigzag", mesh=ring_mesh, in_specs=(SEQ,) * 3
        )
        return ejkernel.zigzag_unpermute(out, 8)

    out = ring(q, k, v).astype(jnp.float32)
    ref = attention_reference(q, k, v, causal=True)
    low = attention_reference(q, k, v, causal=True, dtype=jnp.bfloat16).astype(jnp.float32)
    err, low_err = float(jnp.abs(out - ref).max()), float(jnp.abs(low - ref).max())
    assert err <= 2 * low_err + 1e-3, (err, low_err)


# -- inside the user's shard_map ---------------------------------------------------------------


@pytest.mark.parametrize("check_vma", [True, False], ids=["check-vma", "no-check-vma"])
def test_inside_shard_map_with_sinks_and_key_bias(ring_mesh, rng, check_vma):
    """Local shards in, local shards out; sinks and a key bias replicated over the ring get the
    sum of every device's gradient."""
    b, n, h, hk, d = 2, 64, 4, 2, 16
    q, k, v = randn(rng, b, n, h, d), randn(rng, b, n, hk, d), randn(rng, b, n, hk, d)
    aux = randn(rng, h, 2)
    bias = randn(rng, 1, h, 1, n) * 0.5  # [1, h, 1, all keys]: every device sees every key
    w = randn(rng, b, n, h, d)

    def local(q, k, v, aux, bias):
        assert q.shape == (b, n // 8, h, d)  # the shard
        return ejkernel.ring_attention(q, k, v, bias, axis_name="sp", causal=True, softmax_aux=aux)

    sharded = jax.shard_map(
        local, mesh=ring_mesh, in_specs=(SEQ, SEQ, SEQ, P(), P()), out_specs=SEQ, check_vma=check_vma
    )

    def loss(fn, *a):
        return jnp.sum(fn(*a) * w)

    ref_fn = lambda q, k, v, aux, bias: attention_reference(q, k, v, bias, causal=True, softmax_aux=aux)  # noqa: E731
    args = (q, k, v, aux, bias)
    close(jax.jit(sharded)(*args), ref_fn(*args))
    grads = jax.jit(jax.grad(lambda *a: loss(sharded, *a), argnums=tuple(range(5))))(*args)
    ref_grads = jax.grad(lambda *a: loss(ref_fn, *a), argnums=tuple(range(5)))(*args)
    for name, g, r in zip(("dq", "dk", "dv", "daux", "dbias"), grads, ref_grads, strict=True):
        close(g, r, ATOL_GRAD, RTOL_GRAD, name)


def test_full_bias_and_pairwise_mask_rows_sharded(ring_mesh, rng):
    """A ``[b, h, seq, seq]`` bias and mask: rows follow the queries, every key column is local."""
    b, n, h, hk, d = 1, 32, 2, 1, 8
    q, k, v = randn(rng, b, n, h, d), randn(rng, b, n, hk, d), randn(rng, b, n, hk, d)
    bias = randn(rng, b, h, n, n) * 0.5
    allowed = rng.random((b, 1, n, n)) < 0.7
    allowed[0, 0, 5] = False  # a row that sees nothing
    mi = ejkernel.MaskInfo.from_attention_mask(allowed)
    w = randn(rng, b, n, h, d)

    def ring(q, k, v, bias):
        return ejkernel.ring_attention(q, k, v, bias, axis_name="sp", mask_info=mi, mesh=ring_mesh, in_specs=(SEQ,) * 3)

    def ref(q, k, v, bias):
        return attention_reference(q, k, v, bias, mask_info=mi)

    out = jax.jit(ring)(q, k, v, bias)
    close(out, ref(q, k, v, bias))
    assert np.all(np.asarray(out[0, 5]) == 0)
    g = jax.jit(jax.grad(lambda *a: jnp.sum(ring(*a) * w), argnums=(0, 1, 2, 3)))(q, k, v, bias)
    gr = jax.grad(lambda *a: jnp.sum(ref(*a) * w), argnums=(0, 1, 2, 3))(q, k, v, bias)
    for name, a, r in zip(("dq", "dk", "dv", "dbias"), g, gr, strict=True):
        close(a, r, ATOL_GRAD, RTOL_GRAD, name)


# -- memory, dispatch, layout helpers ----------------------------------------------------------


def test_memory_per_device_does_not_grow_with_devices():
    """Fixed tokens per device: the compiled forward+backward's per-device memory is the same
    on 2 and 8 devices (the sequence is 4× longer), unlike unsharded attention's."""
    per_device = 256

    def temp_bytes(n):
        mesh = Mesh(np.array(jax.devices()[:n]), ("sp",))
        x = jax.ShapeDtypeStruct((1, per_device * n, 4, 32), jnp.float32)

        def loss(q, k, v):
            out = ejkernel.ring_attention(
                q, k, v, axis_name="sp", causal=True, layout="zigzag", mesh=mesh, in_specs=(SEQ,) * 3
            )
            return jnp.sum(out)

        compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(x, x, x).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    two, eight = temp_bytes(2), temp_bytes(8)
    assert eight <= 1.1 * two, (two, eight)


def test_dispatch_is_observable_and_sees_the_shards(ring_mesh, rng):
    q, k, v = randn(rng, 2, 64, 4, 16), randn(rng, 2, 64, 2, 16), randn(rng, 2, 64, 2, 16)
    with record_dispatches() as log:
        jax.eval_shape(
            lambda q, k, v: ejkernel.ring_attention(
                q, k, v, axis_name="sp", causal=True, mesh=ring_mesh, in_specs=(SEQ,) * 3
            ),
            q,
            k,
            v,
        )
    assert [(d.op, d.impl) for d in log] == [("ring_attention", "xla")]
    assert "query=f32[2,8,4,16]" in log[0].key and "key=f32[2,8,2,16]" in log[0].key, log[0].key
    assert "axis_name=sp layout=contiguous" in log[0].key
    # An explicit config reaches the inner kernel (and is validated by it).
    cfg = ejkernel.RingAttentionConfig(fwd_params=ejkernel.FwdParams(q_blocksize=8, kv_blocksize=8))
    with record_dispatches() as log:
        out = jax.jit(
            lambda q, k, v: ejkernel.ring_attention(
                q, k, v, axis_name="sp", causal=True, cfg=cfg, mesh=ring_mesh, in_specs=(SEQ,) * 3
            )
        )(q, k, v)
    assert log[0].config.fwd_params.q_blocksize == 8 and log[0].config.bwd_params is not None
    close(out, attention_reference(q, k, v, causal=True))


def test_platform_selects_the_inner_kernel_and_declines_with_reasons(ring_mesh, rng):
    q = randn(rng, 1, 64, 2, 16)
    kw = {"axis_name": "sp", "mesh": ring_mesh, "in_specs": (SEQ,) * 3}
    if device_for_arrays([q]).platform != "gpu":
        with pytest.raises((UnsupportedError, NoImplementationError), match="triton"):
            ejkernel.ring_attention(q, q, q, platform="triton", **kw)
    ring_xla = kernel_registry.get("ring_attention", platform="xla")
    flash_xla = kernel_registry.get("flash_attention", platform="xla")
    assert ring_xla.priority == flash_xla.priority and flash_xla.supports_lse


def _ring_loop_bodies(jaxpr):
    """The bodies of the loops (scan/while) that contain a ``ppermute``: the ring's steps."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("scan", "while"):
            body = (eqn.params.get("jaxpr") or eqn.params["body_jaxpr"]).jaxpr
            if any(e.primitive.name == "ppermute" for e in body.eqns):
                yield body
        for p in eqn.params.values():
            for sub in p if isinstance(p, (list, tuple)) else [p]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _ring_loop_bodies(inner)


def test_transfers_are_issued_before_the_step_computes(ring_mesh):
    """Each ring step (forward: K/V; backward: K/V and the previous block's dK/dV) sends one
    packed buffer, with one ``ppermute`` that comes before the step's first kernel loop or
    matmul, so that it can overlap."""
    x = jnp.zeros((1, 64, 2, 8))

    def loss(q, k, v):
        out = ejkernel.ring_attention(
            q, k, v, axis_name="sp", causal=True, layout="zigzag", mesh=ring_mesh, in_specs=(SEQ,) * 3
        )
        return jnp.sum(out)

    bodies = list(_ring_loop_bodies(jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2)))(x, x, x).jaxpr))
    sent = sorted(
        [int(np.prod(e.invars[0].aval.shape)) for e in body.eqns if e.primitive.name == "ppermute"] for body in bodies
    )
    # 32-bit words: forward k, v (f32 [1, 8, 2, 8] each); backward k, v, dk, dv.
    assert sent == [[2 * 128], [4 * 128]], sent
    for body in bodies:
        names = [e.primitive.name for e in body.eqns]
        first_compute = min(i for i, n in enumerate(names) if n in ("scan", "while", "cond", "dot_general"))
        assert max(i for i, n in enumerate(names) if n == "ppermute") < first_compute, names


@pytest.mark.parametrize("odd", [False, True], ids=["words", "bytes"])
def test_packed_transfer_moves_every_array_bit_for_bit(ring_mesh, odd):
    """``_send_next`` packs mixed dtypes (32-bit words, or bytes when a size needs them) and
    each device gets exactly what ``ppermute`` of each array would give it."""
    from jax import lax

    from ejkernel.ops.ring_attention._ring import _ring_perm, _send_next

    rng = np.random.default_rng(0)
    n = 8
    tree = {
        "bf16": jnp.asarray(rng.standard_normal((n, 3, 6)), jnp.bfloat16),
        "f32": jnp.asarray(rng.standard_normal((n, 5)), jnp.float32),
        "seg": jnp.asarray(rng.integers(-9, 9, (n, 7)), jnp.int32),
        "mask": jnp.asarray(rng.random((n, 4)) > 0.5),
        "none": None,
    }
    if odd:
        tree["f16"] = jnp.asarray(rng.standard_normal((n, 3)), jnp.float16)  # 6 bytes per device
    spec = jax.tree.map(lambda _: P("sp"), tree)

    def both(t):
        return _send_next(t, "sp", n), jax.tree.map(lambda x: lax.ppermute(x, "sp", _ring_perm(n)), t)

    packed, each = jax.jit(jax.shard_map(both, mesh=ring_mesh, in_specs=(spec,), out_specs=(spec, spec)))(tree)
    assert packed["none"] is None
    for name in tree:
        if tree[name] is not None:
            assert packed[name].dtype == tree[name].dtype, name
            np.testing.assert_array_equal(np.asarray(packed[name]), np.asarray(each[name]), err_msg=name)
            assert not np.array_equal(np.asarray(packed[name]), np.asarray(tree[name])), name  # it moved


def test_zigzag_helpers_round_trip_and_balance():
    x = jnp.arange(2 * 32).reshape(2, 32)
    z = ejkernel.zigzag_permute(x, 4)
    assert np.array_equal(np.asarray(ejkernel.zigzag_unpermute(z, 4)), np.asarray(x))
    # Shard r holds chunks r and 7 - r (of 8 chunks of 4 tokens): equal causal work per shard.
    shards = np.asarray(z[0]).reshape(4, 8)
    assert shards[1].tolist() == [4, 5, 6, 7, 24, 25, 26, 27]
    work = [int(np.sum(s + 1)) for s in shards]  # keys a causal query sees = position + 1
    assert len(set(work)) == 1, work
    assert ejkernel.zigzag_permute(jnp.arange(8), 2, axis=0).tolist() == [0, 1, 6, 7, 2, 3, 4, 5]
    with pytest.raises(ValueError, match=r"axis 1 of length 30 .* does not split into 2 × 4 = 8"):
        ejkernel.zigzag_permute(jnp.zeros((1, 30)), 4)


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "n", "match"),
    [
        ("contiguous", 60, r"query sequence length 60 does not split evenly over the 8 devices of mesh axis 'sp' "
         r"\(a multiple of 8\): query \(1, 60, 2, 8\), key \(1, 60, 2, 8\)"),
        ("zigzag", 72, r"query sequence length 72 .*zigzag layout needs a multiple of 2 × 8 = 16\): query \(1, 72"),
    ],
    ids=["contiguous", "zigzag"],
)  # fmt: skip
def test_uneven_sequence_is_rejected(ring_mesh, rng, layout, n, match):
    q = randn(rng, 1, n, 2, 8)
    with pytest.raises(ValueError, match=match):
        ejkernel.ring_attention(q, q, q, axis_name="sp", layout=layout, mesh=ring_mesh, in_specs=(SEQ,) * 3)


def test_argument_errors(ring_mesh, rng):
    q = randn(rng, 1, 64, 2, 8)
    kw = {"mesh": ring_mesh, "in_specs": (SEQ,) * 3}
    cases = [
        ({"axis_name": "sp", "mesh": ring_mesh, "in_specs": (P(),) * 3}, ValueError, r"sequence axis of query must be sharded over axis_name='sp'"),
        ({"axis_name": "sp", "mesh": ring_mesh, "in_specs": (SEQ, P(), SEQ)}, ValueError, r"sequence axis of key"),
        ({"axis_name": "tp", **kw}, ValueError, r"mesh has no axis 'tp'"),
        ({"axis_name": 3, **kw}, TypeError, r"axis_name must be a mesh axis name"),
        ({"axis_name": "sp", "layout": "striped", **kw}, ValueError, r"layout must be one of"),
    ]  # fmt: skip
    for extra, exc, match in cases:
        with pytest.raises(exc, match=match):
            ejkernel.ring_attention(q, q, q, **extra)
    with pytest.raises(ValueError, match=r"causal and sliding_window need seq_q == seq_k"):
        ejkernel.ring_attention(
            q, randn(rng, 1, 128, 2, 8), randn(rng, 1, 128, 2, 8), axis_name="sp", causal=True, **kw
        )
    with pytest.raises(ValueError, match=r"axis_name 'sp' is not bound: call it inside jax.shard_map"):
        ejkernel.ring_attention(q, q, q, axis_name="sp")
    # Without axis_name, mesh or an ambient mesh the sequence is local: a ring of one is attention.
    np.testing.assert_allclose(
        np.asarray(ejkernel.ring_attention(q, q, q)),
        np.asarray(ejkernel.flash_attention(q, q, q, platform="xla")),
        rtol=1e-5,
        atol=1e-5,
    )


def test_bias_must_span_every_key_inside_shard_map(ring_mesh, rng):
    q = randn(rng, 1, 64, 2, 8)
    local_keys_bias = randn(rng, 1, 2, 1, 64 // 8)

    def f(q, bias):
        return ejkernel.ring_attention(q, q, q, bias, axis_name="sp")

    fn = jax.shard_map(f, mesh=ring_mesh, in_specs=(SEQ, P(None, None, None, "sp")), out_specs=SEQ)
    with pytest.raises(ValueError, match=r"bias .* does not broadcast to .* = \(1, 2, 8, 64\)"):
        fn(q, jnp.tile(local_keys_bias, (1, 1, 1, 8)))


# -- several processes -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ring_across_two_processes():
    """2 CPU processes × 4 devices joined by ``jax.distributed.initialize``: the ring crosses
    the process boundary and still equals the reference."""
    cases = ["causal-zigzag-mqa", "segments-causal-zigzag", "window-contiguous"]
    address = f"127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env["RING_LOCAL_DEVICES"] = "4"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "tests.ops.ring_attention._ring_multiprocess", address, "2"]
    procs = [
        subprocess.Popen(
            [*cmd, str(i), *cases], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for i in range(2)
    ]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=MP_TIMEOUT_S)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        outputs = [p.communicate()[0] for p in procs]
        pytest.fail(f"the processes did not finish within {MP_TIMEOUT_S} s:\n" + _report(procs, outputs))
    if any(p.returncode != 0 for p in procs):
        pytest.fail("a process failed:\n" + _report(procs, outputs))
    for i, out in enumerate(outputs):
        done = re.findall(rf"RING-OK (\S+) process={i} devices=8", out)
        assert done == cases, _report(procs, outputs)


def _report(procs, outputs) -> str:
    tail = 60
    parts = []
    for i, (p, out) in enumerate(zip(procs, outputs, strict=True)):
        lines = [ln for ln in (out or "").splitlines() if not ln.startswith("[Gloo]")]
        parts.append(f"--- process {i} (exit {p.returncode}), last {tail} lines:\n" + "\n".join(lines[-tail:]))
    return "\n".join(parts)
