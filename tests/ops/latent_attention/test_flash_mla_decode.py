"""``flash_mla_decode`` beyond the conformance matrix: what its docs promise about ``flash_mla``
(the paged absorbed decode is ``flash_mla`` on the gathered latent, the projections applied by the
caller), memory linear in the context, and bad inputs refused before anything is traced."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.ops.flash_mla_decode import FlashMLADecodeConfig
from ejkernel.ops.flash_mla_decode.cases import MLADecodeCase

HIGHEST = jax.lax.Precision.HIGHEST


@pytest.mark.parametrize("sq", [1, 3])
def test_absorbed_paged_decode_is_flash_mla_on_the_gathered_latent(sq):
    """With ``q = [q_nope · w_kcᵀ | q_rope]`` and the latent rows ``[c | k_rope]`` in pages, the
    latent output times ``w_vc`` is ``flash_mla`` (causal, the queries the last ``sq`` rows)."""
    rng = np.random.default_rng(0)
    b, h, r, dn, dr, dv, ctx, page = 3, 4, 32, 16, 8, 12, 45, 8
    c = rng.standard_normal((b, ctx, r)).astype(np.float32)
    k_rope = rng.standard_normal((b, ctx, dr)).astype(np.float32)
    q = rng.standard_normal((b, sq, h, dn + dr)).astype(np.float32)
    w_kc = (rng.standard_normal((r, h, dn)) / np.sqrt(r)).astype(np.float32)
    w_vc = (rng.standard_normal((r, h, dv)) / np.sqrt(r)).astype(np.float32)
    scale = (dn + dr) ** -0.5
    want = ejkernel.flash_mla(q, c, w_kc, w_vc, None, k_rope, softmax_scale=scale, causal=True, platform="xla")

    pages = -(-ctx // page)
    tables = rng.permutation(b * pages).reshape(b, pages).astype(np.int32)
    rows = np.concatenate([c, k_rope], axis=-1)  # [b, ctx, r + dr]
    cache = np.full((b * pages, page, r + dr), np.nan, np.float32)
    for i in range(b):
        for t in range(ctx):
            cache[tables[i, t // page], t % page] = rows[i, t]
    q_abs = np.concatenate([np.einsum("bshn,rhn->bshr", q[..., :dn], w_kc), q[..., dn:]], axis=-1)
    lens = jnp.full((b,), ctx, jnp.int32)
    latent = ejkernel.flash_mla_decode(q_abs, cache, lens, tables, kv_lora_rank=r, softmax_scale=scale, platform="xla")
    got = jnp.einsum("bshr,rhv->bshv", latent, w_vc, precision=HIGHEST)
    np.testing.assert_allclose(got, want, atol=3e-5)


def test_xla_memory_is_linear_in_the_context():
    """The compiled XLA step's temporaries grow about linearly with the context (one block of
    pages at a time, never [rows, context] logits)."""

    def temp_bytes(ctx: int) -> int:
        kw = MLADecodeCase("m", context_lens=(ctx, ctx), h=16, r=64, dr=16, page_size=16).inputs(0)
        arrays = [kw.pop(n) for n in ("query", "latent_cache", "context_lens", "block_tables")]
        cfg = FlashMLADecodeConfig(block_n=256)

        def f(*a):
            return ejkernel.flash_mla_decode(*a, **kw, platform="xla", cfg=cfg)

        return jax.jit(f).lower(*arrays).compile().memory_analysis().temp_size_in_bytes

    small, large = temp_bytes(2048), temp_bytes(8192)
    assert large < 2 * small, (small, large)  # a [rows, context] temporary would be 4x


def _kw(**changes):
    kw = MLADecodeCase("c", context_lens=(5, 20), sq=2, h=4, r=32, dr=8, page_size=8).inputs(0)
    kw.update(changes)
    return kw


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        (dict(kv_lora_rank=41), ValueError, r"kv_lora_rank \(41\) must be at most the query's last dim .* 40"),
        (dict(kv_lora_rank=0), ValueError, "kv_lora_rank"),
        (dict(kv_lora_rank=3.5), TypeError, "kv_lora_rank"),
        (
            dict(latent_cache=jnp.ones((9, 8, 40), jnp.bfloat16)),
            TypeError,
            "latent_cache .bfloat16. must have the dtype",
        ),
        (dict(latent_cache=jnp.ones((9, 8, 36))), ValueError, "latent_cache must have head_dim = 40"),
        (dict(latent_cache=jnp.ones((9, 8, 1, 40))), ValueError, "latent_cache must be 3-D"),
        (dict(query=jnp.ones((2, 4, 40))), ValueError, "query must be 4-D"),
        (dict(context_lens=jnp.array([5, 20, 1])), ValueError, "context_lens must have batch = 2"),
        (
            dict(context_lens=jnp.array([5, 25])),
            ValueError,
            r"context_lens must be in \[0, max_pages \* page_size = 24\]",
        ),
        (
            dict(block_tables=jnp.full((2, 3), 99, jnp.int32)),
            ValueError,
            "block_tables must index the cache's 11 pages",
        ),
        (dict(block_tables=jnp.zeros((2, 3), jnp.float32)), TypeError, "block_tables"),
        (dict(causal="yes"), TypeError, "causal"),
        (dict(softmax_scale=-1.0), ValueError, "softmax_scale"),
    ],
)
def test_bad_inputs(changes, error, match):
    with pytest.raises(error, match=match):
        ejkernel.flash_mla_decode(**_kw(**changes), platform="xla")


def test_the_split_count_is_refused_by_xla():
    with pytest.raises(ValueError, match="num_splits must be 1"):
        ejkernel.flash_mla_decode(**_kw(), platform="xla", cfg=FlashMLADecodeConfig(block_n=16, num_splits=2))


def test_inference_only():
    """Decode has no gradient: the op says so (not trainable), as the other serving ops do."""
    assert not ejkernel.modules.FlashMLADecode.trainable


@pytest.mark.distributed
@pytest.mark.skipif(len(jax.devices()) < 8, reason="needs 8 (simulated) devices; see tests/conftest.py")
def test_sharded_over_batch_and_heads_with_the_cache_replicated():
    """``mesh=``: batch over one axis (query, context_lens, block_tables), heads over the other,
    the page pool replicated; the default out_specs shard the output and the lse alike."""
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("dp", "tp"))
    kw = MLADecodeCase("s", context_lens=(7, 0, 40, 17), sq=2, h=8, return_lse=True).inputs(0)
    specs = (P("dp", None, "tp", None), P(), P("dp"), P("dp", None))
    out, lse = ejkernel.flash_mla_decode(**kw, platform="xla", mesh=mesh, in_specs=specs)
    want_out, want_lse = ejkernel.flash_mla_decode(**kw, platform="xla")
    assert out.sharding.spec == P("dp", None, "tp", None) and lse.sharding.spec == P("dp", None, "tp")
    np.testing.assert_allclose(out, want_out, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(lse), np.asarray(want_lse))
    two = ejkernel.flash_mla_decode(**kw, platform="xla", mesh=mesh, in_specs=specs[:2])  # the rest follow
    np.testing.assert_array_equal(np.asarray(two[0]), np.asarray(out))
    with pytest.raises(ValueError, match="page_size axis of latent_cache cannot be sharded"):
        ejkernel.flash_mla_decode(**kw, platform="xla", mesh=mesh, in_specs=(specs[0], P(None, "tp", None)))
