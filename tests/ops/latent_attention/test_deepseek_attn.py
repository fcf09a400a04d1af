"""``deepseek_attn`` beyond the conformance matrix: the selection against a brute-force loop, the
no-sparsity limit equal to ``flash_mla``, the call as a notebook makes it (eager, gradients),
no gradient into the indexer, and bad inputs refused before anything is traced."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.ops import bind
from ejkernel.ops.deepseek_attn.cases import CASES, DSACase
from ejkernel.ops.deepseek_attn.reference import deepseek_attn_reference
from ejkernel.ops.families.latent_attention import (
    absorbed_operands,
    gathered_latent_attention,
    index_mask,
    index_selection,
    project_latent_output,
)
from ejkernel.testing import conformance as C


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("sq", "sk"), [(9, 9), (3, 11)])
def test_selection_matches_a_loop(causal, sq, sk):
    """The kept keys, from the documented rule computed one query at a time in NumPy."""
    rng = np.random.default_rng(3)
    qi, ki, w = rng.standard_normal((2, sq, 3, 4)), rng.standard_normal((2, sk, 4)), rng.standard_normal((2, sq, 3))
    topk, scale = 4, 0.5
    got = np.asarray(
        index_mask(jnp.asarray(qi), jnp.asarray(ki), jnp.asarray(w), topk=topk, scale=scale, causal=causal)
    )
    want = np.zeros((2, 1, sq, sk), bool)
    for b in range(2):
        for i in range(sq):
            pos = i + sk - sq
            cand = [t for t in range(sk) if not causal or t <= pos]
            score = {t: sum(w[b, i, j] * max(0.0, scale * qi[b, i, j] @ ki[b, t]) for j in range(3)) for t in cand}
            kept = sorted(cand, key=lambda t: (-score[t], t))[:topk]
            for t in {*kept, pos}:
                want[b, 0, i, t] = True
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "case",
    [DSACase("gqa", sq=13, sk=13, h=4, hk=2, causal=True, topk=5), DSACase("cross", sq=3, sk=10, h=2, hk=1, causal=False, topk=4),
     DSACase("empty-rows", sq=7, sk=4, causal=True, topk=2)],
    ids=lambda c: c.name,
)  # fmt: skip
def test_gathered_attention_over_the_selection_is_the_reference(case):
    """The sparse form (the Triton implementation's backward: selected rows gathered, chunk by
    chunk) against the dense masked reference, forward and gradients."""
    kw = case.inputs(0)
    args = bind("deepseek_attn", **kw)
    sel = index_selection(
        args.query_index, args.key_index, args.index_weights, topk=args.index_topk,
        scale=args.index_softmax_scale, causal=args.causal,
    )  # fmt: skip

    def sparse(query, key_value, w_kc, w_vc, b_k):
        a = dataclasses.replace(args, query=query, key_value=key_value, w_kc=w_kc, w_vc=w_vc, b_k=b_k)
        q, k, _ = absorbed_operands(a)
        o = gathered_latent_attention(
            q, k[:, :, 0], sel, lora=a.kv_lora_rank, scale=a.softmax_scale, causal=a.causal, chunk=3
        )
        return project_latent_output(a, o)

    def ref(query, key_value, w_kc, w_vc, b_k):
        return deepseek_attn_reference(
            **{**kw, "query": query, "key_value": key_value, "w_kc": w_kc, "w_vc": w_vc, "b_k": b_k}
        )

    xs = tuple(kw[n] for n in ("query", "key_value", "w_kc", "w_vc", "b_k"))
    np.testing.assert_allclose(sparse(*xs), ref(*xs), atol=2e-5)
    loss = lambda f: lambda *a: jnp.sum(jnp.sin(f(*a)))  # noqa: E731
    for g, w in zip(
        jax.grad(loss(sparse), argnums=range(5))(*xs), jax.grad(loss(ref), argnums=range(5))(*xs), strict=True
    ):
        np.testing.assert_allclose(g, w, atol=5e-5)


def test_topk_covering_every_key_is_flash_mla():
    kw = DSACase("c", sq=14, causal=True, topk=14).inputs(0)
    mla = {k: v for k, v in kw.items() if k not in ("query_index", "key_index", "index_weights", "index_topk")}
    want = ejkernel.flash_mla(**mla, platform="xla")
    np.testing.assert_allclose(ejkernel.deepseek_attn(**kw, platform="xla"), want, atol=2e-5)


def test_sparsity_changes_the_result():
    """A small top-k attends fewer keys: the output must differ from the dense one (the mask is applied)."""
    kw = DSACase("c", sq=16, causal=True, topk=3).inputs(0)
    dense = ejkernel.deepseek_attn(**{**kw, "index_topk": 16}, platform="xla")
    sparse = ejkernel.deepseek_attn(**kw, platform="xla")
    assert float(jnp.max(jnp.abs(dense[:, 8:] - sparse[:, 8:]))) > 1e-2
    np.testing.assert_allclose(dense[:, :3], sparse[:, :3], atol=2e-5)  # the first 3 queries see <= 3 keys


def test_eager_forward_and_grad():
    C.check(lambda **k: ejkernel.deepseek_attn(**k, platform="xla"), CASES[0], op="deepseek_attn", modes=("eager",))


def test_no_gradient_into_the_indexer():
    kw = CASES[0].inputs(0)
    names = ("query_index", "key_index", "index_weights")

    def loss(idx):
        return jnp.sum(ejkernel.deepseek_attn(**{**kw, **idx}, platform="xla") ** 2)

    grads = jax.grad(loss)({n: kw[n] for n in names})
    for n in names:
        assert not bool(jnp.any(grads[n])), n


def _kw(**changes):
    kw = DSACase("c", h=4, hk=2).inputs(0)
    kw.update(changes)
    return kw


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        (dict(index_topk=0), ValueError, "index_topk"),
        (dict(index_topk=2.5), TypeError, "index_topk"),
        (dict(index_weights=jnp.ones((2, 16, 3))), ValueError, "index_weights must be .batch, seq_q, index_heads."),
        (dict(key_index=jnp.ones((2, 16, 5))), ValueError, "key_index must have index_head_dim = 8"),
        (dict(key_index=jnp.ones((2, 15, 8))), ValueError, "key_index must have seq_k = 16"),
        (dict(query_index=jnp.ones((2, 16, 8))), ValueError, "query_index must be 4-D"),
        (dict(b_q=jnp.ones((2, 16, 8)), b_k=None), ValueError, "b_q .* needs b_k"),
        (dict(index_softmax_scale=-1.0), ValueError, "index_softmax_scale"),
    ],
)
def test_bad_inputs(changes, error, match):
    with pytest.raises(error, match=match):
        ejkernel.deepseek_attn(**_kw(**changes), platform="xla")
