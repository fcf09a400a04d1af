"""The ops under ``mesh=``: ``jax.shard_map`` over batch and heads gives the unsharded result.

The test process has 8 simulated CPU devices (``tests/conftest.py``). Most tests use a 2×4 mesh
``("dp", "tp")`` with batch over ``"dp"`` and heads over ``"tp"``; each sharded call is compared
with the same call unsharded and/or with the reference in :mod:`ejkernel.testing`. The derived
specs of the optional arrays (bias, segment ids, masks, sinks, cum_seqlens, page tables), the
per-shard dropout streams and the errors for shardings the ops cannot run under are covered too.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import ejkernel
from ejkernel.ops import record_dispatches
from ejkernel.testing import attention_reference, page_attention_reference

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.skipif(len(jax.devices()) < 8, reason="needs 8 (simulated) devices; see tests/conftest.py"),
]

ATOL = 2e-5
RTOL = 2e-5
SPEC = P("dp", None, "tp", None)  # [batch, seq, heads, head_dim]: batch over dp, heads over tp
SPECS = (SPEC, SPEC, SPEC)
DENSE_OPS = [ejkernel.flash_attention, ejkernel.scaled_dot_product_attention]


@pytest.fixture(scope="module")
def mesh():
    return Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("dp", "tp"))


@pytest.fixture(scope="module")
def heads_mesh():
    """All 8 devices on the head axis (batch 1: varlen, decode over heads only)."""
    return Mesh(np.array(jax.devices()[:8]).reshape(1, 8), ("dp", "tp"))


def qkv(rng, b=2, sq=16, sk=16, h=8, hk=8, d=16):
    return (
        jnp.asarray(rng.standard_normal((b, sq, h, d)), jnp.float32),
        jnp.asarray(rng.standard_normal((b, sk, hk, d)), jnp.float32),
        jnp.asarray(rng.standard_normal((b, sk, hk, d)), jnp.float32),
    )


def assert_sharded(x, mesh, spec):
    """``x`` is laid out as ``spec`` on ``mesh`` (trailing ``None`` entries do not matter)."""
    assert x.sharding.is_equivalent_to(NamedSharding(mesh, spec), x.ndim), (x.sharding, spec)


def close(actual, expected, atol=ATOL, rtol=RTOL):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), atol=atol, rtol=rtol)


# -- dense attention: forward ----------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("hk", [8, 4], ids=["mha", "gqa"])
def test_flash_attention_sharded_equals_unsharded(mesh, rng, hk, causal):
    q, k, v = qkv(rng, hk=hk)
    with record_dispatches() as log:
        out = ejkernel.flash_attention(q, k, v, causal=causal, mesh=mesh, in_specs=SPECS, out_specs=SPEC)
    # It really ran under shard_map: the implementation saw one shard (batch 2/2, heads 8/4).
    assert len(log) >= 1
    assert all("query=f32[1,16,2,16]" in d.key for d in log), [d.key for d in log]
    assert all(f"key=f32[1,16,{hk // 4},16]" in d.key for d in log), [d.key for d in log]
    assert out.shape == q.shape
    assert_sharded(out, mesh, SPEC)
    plain = ejkernel.flash_attention(q, k, v, causal=causal)
    close(out, plain)
    close(out, attention_reference(q, k, v, causal=causal))


def test_batch_only_and_heads_only_and_fused_axes(mesh, rng):
    """Batch over both mesh axes at once (8 shards of batch 8), or one axis alone, or none."""
    q, k, v = qkv(rng, b=8, sq=8, sk=12, h=4, hk=2)
    plain = ejkernel.flash_attention(q, k, v, causal=True)
    for spec in (P(("dp", "tp")), P("dp"), P(None, None, "dp"), P()):
        with record_dispatches() as log:
            out = ejkernel.flash_attention(q, k, v, causal=True, mesh=mesh, in_specs=(spec,) * 3)
        close(out, plain)
        nb = {P(("dp", "tp")): 1, P("dp"): 4}.get(spec, 8)
        nh = 2 if spec == P(None, None, "dp") else 4
        assert f"query=f32[{nb},8,{nh},16]" in log[0].key, (spec, log[0].key)


def test_sharded_call_under_jit_with_default_out_specs(mesh, rng):
    q, k, v = qkv(rng, hk=4)

    @jax.jit
    def f(q, k, v):
        return ejkernel.flash_attention(q, k, v, causal=True, mesh=mesh, in_specs=SPECS)

    with record_dispatches() as log:
        out = f(q, k, v)
    assert any("query=f32[1,16,2,16]" in d.key for d in log), [d.key for d in log]
    # out_specs defaults to the query's spec.
    assert_sharded(out, mesh, SPEC)
    close(out, ejkernel.flash_attention(q, k, v, causal=True))
    # A second call with other values reuses the trace and is still right.
    q2 = q * 0.5 + 0.25
    close(f(q2, k, v), ejkernel.flash_attention(q2, k, v, causal=True))


def test_short_specs_replicated_over_the_other_axis(mesh, rng):
    """``P("dp")`` pads with ``None``: heads whole on every tp device, the output replicated over tp."""
    q, k, v = qkv(rng)
    with record_dispatches() as log:
        out = ejkernel.flash_attention(q, k, v, mesh=mesh, in_specs=(P("dp"),) * 3, out_specs=P("dp"))
    assert "query=f32[1,16,8,16]" in log[0].key
    close(out, ejkernel.flash_attention(q, k, v))


@pytest.mark.parametrize("op", DENSE_OPS, ids=lambda f: f.__name__)
def test_dense_ops_sharded_with_seq_q_ne_seq_k(op, mesh, rng):
    q, k, v = qkv(rng, sq=12, sk=20, hk=4)
    with record_dispatches() as log:
        out = op(q, k, v, causal=True, mesh=mesh, in_specs=SPECS, out_specs=SPEC)
    assert log and log[0].op == op.__name__
    assert "query=f32[1,12,2,16]" in log[0].key
    close(out, op(q, k, v, causal=True))
    close(out, attention_reference(q, k, v, causal=True))


def test_window_softcap_scale_and_value_head_dim_pass_through(mesh, rng):
    q, k, _ = qkv(rng, sq=16, sk=16, hk=4)
    v = jnp.asarray(rng.standard_normal((2, 16, 4, 24)), jnp.float32)  # value_head_dim != head_dim
    kw = {"sliding_window": (3, 1), "logits_soft_cap": 5.0, "softmax_scale": 0.3}
    out = ejkernel.flash_attention(q, k, v, mesh=mesh, in_specs=SPECS, **kw)
    assert out.shape == (2, 16, 8, 24)
    close(out, ejkernel.flash_attention(q, k, v, **kw))
    close(out, attention_reference(q, k, v, **kw))


# -- dense attention: gradients --------------------------------------------------------------


@pytest.mark.parametrize("hk", [8, 4], ids=["mha", "gqa"])
def test_gradients_through_sharded_call(mesh, rng, hk):
    q, k, v = qkv(rng, hk=hk)
    w = jnp.asarray(rng.standard_normal(q.shape), jnp.float32)

    def loss(q, k, v, sharded):
        extra = {"mesh": mesh, "in_specs": SPECS} if sharded else {}
        return jnp.sum(ejkernel.flash_attention(q, k, v, causal=True, **extra) * w)

    g_sharded = jax.grad(loss, argnums=(0, 1, 2))(q, k, v, True)
    g_plain = jax.grad(loss, argnums=(0, 1, 2))(q, k, v, False)
    g_ref = jax.grad(lambda q, k, v: jnp.sum(attention_reference(q, k, v, causal=True) * w), argnums=(0, 1, 2))(q, k, v)
    for name, a, b, r in zip("qkv", g_sharded, g_plain, g_ref, strict=True):
        assert a.shape == b.shape, name
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=ATOL, rtol=RTOL, err_msg=f"d{name}")
        np.testing.assert_allclose(np.asarray(a), np.asarray(r), atol=1e-4, rtol=1e-4, err_msg=f"d{name}")


def test_gradients_of_replicated_bias_and_sinks(mesh, rng):
    """A bias [1, h, 1, sk] and sinks [h] are replicated over dp: their gradients sum both shards."""
    q, k, v = qkv(rng, hk=4)
    bias = jnp.asarray(rng.standard_normal((1, 8, 1, 16)) * 0.5, jnp.float32)
    aux = jnp.asarray(rng.standard_normal((8,)), jnp.float32)
    w = jnp.asarray(rng.standard_normal(q.shape), jnp.float32)

    def loss(q, bias, aux, sharded):
        extra = {"mesh": mesh, "in_specs": SPECS} if sharded else {}
        return jnp.sum(ejkernel.flash_attention(q, k, v, bias, softmax_aux=aux, causal=True, **extra) * w)

    g_sharded = jax.jit(jax.grad(loss, argnums=(0, 1, 2)), static_argnums=3)(q, bias, aux, True)
    g_plain = jax.grad(loss, argnums=(0, 1, 2))(q, bias, aux, False)
    for name, a, b in zip(("query", "bias", "softmax_aux"), g_sharded, g_plain, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4, rtol=1e-4, err_msg=name)


# -- dense attention: derived specs of the optional arrays -----------------------------------


@pytest.mark.parametrize(
    ("shape", "explicit"),
    [
        ((2, 8, 16, 16), None),
        ((2, 8, 16, 16), P("dp", "tp", None, None)),
        ((1, 8, 1, 16), None),
        ((1, 8, 1, 16), P(None, "tp", None, None)),
        ((2, 1, 16, 1), P("dp")),
        ((16, 16), P()),
    ],
    ids=["full", "full-explicit", "heads-keys", "heads-keys-explicit", "batch-queries-explicit", "2d-explicit"],
)
def test_bias_spec_is_derived(mesh, rng, shape, explicit):
    q, k, v = qkv(rng, hk=4)
    bias = jnp.asarray(rng.standard_normal(shape), jnp.float32)
    in_specs = SPECS if explicit is None else (*SPECS, explicit)
    with record_dispatches() as log:
        out = ejkernel.flash_attention(q, k, v, bias, causal=True, mesh=mesh, in_specs=in_specs)
    shape4 = (1,) * (4 - len(shape)) + shape
    local = (shape4[0] // 2 if shape4[0] > 1 else 1, shape4[1] // 4 if shape4[1] > 1 else 1, *shape4[2:])
    assert f"bias=f32[{','.join(map(str, local))}]" in log[0].key, log[0].key
    close(out, ejkernel.flash_attention(q, k, v, bias, causal=True))
    close(out, attention_reference(q, k, v, bias, causal=True))


def test_bias_explicit_spec_must_match_the_derived_one(mesh, rng):
    q, k, v = qkv(rng)
    bias = jnp.asarray(rng.standard_normal((1, 8, 1, 16)), jnp.float32)
    with pytest.raises(ValueError, match=r"batch axis of bias has size 1 \(broadcast\) and cannot be sharded"):
        ejkernel.flash_attention(q, k, v, bias, mesh=mesh, in_specs=(*SPECS, P("dp", "tp", None, None)))
    with pytest.raises(ValueError, match="bias"):
        ejkernel.flash_attention(q, k, v, bias, mesh=mesh, in_specs=(*SPECS, P(None, None, None, None)))


def test_segment_ids_are_sharded_with_the_batch(mesh, rng):
    q, k, v = qkv(rng, hk=4)
    seg = np.array([[0] * 5 + [1] * 8 + [-1] * 3, [0] * 2 + [1] * 2 + [2] * 12], np.int32)
    mi = ejkernel.MaskInfo.from_segments(seg)
    with record_dispatches() as log:
        out = ejkernel.flash_attention(q, k, v, mask_info=mi.with_causal(), mesh=mesh, in_specs=SPECS)
    assert "q_segment_ids=i32" in log[0].key and "query=f32[1," in log[0].key
    close(out, ejkernel.flash_attention(q, k, v, mask_info=mi.with_causal()))
    close(out, attention_reference(q, k, v, mask_info=mi.with_causal()))
    assert np.all(np.asarray(out[0, 13:]) == 0), "padding tokens give zeros"


def test_cross_attention_segment_ids(mesh, rng):
    q, k, v = qkv(rng, sq=8, sk=12, hk=4)
    q_seg = np.array([[0] * 3 + [1] * 5, [1] * 8], np.int32)
    kv_seg = np.array([[0] * 6 + [1] * 6, [0] * 4 + [1] * 7 + [-1]], np.int32)
    mi = ejkernel.MaskInfo.from_segments(q_seg, kv_seg)
    out = ejkernel.scaled_dot_product_attention(q, k, v, mask_info=mi, mesh=mesh, in_specs=SPECS)
    close(out, ejkernel.scaled_dot_product_attention(q, k, v, mask_info=mi))
    close(out, attention_reference(q, k, v, mask_info=mi))


@pytest.mark.parametrize("mask_heads", [1, 8], ids=["mask-b1ss", "mask-bhss"])
def test_pairwise_mask_spec_is_derived(mesh, rng, mask_heads):
    q, k, v = qkv(rng, hk=4)
    allowed = rng.random((2, mask_heads, 16, 16)) < 0.6
    allowed[0, :, 4] = False  # a row that sees nothing
    mi = ejkernel.MaskInfo.from_attention_mask(allowed)
    with record_dispatches() as log:
        out = ejkernel.flash_attention(q, k, v, mask_info=mi, mesh=mesh, in_specs=SPECS)
    local_heads = 1 if mask_heads == 1 else 2
    assert f"attention_mask=bool[1,{local_heads},16,16]" in log[0].key, log[0].key
    close(out, ejkernel.flash_attention(q, k, v, mask_info=mi))
    close(out, attention_reference(q, k, v, mask_info=mi))
    assert np.all(np.asarray(out[0, 4]) == 0)


def test_batch_broadcast_pairwise_mask(mesh, rng):
    q, k, v = qkv(rng, hk=4)
    mi = ejkernel.MaskInfo.from_attention_mask(rng.random((1, 1, 16, 16)) < 0.7)
    out = ejkernel.flash_attention(q, k, v, mask_info=mi, mesh=mesh, in_specs=SPECS)
    close(out, ejkernel.flash_attention(q, k, v, mask_info=mi))
    close(out, attention_reference(q, k, v, mask_info=mi))


@pytest.mark.parametrize("aux_shape", [(8,), (8, 3)], ids=["sinks-h", "sinks-h-n"])
def test_softmax_aux_is_sharded_with_the_heads(mesh, rng, aux_shape):
    q, k, v = qkv(rng, hk=4)
    aux = jnp.asarray(rng.standard_normal(aux_shape) + np.arange(8).reshape(8, *([1] * (len(aux_shape) - 1))) * 0.3)
    aux = aux.astype(jnp.float32)
    with record_dispatches() as log:
        out = ejkernel.flash_attention(q, k, v, softmax_aux=aux, causal=True, mesh=mesh, in_specs=SPECS)
    n = aux_shape[1] if len(aux_shape) == 2 else 1
    assert f"softmax_aux=f32[2,{n}]" in log[0].key, log[0].key
    close(out, ejkernel.flash_attention(q, k, v, softmax_aux=aux, causal=True))
    close(out, attention_reference(q, k, v, softmax_aux=aux, causal=True))


@pytest.mark.parametrize(("h", "causal"), [(8, True), (16, False)], ids=["mha-causal", "gqa-full"])
def test_varlen_with_heads_sharded(heads_mesh, rng, h, causal):
    lens_q = [5, 1, 9, 3]
    lens_k = [6, 4, 9, 5]
    q = jnp.asarray(rng.standard_normal((1, sum(lens_q) + 2, h, 16)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((1, sum(lens_k) + 1, 8, 16)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((1, sum(lens_k) + 1, 8, 16)), jnp.float32)
    cu = {
        "cum_seqlens_q": jnp.asarray(np.cumsum([0, *lens_q]), jnp.int32),
        "cum_seqlens_k": jnp.asarray(np.cumsum([0, *lens_k]), jnp.int32),
    }
    spec = P(None, None, "tp", None)
    with record_dispatches() as log:
        out = ejkernel.flash_attention(q, k, v, causal=causal, mesh=heads_mesh, in_specs=(spec,) * 3, **cu)
    assert f"query=f32[1,{q.shape[1]},{h // 8},16]" in log[0].key and "cum_seqlens_q=i32[5]" in log[0].key, log[0].key
    close(out, ejkernel.flash_attention(q, k, v, causal=causal, **cu))
    close(out, attention_reference(q, k, v, causal=causal, **cu))
    assert np.all(np.asarray(out[:, sum(lens_q) :]) == 0)


def test_varlen_on_a_one_axis_mesh(rng):
    mesh1 = Mesh(np.array(jax.devices()[:8]), ("tp",))
    q, k, v = qkv(rng, b=1, sq=20, sk=20, h=8, hk=8)
    cu = jnp.asarray([0, 7, 12, 20], jnp.int32)
    spec = P(None, None, "tp", None)
    out = ejkernel.scaled_dot_product_attention(
        q, k, v, cu_seqlens_q=cu, causal=True, mesh=mesh1, in_specs=(spec,) * 3, out_specs=spec
    )
    close(out, ejkernel.scaled_dot_product_attention(q, k, v, cu_seqlens_q=cu, causal=True))
    close(out, attention_reference(q, k, v, cum_seqlens_q=cu, causal=True))


def test_sdpa_per_example_lengths_under_a_mesh(mesh, rng):
    """``scaled_dot_product_attention``'s ``cum_seqlens_q/k`` (per-example lengths) follow the batch's sharding."""
    q, k, v = qkv(rng, hk=4)
    lens = jnp.asarray([16, 9], jnp.int32)
    out = ejkernel.scaled_dot_product_attention(q, k, v, None, lens, lens, causal=True, mesh=mesh, in_specs=SPECS)
    want = jax.nn.dot_product_attention(q, k, v, query_seq_lengths=lens, key_value_seq_lengths=lens, is_causal=True)
    close(out, want)


# -- dropout ---------------------------------------------------------------------------------


def test_dropout_under_mesh_is_deterministic_and_finite(mesh, rng):
    q, k, v = qkv(rng, hk=4)

    def run(seed):
        return np.asarray(
            ejkernel.flash_attention(
                q, k, v, causal=True, dropout_prob=0.3, dropout_seed=seed, mesh=mesh, in_specs=SPECS
            )
        )

    a, b, c = run(11), run(11), run(12)
    assert np.all(np.isfinite(a))
    assert np.array_equal(a, b), "the same seed must give bit-identical outputs"
    assert not np.allclose(a, c), "another seed must give another mask"
    # Under jit with the seed as a traced array, the same stream.
    jitted = jax.jit(
        lambda s: ejkernel.flash_attention(
            q, k, v, causal=True, dropout_prob=0.3, dropout_seed=s, mesh=mesh, in_specs=SPECS
        )
    )
    assert np.array_equal(np.asarray(jitted(jnp.uint32(11))), a)


def test_dropout_differs_between_batch_shards(mesh, rng):
    """Identical batch elements on two dp shards: each shard must draw its own dropout mask."""
    q, k, v = qkv(rng, b=1, hk=4)
    q2, k2, v2 = (jnp.concatenate([x, x]) for x in (q, k, v))
    spec = P("dp")
    out = np.asarray(
        ejkernel.flash_attention(q2, k2, v2, dropout_prob=0.5, dropout_seed=7, mesh=mesh, in_specs=(spec,) * 3)
    )
    assert np.all(np.isfinite(out))
    assert not np.allclose(out[0], out[1]), "both dp shards drew the same dropout pattern"


def test_dropout_differs_between_head_shards(mesh, rng):
    """Identical heads on different tp shards (same local head index) must not share a mask."""
    q, k, v = qkv(rng, b=1, h=1, hk=1)
    q8, k8, v8 = (jnp.tile(x, (1, 1, 8, 1)) for x in (q, k, v))
    spec = P(None, None, "tp", None)
    out = np.asarray(
        ejkernel.flash_attention(q8, k8, v8, dropout_prob=0.5, dropout_seed=7, mesh=mesh, in_specs=(spec,) * 3)
    )
    assert np.all(np.isfinite(out))
    # Heads 0, 2, 4, 6 are local head 0 of the four tp shards.
    for a in (0, 2, 4):
        for b in range(a + 2, 8, 2):
            assert not np.allclose(out[:, :, a], out[:, :, b]), (a, b)


def test_dropout_with_replicated_specs_equals_unsharded(mesh, rng):
    """Nothing sharded: every device computes the whole problem with the caller's seed."""
    q, k, v = qkv(rng, hk=4)
    kw = {"dropout_prob": 0.25, "dropout_seed": 3, "causal": True}
    out = ejkernel.flash_attention(q, k, v, mesh=mesh, in_specs=(P(),) * 3, **kw)
    close(out, ejkernel.flash_attention(q, k, v, **kw), atol=1e-6, rtol=1e-6)
    close(out, attention_reference(q, k, v, **kw))


