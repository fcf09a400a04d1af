"""Each difference from the earlier releases that review listed ("drop-in, without silent
changes") is either compatible here, checked by calling it, or named on the migration page
(``docs/pages/migrating.md``) with what to use instead, and then its documented behaviour is
checked too. A new item joins the list with its check and, if it differs, the page's words."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import ejkernel
from ejkernel.ops import Policy
from ejkernel.testing import attention_reference

PAGE = (Path(__file__).resolve().parents[2] / "docs/pages/migrating.md").read_text()


def normal(seed, shape):
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def _ring_run():
    mesh = Mesh(np.array(jax.devices()[:4]), ("sp",))
    return {"axis_name": "sp", "mesh": mesh, "in_specs": (P(None, "sp", None, None),) * 3}


# -- the checks ---------------------------------------------------------------------------------


def sdpa_lengths():
    q = normal(0, (2, 12, 2, 16))
    lens = jnp.array([12, 5], jnp.int32)
    want = jax.nn.dot_product_attention(q, q, q, query_seq_lengths=lens, key_value_seq_lengths=lens)
    close(ejkernel.scaled_dot_product_attention(q, q, q, None, lens, lens), want)
    cu = jnp.array([0, 5, 12], jnp.int32)
    close(ejkernel.scaled_dot_product_attention(q[:1], q[:1], q[:1], cu_seqlens_q=cu), attention_reference(
        q[:1], q[:1], q[:1], cum_seqlens_q=cu
    ))  # fmt: skip


def ring_causal_block_size():
    q = normal(1, (1, 16, 2, 16))
    close(
        ejkernel.ring_attention(q, q, q, causal_block_size=8, **_ring_run()), attention_reference(q, q, q, causal=True)
    )


def page_attention_import():
    from ejkernel.kernels._xla import page_attention
    from ejkernel.kernels._xla.page_attention import page_attention as same

    assert inspect.isfunction(page_attention) and page_attention is same


def ring_attention_sinks():
    q = normal(2, (1, 16, 2, 16))
    out = ejkernel.ring_attention(q, q, q, causal=True, sliding_window=(2, 0), attention_sink_size=3, **_ring_run())
    i, j = np.arange(16)[:, None], np.arange(16)[None, :]
    mi = ejkernel.MaskInfo.from_attention_mask(((j <= i) & ((j >= i - 2) | (j < 3)))[None, None])
    close(out, attention_reference(q, q, q, mask_info=mi))


def attention_mask():
    q = normal(3, (1, 8, 2, 16))
    mask = jnp.asarray(np.tril(np.ones((8, 8), bool)))[None]  # [batch, seq_q, seq_k]
    out, _ = ejkernel.attention(q, q, q, attention_mask=mask, dtype=jnp.float32)
    close(out, attention_reference(q, q, q, causal=True))


def autotune_default():
    assert Policy.from_env({}).autotune is False  # the documented default here
    assert Policy.from_env({"EJKERNEL_AUTOTUNE_POLICY": "autotune"}).autotune is True  # the earlier variable
    assert Policy.from_env({"EJKERNEL_AUTOTUNE_POLICY": "heuristics"}).autotune is False


def cache_place():
    from ejkernel.ops.cache import SCHEMA_VERSION

    assert f"configs-v{SCHEMA_VERSION}.json" in PAGE
    assert Policy.from_env({"EJKERNEL_PERSISTENT_CACHE_DIR": "/x"}).cache_dir == Path("/x")
    assert Policy.from_env({"EJKERNEL_PERSISTENT_CACHE_DIR": "/x", "EJKERNEL_CACHE_DIR": "/y"}).cache_dir == Path("/y")


def registry_names():
    names = {"gla": "gla_attention", "lightning_attn": "lightning_attention", "recurrent": "recurrent_attention",
             "kda": "kernel_delta_attention", "ssm1": "state_space_v1", "mamba1": "state_space_v1",
             "ssm2": "state_space_v2", "mamba2": "state_space_v2", "grouped_matmulv2": "grouped_matmul",
             "grouped_matmulv3": "grouped_matmul"}  # fmt: skip
    for earlier, op in names.items():
        assert ejkernel.kernel_registry.get(earlier, platform="xla").op_name == op


def config_fields():
    from ejkernel.modules.operations import configs

    assert configs.GLAttentionConfig(block_q=64, block_k=64, block_d=64) == configs.GLAttentionConfig()
    assert configs.AttentionConfig(block_q=128, block_k=128, num_warps=4, num_stages=2) == configs.AttentionConfig()
    ring = configs.RingAttentionConfig(block_q=128, block_k=128, query_chunk_size=64, key_chunk_size=64)
    assert (ring.fwd_params.q_blocksize, ring.fwd_params.kv_blocksize) == (64, 64)


def from_cu_seqlens():
    mi = ejkernel.MaskInfo.from_cu_seqlens(jnp.array([0, 2, 1, 3]), max_q_len=3)
    assert mi.q_segment_ids.tolist() == [[0, 0, -1], [-1, 0, 0]]


def rhs_scale():
    lhs, w = normal(4, (9, 8)), normal(5, (2, 8, 4))
    scale = jax.random.uniform(jax.random.key(6), (2, 1, 1, 4)) + 0.5
    sizes = jnp.array([4, 5])
    out = ejkernel.grouped_matmul(lhs, w, sizes, rhs_scale=scale)
    close(out[:4], lhs[:4] @ (w[0] * scale[0, 0]))
    close(out[4:], lhs[4:] @ (w[1] * scale[1, 0]))


def out_shard_callback():
    lhs, w = normal(4, (9, 8)), normal(5, (2, 8, 4))
    with pytest.raises(ValueError, match=r"out_shard_callback .* mesh=/in_specs="):
        ejkernel.grouped_matmul(lhs, w, jnp.array([4, 5]), out_shard_callback=lambda x: x)


def use_v2_v3():
    lhs, w = normal(4, (9, 8)), normal(5, (2, 8, 4))
    plain = ejkernel.grouped_matmul(lhs, w, jnp.array([4, 5]))
    close(ejkernel.grouped_matmul(lhs, w, jnp.array([4, 5]), use_v2=True), plain, 0)
    close(ejkernel.grouped_matmul(lhs, w, jnp.array([4, 5]), use_v3=True), plain, 0)


def prefill_mask_value():
    kc = vc = normal(7, (2, 4, 8, 16))
    q = normal(8, (5, 4, 16))
    args = (q, kc, vc, jnp.array([20], jnp.int32), jnp.array([3, 0, 2], jnp.int32))
    close(ejkernel.prefill_page_attention(*args, mask_value=-1.0), ejkernel.prefill_page_attention(*args), 0)


def unified_causal():
    kc = vc = normal(9, (4, 8, 2, 16))
    args = (normal(10, (2, 4, 16)), kc, vc, jnp.array([9, 5]), jnp.array([[0, 1], [2, 3]]), jnp.array([0, 1, 2]))
    with pytest.raises(ValueError, match=r"causal=False is not supported"):
        ejkernel.unified_attention(*args, causal=False)


def unified_soft_cap_then_biases():
    # One decode of a 3-token context, one head: softmax(cap · tanh(s · q·k / cap) + slope · (t - 2)).
    kc, vc, q = normal(11, (1, 8, 1, 16)), normal(12, (1, 8, 1, 16)), normal(13, (1, 1, 16))
    scale, cap, slope = 0.5, 2.0, 0.7
    out = ejkernel.unified_attention(
        q, kc, vc, jnp.array([3]), jnp.array([[0]]), jnp.array([0, 1]), jnp.array([slope]),
        softmax_scale=scale, logits_soft_cap=cap,
    )  # fmt: skip
    logits = cap * jnp.tanh(scale * (kc[0, :3, 0] @ q[0, 0]) / cap) + slope * (jnp.arange(3) - 2)
    close(out[0, 0], jax.nn.softmax(logits) @ vc[0, :3, 0])


@dataclasses.dataclass(frozen=True)
class Item:
    """One listed difference: ``check`` calls it (the earlier behaviour, or the documented one);
    ``documented``: the page's words for it when it is not the earlier behaviour."""

    name: str
    check: Callable[[], None]
    documented: tuple[str, ...] = ()


