"""The packed-row work list of ``mean_pooling`` (``ejkernel.ops.mean_pooling.plan``), shared by the
Triton kernels and the XLA implementation's item path."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.ops.mean_pooling.plan import make_plan, row_counts


def test_plan_covers_every_row_once():
    cu = jnp.asarray([0, 5, 5, 6, 43, 55], jnp.int32)
    tokens, split = 58, 8
    plan = make_plan(cu, tokens, split)
    seen = np.zeros(tokens, int)
    item_seq, item_lo, item_hi = (np.asarray(a) for a in (plan.item_seq, plan.item_lo, plan.item_hi))
    for s, lo, hi in zip(item_seq, item_lo, item_hi, strict=True):
        assert hi - lo <= split
        seen[lo:hi] += 1
        if hi > lo and s < 5:
            assert cu[s] <= lo and hi <= cu[s + 1]
    assert (seen == 1).all()
    # The second pass reads each sequence's items as one run: seq_first .. seq_first + seq_items - 1.
    first, count = np.asarray(plan.seq_first), np.asarray(plan.seq_items)
    for s in range(5):
        np.testing.assert_array_equal(np.flatnonzero(item_seq == s), np.arange(first[s], first[s] + count[s]))


@pytest.mark.parametrize("num_seqs", [1, 64, 3000])
def test_plan_is_straight_line(num_seqs):
    """The plan runs before every call: no while loop in its compiled program (one would cost a
    few kernel launches per iteration on a GPU), and the same items as the default search."""
    rng = np.random.default_rng(num_seqs)
    tokens = 262144
    cu = jnp.asarray(np.concatenate([[0], np.sort(rng.integers(0, tokens, num_seqs))]), jnp.int32)
    plan_fn = jax.jit(make_plan, static_argnums=(1, 2))
    assert " while(" not in plan_fn.lower(cu, tokens, 1024).compile().as_text()
    plan = plan_fn(cu, tokens, 1024)
    pieces = np.asarray(plan.seq_items)
    ends = np.cumsum(np.concatenate([pieces, [-(-(tokens - int(cu[-1])) // 1024)]]))
    used = np.arange(plan.item_seq.shape[0]) < ends[-1]
    want = np.searchsorted(ends, np.arange(plan.item_seq.shape[0]), side="right")
    np.testing.assert_array_equal(np.asarray(plan.item_seq)[used], want[used])


def test_row_counts():
    """Each sequence's length, or its rows the mask keeps (rows past the last sequence ignored)."""
    rng = np.random.default_rng(0)
    cu = np.asarray([0, 5, 5, 6, 43, 55], np.int32)
    mask = rng.random(58) < 0.6
    np.testing.assert_array_equal(np.asarray(row_counts(jnp.asarray(cu), None)), np.diff(cu))
    want = [mask[a:b].sum() for a, b in itertools.pairwise(cu)]
    np.testing.assert_array_equal(np.asarray(row_counts(jnp.asarray(cu), jnp.asarray(mask))), want)