def test_dropout_gradients_under_mesh_are_finite_and_match_forward_mask(mesh, rng):
    """The backward pass uses the same per-shard mask as the forward (linear in v: dv = Pᵀ·w)."""
    q, k, v = qkv(rng, hk=4)
    w = jnp.asarray(rng.standard_normal(q.shape), jnp.float32)
    kw = {"dropout_prob": 0.3, "dropout_seed": 5, "mesh": mesh, "in_specs": SPECS}

    def f(v):
        return ejkernel.flash_attention(q, k, v, **kw)

    out, vjp = jax.vjp(f, v)
    (dv,) = vjp(w)
    assert np.all(np.isfinite(np.asarray(dv)))
    # out is linear in v: <f(v), w> == <v, dv>.
    np.testing.assert_allclose(float(jnp.sum(out * w)), float(jnp.sum(v * dv)), rtol=1e-4)


# -- page attention ----------------------------------------------------------------------------


def paged_inputs(rng, b=4, h=8, hk=4, d=16, block_size=4, max_blocks=4, lens=(3, 16, 9, 1), seed=0):
    """Random caches, a random permutation of pages for the block tables and ragged lengths."""
    num_blocks = b * max_blocks + 3
    kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
    return {
        "query": jax.random.normal(kq, (b, h, d), jnp.float32),
        "key_cache": jax.random.normal(kk, (num_blocks, block_size, hk, d), jnp.float32),
        "value_cache": jax.random.normal(kv, (num_blocks, block_size, hk, d), jnp.float32),
        "context_lens": jnp.asarray(lens[:b], jnp.int32),
        "block_tables": jnp.asarray(rng.permutation(num_blocks)[: b * max_blocks].reshape(b, max_blocks), jnp.int32),
        "cache_layout": "blocks_tokens_heads",  # these shapes fit both layouts
    }


