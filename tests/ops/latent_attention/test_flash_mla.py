"""``flash_mla`` beyond the conformance matrix: the call as a notebook makes it (eager, forward and
gradient), its earlier name ``mla_attention``, the absorbed form against the non-absorbed one on
``flash_attention``, linear memory, and bad inputs refused before anything is traced."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.ops.families.latent_attention import materialized_kv
from ejkernel.ops.flash_mla.cases import CASES, MLACase
from ejkernel.ops.flash_mla.reference import reference
from ejkernel.testing import conformance as C


def test_eager_forward_and_grad():
    """No jit anywhere: forward and jax.grad of every differentiable input against the reference."""
    C.check(lambda **k: ejkernel.flash_mla(**k, platform="xla"), CASES[0], op="flash_mla", modes=("eager",))


def test_earlier_name_and_signature():
    """``mla_attention`` (ejkernel 0.0.16) is the same function and registry entry, and its
    positional order ``(query, key_value, w_kc, w_vc, b_q, b_k, cu_seqlens)`` still holds."""
    assert ejkernel.mla_attention is ejkernel.flash_mla
    assert ejkernel.modules.mla_attention is ejkernel.flash_mla
    reg = ejkernel.kernel_registry
    assert reg.get("mla_attention", platform="xla") is reg.get("flash_mla", platform="xla")
    kw = MLACase("c", rope="shared", causal=True).inputs(0)
    args = (kw["query"], kw["key_value"], kw["w_kc"], kw["w_vc"], kw["b_q"], kw["b_k"])
    out = ejkernel.mla_attention(*args, softmax_scale=0.2, causal=True, platform="xla", cfg=None)
    np.testing.assert_allclose(out, reference(*args, softmax_scale=0.2, causal=True), atol=2e-5)


@pytest.mark.parametrize("rope", ["none", "query", "shared"])
def test_non_absorbed_form_is_flash_attention(rope):
    """What the docs promise: flash_attention on the materialized keys and values is the same op."""
    kw = MLACase("c", rope=rope, h=6, hk=3, causal=True, sq=11).inputs(1)
    q, k, v = materialized_kv(
        kw["query"], kw["key_value"], kw["w_kc"], kw["w_vc"], kw.get("b_q"), kw.get("b_k"),
        dtype=jnp.float32, precision=jax.lax.Precision.HIGHEST,
    )  # fmt: skip
    want = ejkernel.flash_attention(q, k, v, causal=True, platform="xla")
    np.testing.assert_allclose(ejkernel.flash_mla(**kw, platform="xla"), want, atol=2e-5)


def test_decode_is_the_last_row_of_prefill():
    """A decode step (one query against the latent cache) equals the last row of causal prefill."""
    kw = MLACase("c", sq=19, h=8, hk=1, causal=True).inputs(2)
    full = ejkernel.flash_mla(**kw, platform="xla")
    step = dict(kw, query=kw["query"][:, -1:])
    np.testing.assert_allclose(ejkernel.flash_mla(**step, platform="xla"), full[:, -1:], atol=2e-5)


def test_backward_memory_is_linear():
    """The gradient's temporaries grow about linearly with the sequence (no [s, s] logits)."""

    def temp_bytes(s: int) -> int:
        kw = MLACase("c", b=1, sq=s, h=4, hk=4, r=64, dn=32, dr=16, dv=32, causal=True).inputs(0)
        arrays = {n: kw[n] for n in ("query", "key_value", "w_kc", "w_vc", "b_k")}

        def loss(a):
            return jnp.sum(
                ejkernel.flash_mla(
                    **a, causal=True, platform="xla", cfg=ejkernel.FlashMLAConfig(block_q=64, block_k=128)
                )
            )

        return jax.jit(jax.grad(loss)).lower(arrays).compile().memory_analysis().temp_size_in_bytes

    small, large = temp_bytes(512), temp_bytes(2048)
    assert large < 6 * small, (small, large)  # quadratic would be 16x


def _kw(**changes):
    kw = MLACase("c", rope="query", h=4, hk=2).inputs(0)
    kw.update(changes)
    return kw


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        (dict(b_k=None), ValueError, r"query's last dim must be qk_nope_head_dim \(no b_k"),
        (dict(b_q=jnp.ones((2, 16, 8)), b_k=None), ValueError, "b_q .* needs b_k"),
        (dict(query=jnp.ones((2, 16, 4, 20))), ValueError, "query's last dim must be qk_nope_head_dim \\+ qk_rope"),
        (dict(w_kc=jnp.ones((31, 2, 16))), ValueError, "w_kc must have kv_lora_rank = 32"),
        (dict(w_vc=jnp.ones((32, 3, 16))), ValueError, "w_vc must have num_kv_heads = 2"),
        (dict(w_kc=jnp.ones((32, 3, 16)), w_vc=jnp.ones((32, 3, 16))), ValueError, "num_heads .4. must be a multiple"),
        (dict(key_value=jnp.ones((2, 16, 32), jnp.bfloat16)), TypeError, "key_value .bfloat16. must have the dtype"),
        (dict(b_k=jnp.ones((2, 15, 8))), ValueError, "b_k must have seq_k = 16"),
        (dict(key_value=jnp.ones((2, 16))), ValueError, "key_value must be 3-D"),
        (dict(cu_seqlens=jnp.array([0, 8, 16])), ValueError, "with cu_seqlens the sequences are packed"),
        (dict(attention_mask=jnp.ones((2, 1, 16, 16))), TypeError, "attention_mask must be bool"),
        (dict(bias=jnp.ones((2, 3, 16, 16))), ValueError, "bias .* does not broadcast"),
        (dict(dropout_prob=0.1, deterministic=False), ValueError, "attention dropout .* is not supported"),
        (dict(dropout_prob=1.5), ValueError, r"dropout_prob must be in \[0, 1\)"),
        (dict(softmax_dtype=jnp.bfloat16), ValueError, "softmax_dtype must be None or float32"),
        (dict(sliding_window=(-1, 2)), ValueError, "sliding_window"),
    ],
)
def test_bad_inputs(changes, error, match):
    with pytest.raises(error, match=match):
        ejkernel.flash_mla(**_kw(**changes), platform="xla")


def test_dropout_options_that_change_nothing_are_accepted():
    kw = _kw()
    want = ejkernel.flash_mla(**kw, platform="xla")
    got = ejkernel.flash_mla(**kw, dropout_prob=0.1, deterministic=True, softmax_dtype=jnp.float32, platform="xla")
    np.testing.assert_array_equal(got, want)


def test_cu_seqlens_values_checked():
    kw = MLACase("c", b=1, sq=10).inputs(0)
    with pytest.raises(ValueError, match="cu_seqlens"):
        ejkernel.flash_mla(**kw, cu_seqlens=jnp.array([0, 6, 4, 10]), platform="xla")