ITEMS = (
    Item("scaled_dot_product_attention cum_seqlens_q/k are per-example lengths", sdpa_lengths),
    Item("ring_attention(causal_block_size=) asks for a causal mask", ring_causal_block_size),
    Item("page_attention from ejkernel.kernels._xla is the function", page_attention_import),
    Item("ring_attention(attention_sink_size=)", ring_attention_sinks),
    Item("attention(attention_mask=)", attention_mask),
    Item(
        "autotuning on a cache miss",
        autotune_default,
        ("**Autotuning is opt-in.**", "`EJKERNEL_AUTOTUNE=1`", "EJKERNEL_AUTOTUNE_POLICY=autotune"),
    ),
    Item(
        "the persistent cache's place and format",
        cache_place,
        ("**The on-disk config cache has another place and format.**", "~/ejkernel-presistent-cache/"),
    ),
    Item("registry algorithm names", registry_names),
    Item("config field names", config_fields),
    Item("MaskInfo.from_cu_seqlens keywords", from_cu_seqlens),
    Item("grouped_matmul(rhs_scale=)", rhs_scale),
    Item("grouped_matmul(out_shard_callback=)", out_shard_callback, ("`out_shard_callback`", "refused")),
    Item("grouped_matmul(use_v2=, use_v3=)", use_v2_v3, ("`use_v2` / `use_v3`", "accepted and ignored")),
    Item("prefill_page_attention(mask_value=)", prefill_mask_value, ("`prefill_page_attention(mask_value=)`",)),
    Item("unified_attention(causal=False)", unified_causal, ("`unified_attention(causal=False)`",)),
    Item(
        "unified_attention's soft cap and biases",
        unified_soft_cap_then_biases,
        ("soft-caps the logits before adding the ALiBi and query-query biases",),
    ),
)


@pytest.mark.slow
@pytest.mark.parametrize("item", ITEMS, ids=lambda i: i.name)
def test_each_item_is_compatible_or_on_the_migration_page(item):
    item.check()
    for words in item.documented:
        assert words in PAGE, f"{item.name}: the migration page does not say {words!r}"