CACHE_SPEC = P(None, None, "tp", None)


@pytest.mark.parametrize("hk", [8, 4], ids=["mha", "gqa"])
def test_page_attention_heads_sharded(mesh, rng, hk):
    kw = paged_inputs(rng, hk=hk)
    specs = (P(None, "tp", None), CACHE_SPEC, CACHE_SPEC)
    with record_dispatches() as log:
        out = ejkernel.page_attention(**kw, mesh=mesh, in_specs=specs)
    assert log[0].op == "page_attention"
    assert "query=f32[4,2,16]" in log[0].key and f"key_cache=f32[19,4,{hk // 4},16]" in log[0].key, log[0].key
    assert_sharded(out, mesh, P(None, "tp", None))
    close(out, ejkernel.page_attention(**kw))
    close(out, page_attention_reference(**kw))


def test_page_attention_earlier_cache_layout_sharded(mesh, rng):
    """[num_blocks, num_kv_heads, block_size, dim] caches shard on their kv-head axis (axis 1)."""
    kw = paged_inputs(rng, hk=4, lens=(7, 2, 16, 12))
    kw["cache_layout"] = "blocks_heads_tokens"
    kw["key_cache"], kw["value_cache"] = (jnp.swapaxes(kw[n], 1, 2) for n in ("key_cache", "value_cache"))
    cache = P(None, "tp", None, None)
    specs = (P("dp", "tp", None), cache, cache, P("dp"), P("dp", None))
    with record_dispatches() as log:
        out = ejkernel.page_attention(**kw, mesh=mesh, in_specs=specs)
    assert "key_cache=f32[19,1,4,16]" in log[0].key and "cache_layout=blocks_heads_tokens" in log[0].key, log[0].key
    close(out, page_attention_reference(**kw))
    with pytest.raises(ValueError, match="block_size axis of key_cache cannot be sharded"):
        ejkernel.page_attention(**kw, mesh=mesh, in_specs=(P(None, "tp", None), CACHE_SPEC, CACHE_SPEC))


