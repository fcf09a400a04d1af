"""Error messages that must say what is wrong: the argument, the rule and the shapes or values.

Each call here is rejected while binding, before anything is traced, so the file is fast.
"""

from __future__ import annotations

import re

import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel


def normal(*shape):
    return jnp.asarray(np.random.default_rng(0).standard_normal(shape), jnp.float32)


def message(fn, error=ValueError) -> str:
    with pytest.raises(error) as info:
        fn()
    return str(info.value)


def test_a_gate_given_with_its_canonical_rank_shows_the_layout_it_takes():
    q = normal(1, 8, 2, 16)
    msg = message(lambda: ejkernel.gated_delta_rule(q, q, q, beta=normal(1, 8, 2), g=normal(1, 8, 2, 16)))
    # g is [batch, seq, num_value_heads] (the op adds the trailing axis itself): no "?" axis.
    assert msg == "gated_delta_rule: g must be 3-D [batch, seq, num_value_heads], got shape (1, 8, 2, 16)"
    msg = message(lambda: ejkernel.kda_attention(q, q, q, beta=normal(1, 8, 2), decay=normal(1, 8)))
    assert "decay must be 3-D or 4-D (3-D: [batch, seq, num_value_heads]; 4-D: " in msg and "(1, 8)" in msg


def test_an_undeclared_layout_is_not_invented_for_another_rank():
    q = normal(1, 8, 2, 16)
    msg = message(lambda: ejkernel.flash_attention(q, q, q, bias=normal(8)))
    assert re.search(
        r"bias must be 2-D or 3-D or 4-D \(4-D: \[batch, num_heads, seq_q, seq_k\]\), got shape \(8,\)", msg
    )


@pytest.mark.parametrize(
    ("kw", "got"),
    [({}, "got neither"), ({"layer_idx": 3}, "got layer_idx=3 alone"), ({"num_layers": 24}, "got num_layers=24 alone")],
)
def test_lightning_without_its_decay_says_both_ways_to_give_it(kw, got):
    q = normal(1, 8, 2, 16)
    msg = message(lambda: ejkernel.lightning_attention(q, q, q, **kw), TypeError)
    assert "decay [num_heads = 2]" in msg and "layer_idx and num_layers" in msg and msg.endswith(got)


def test_state_space_v2_gated_rmsnorm_without_a_gate_is_an_error():
    x, bc = normal(1, 8, 2, 4), normal(1, 8, 1, 3)
    a, d, dt = -jnp.abs(normal(2)), normal(2), jnp.abs(normal(1, 8, 2))
    msg = message(lambda: ejkernel.state_space_v2(x, a, bc, bc, d, dt, use_gated_rmsnorm=True))
    assert "use_gated_rmsnorm=True" in msg and "gate is None" in msg and "(1, 8, 2, 4)" in msg
    ejkernel.state_space_v2(x, a, bc, bc, d, dt, use_gated_rmsnorm=False)  # the default form runs


def test_grouped_matmul_blames_the_sum_and_shows_a_scalar_without_an_index():
    lhs, rhs = normal(10, 8), normal(4, 8, 6)
    msg = message(lambda: ejkernel.grouped_matmul(lhs, rhs, jnp.array([2, 2, 3, 5], jnp.int32)))
    assert msg.endswith("group_sizes must sum to at most m = 10 (the rows of lhs); got sum(group_sizes) = 12 "
                        "(group_sizes = [2, 2, 3, 5])")  # fmt: skip
    sizes = jnp.array([2, 2, 3, 3], jnp.int32)
    msg = message(lambda: ejkernel.grouped_matmul(lhs, rhs[:2], sizes, jnp.array(9, jnp.int32)))
    assert msg.endswith("(rhs holds 2 groups of 4); got group_offset = 9")