def test_page_attention_batch_and_heads_sharded(mesh, rng):
    kw = paged_inputs(rng, hk=4, lens=(7, 2, 16, 12))
    specs = (P("dp", "tp", None), CACHE_SPEC, CACHE_SPEC, P("dp"), P("dp", None))
    with record_dispatches() as log:
        out = ejkernel.page_attention(**kw, mesh=mesh, in_specs=specs)
    assert "query=f32[2,2,16]" in log[0].key and "block_tables=i32[2,4]" in log[0].key, log[0].key
    close(out, ejkernel.page_attention(**kw))
    close(out, page_attention_reference(**kw))


def test_page_attention_batch_sharded_caches_replicated(mesh, rng):
    """Three in_specs with the query's batch sharded: context_lens and block_tables follow it."""
    kw = paged_inputs(rng, hk=2, lens=(5, 13, 0, 8))
    specs = (P("dp", None, None), P(), P())
    with record_dispatches() as log:
        out = ejkernel.page_attention(**kw, mesh=mesh, in_specs=specs, out_specs=P("dp", None, None))
    assert "query=f32[2,8,16]" in log[0].key and "block_tables=i32[2,4]" in log[0].key, log[0].key
    close(out, ejkernel.page_attention(**kw))
    close(out, page_attention_reference(**kw))
    assert np.all(np.asarray(out[2]) == 0), "an empty context gives zeros"


def test_page_attention_four_dim_query(mesh, rng):
    kw = paged_inputs(rng, hk=4)
    kw["query"] = kw["query"][:, None]
    specs = (P("dp", None, "tp", None), CACHE_SPEC, CACHE_SPEC, P("dp"), P("dp", None))
    out = ejkernel.page_attention(**kw, mesh=mesh, in_specs=specs)
    assert out.shape == (4, 1, 8, 16)
    assert_sharded(out, mesh, P("dp", None, "tp", None))
    close(out, ejkernel.page_attention(**kw))
    close(out, page_attention_reference(**kw))
    # The 3-entry form (query heads only) as well.
    out3 = ejkernel.page_attention(**kw, mesh=mesh, in_specs=(P(None, None, "tp", None), CACHE_SPEC, CACHE_SPEC))
    close(out3, page_attention_reference(**kw))


def test_page_attention_sinks_window_and_jit_under_mesh(mesh, rng):
    kw = paged_inputs(rng, hk=4, lens=(14, 6, 16, 3))
    aux = jnp.asarray(rng.standard_normal(8), jnp.float32)
    opts = {"softmax_aux": aux, "sliding_window": 5, "logits_soft_cap": 10.0}
    opts["cache_layout"] = kw.pop("cache_layout")  # a str: not a jit argument
    specs = (P("dp", "tp", None), CACHE_SPEC, CACHE_SPEC, P("dp"), P("dp", None))
    out = jax.jit(lambda kw: ejkernel.page_attention(**kw, mesh=mesh, in_specs=specs, **opts))(kw)
    close(out, ejkernel.page_attention(**kw, **opts))
    close(out, page_attention_reference(**kw, **opts))


def test_page_attention_heads_only_mesh(heads_mesh, rng):
    kw = paged_inputs(rng, b=3, h=16, hk=8, lens=(11, 4, 16))
    specs = (P(None, "tp", None), CACHE_SPEC, CACHE_SPEC)
    out = ejkernel.page_attention(**kw, mesh=heads_mesh, in_specs=specs)
    close(out, ejkernel.page_attention(**kw))
    close(out, page_attention_reference(**kw))


# -- errors ------------------------------------------------------------------------------------


def dense_error_cases():
    b_only = P("dp", None, None, None)
    return [
        (
            "q-seq",
            {},
            (P("dp", "tp", None, None), b_only, b_only),
            ValueError,
            r"seq_q axis of query cannot be sharded.*ring_attention",
        ),
        ("k-seq", {}, (b_only, P("dp", "tp", None, None), b_only), ValueError, r"seq_k axis of key cannot be sharded"),
        (
            "v-seq",
            {},
            (b_only, b_only, P("dp", "tp", None, None)),
            ValueError,
            r"seq_k axis of value cannot be sharded",
        ),
        (
            "q-dim",
            {},
            (P("dp", None, None, "tp"), b_only, b_only),
            ValueError,
            r"head_dim axis of query cannot be sharded",
        ),
        (
            "k-dim",
            {},
            (b_only, P("dp", None, None, "tp"), b_only),
            ValueError,
            r"head_dim axis of key cannot be sharded",
        ),
        ("k-heads", {}, (SPEC, b_only, SPEC), ValueError, r"key must be sharded like query"),
        ("v-batch", {}, (SPEC, SPEC, P(None, None, "tp", None)), ValueError, r"value must be sharded like query"),
        ("kv-heads", {"hk": 2}, SPECS, ValueError, r"num_kv_heads 2 is not divisible by the 4 shards"),
        ("heads", {"h": 6, "hk": 6}, SPECS, ValueError, r"num_heads 6 is not divisible by the 4 shards"),
        ("batch", {"b": 3}, SPECS, ValueError, r"batch 3 is not divisible by the 2 shards"),
        ("two-specs", {}, (SPEC, SPEC), ValueError, r"in_specs has 2 entries; expected at least 3 \(query, key, value"),
        ("four-specs-no-bias", {}, (*SPECS, P()), ValueError, r"in_specs gives a spec for bias, which is not passed"),
        ("one-spec", {}, SPEC, TypeError, r"in_specs must be a tuple of PartitionSpecs"),
        ("not-a-spec", {}, (SPEC, ("dp", None, "tp", None), SPEC), TypeError, r"in_specs entry of key"),
        ("five-dims", {}, (P("dp", None, "tp", None, None), SPEC, SPEC), ValueError, r"query has 5 entries"),
        ("no-axis", {}, (P("dp", None, "xx", None),) * 3, ValueError, r"no axis 'xx'"),
        ("no-axis-batch", {}, (P("batch", None, "tp", None),) * 3, ValueError, r"no axis 'batch'"),
    ]


@pytest.mark.parametrize(
    ("shape_kw", "in_specs", "exc", "match"),
    [c[1:] for c in dense_error_cases()],
    ids=[c[0] for c in dense_error_cases()],
)
@pytest.mark.parametrize("op", DENSE_OPS, ids=lambda f: f.__name__)
def test_dense_sharding_errors(op, mesh, rng, shape_kw, in_specs, exc, match):
    q, k, v = qkv(rng, **shape_kw)
    with pytest.raises(exc, match=match):
        op(q, k, v, mesh=mesh, in_specs=in_specs)


def test_mesh_option_errors(mesh, rng):
    q, k, v = qkv(rng)
    with pytest.raises(TypeError, match=r"mesh must be a jax\.sharding\.Mesh"):
        ejkernel.flash_attention(q, k, v, mesh="dp", in_specs=SPECS)
    with pytest.raises(TypeError, match=r"mesh must be a jax\.sharding\.Mesh"):
        ejkernel.flash_attention(q, k, v, mesh=np.array(jax.devices()), in_specs=SPECS)
    with pytest.raises(ValueError, match="mesh= needs in_specs"):
        ejkernel.flash_attention(q, k, v, mesh=mesh)
    with pytest.raises(ValueError, match="in_specs/out_specs need mesh="):
        ejkernel.flash_attention(q, k, v, in_specs=SPECS)
    with pytest.raises(ValueError, match="in_specs/out_specs need mesh="):
        ejkernel.page_attention(**paged_inputs(rng), out_specs=P())


def test_varlen_rejects_sharded_batch_of_one(mesh, rng):
    q, k, v = qkv(rng, b=1)
    cu = jnp.asarray([0, 6, 16], jnp.int32)
    with pytest.raises(ValueError, match=r"batch 1 is not divisible by the 2 shards"):
        ejkernel.flash_attention(q, k, v, cum_seqlens_q=cu, mesh=mesh, in_specs=SPECS)


def page_error_cases():
    q3 = P(None, "tp", None)
    return [
        (
            "blocks",
            (q3, P("tp", None, None, None), CACHE_SPEC),
            ValueError,
            r"num_blocks axis of key_cache cannot be sharded.*shared by every sequence",
        ),
        (
            "slots",
            (q3, CACHE_SPEC, P(None, "tp", None, None)),
            ValueError,
            r"block_size axis of value_cache cannot be sharded",
        ),
        (
            "cache-dim",
            (q3, P(None, None, None, "tp"), CACHE_SPEC),
            ValueError,
            r"head_dim axis of key_cache cannot be sharded",
        ),
        ("cache-unsharded", (q3, P(), P()), ValueError, r"key_cache must be sharded like query over num_kv_heads"),
        ("q-dim", (P(None, None, "tp"), P(), P()), ValueError, r"head_dim axis of query cannot be sharded"),
        ("lens", (P("dp", "tp", None), CACHE_SPEC, CACHE_SPEC, P(), P("dp", None)), ValueError, r"context_lens must"),
        ("tables", (P("dp", "tp", None), CACHE_SPEC, CACHE_SPEC, P("dp"), P("dp", "tp")), ValueError, r"block_tables"),
        ("two", (q3, CACHE_SPEC), ValueError, r"expected at least 3 \(query, key_cache, value_cache;"),
        ("one", q3, TypeError, r"in_specs must be a tuple"),
        ("no-axis", (P(None, "xx", None), P(None, None, "xx", None), P(None, None, "xx", None)), ValueError, "'xx'"),
    ]


@pytest.mark.parametrize(
    ("in_specs", "exc", "match"), [c[1:] for c in page_error_cases()], ids=[c[0] for c in page_error_cases()]
)
def test_page_attention_sharding_errors(mesh, rng, in_specs, exc, match):
    kw = paged_inputs(rng, hk=4)
    with pytest.raises(exc, match=match):
        ejkernel.page_attention(**kw, mesh=mesh, in_specs=in_specs)


def test_page_attention_shape_errors(mesh, rng):
    specs = (P(None, "tp", None), CACHE_SPEC, CACHE_SPEC)
    with pytest.raises(ValueError, match=r"num_kv_heads 2 is not divisible by the 4 shards"):
        ejkernel.page_attention(**paged_inputs(rng, hk=2), mesh=mesh, in_specs=specs)
    with pytest.raises(ValueError, match=r"batch 3 is not divisible"):
        ejkernel.page_attention(
            **paged_inputs(rng, b=3), mesh=mesh, in_specs=(P("dp", "tp", None), CACHE_SPEC, CACHE_SPEC)
        )
    kw = paged_inputs(rng)
    kw["query"] = kw["query"][:, None]
    with pytest.raises(ValueError, match=r"axis 1 of query cannot be sharded"):
        ejkernel.page_attention(**kw, mesh=mesh, in_specs=(P(None, "tp", None, None), P(), P()))
