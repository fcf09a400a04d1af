"""Value checks of traced index arrays under jit (``ejkernel.checks`` / ``EJKERNEL_CHECKS``)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify

import ejkernel
from ejkernel.ops import Policy, current_policy
from ejkernel.types import MaskInfo

NUM_BLOCKS, BLOCK, MAX_BLOCKS = 8, 4, 3
LAYOUT = "blocks_tokens_heads"  # these cache shapes fit both layouts


def _dense(seed=0, s=12):
    ks = jax.random.split(jax.random.key(seed), 3)
    return [jax.random.normal(k, (1, s, 2, 16), jnp.float32) for k in ks]


def _paged(seed=0):
    ks = jax.random.split(jax.random.key(seed), 3)
    q = jax.random.normal(ks[0], (2, 4, 16), jnp.float32)
    kc = jax.random.normal(ks[1], (NUM_BLOCKS, BLOCK, 2, 16), jnp.float32)
    vc = jax.random.normal(ks[2], (NUM_BLOCKS, BLOCK, 2, 16), jnp.float32)
    return q, kc, vc


def varlen(cu):
    q, k, v = _dense()
    return jax.jit(lambda cu: ejkernel.flash_attention(q, k, v, cum_seqlens_q=cu))(cu)


def varlen_k(cu_k):
    q, k, v = _dense()
    cu_q = jnp.array([0, 5, 12], jnp.int32)
    return jax.jit(lambda cu: ejkernel.flash_attention(q, k, v, cum_seqlens_q=cu_q, cum_seqlens_k=cu))(cu_k)


def segments(seg):
    q, k, v = _dense()
    return jax.jit(lambda s: ejkernel.flash_attention(q, k, v, mask_info=MaskInfo.from_segments(s, s)))(seg)


def paged_lens(lens):
    q, kc, vc = _paged()
    tables = jnp.array([[3, 1, 7], [0, 2, 6]], jnp.int32)
    return jax.jit(lambda lens: ejkernel.page_attention(q, kc, vc, lens, tables, cache_layout=LAYOUT))(lens)


def paged_tables(tables):
    q, kc, vc = _paged()
    lens = jnp.array([5, 12], jnp.int32)
    return jax.jit(lambda t: ejkernel.page_attention(q, kc, vc, lens, t, cache_layout=LAYOUT))(tables)


def _gmm(lhs_rows=10, local=4):
    ks = jax.random.split(jax.random.key(3), 2)
    return jax.random.normal(ks[0], (lhs_rows, 8)), jax.random.normal(ks[1], (local, 8, 6))


def gmm_sizes(sizes):
    lhs, rhs = _gmm()
    return jax.jit(lambda s: ejkernel.grouped_matmul(lhs, rhs, s))(sizes)


def gmm_offset(offset):
    lhs, rhs = _gmm(local=2)  # 2 local groups of the 4 that group_sizes counts
    sizes = jnp.array([2, 2, 3, 3], jnp.int32)
    return jax.jit(lambda o: ejkernel.grouped_matmul(lhs, rhs, sizes, o))(offset)


SEG_OK = np.repeat(np.arange(3), 4)[None].astype(np.int32)
SEG_BAD = SEG_OK.copy()
SEG_BAD[0, 7] = -3

# (name, function, good value, bad value, message)
CASES = [
    ("cum_seqlens_q decreasing", varlen, [0, 5, 12], [0, 7, 5], r"cum_seqlens_q must start at 0, never decrease"),
    ("cum_seqlens_q past the end", varlen, [0, 5, 12], [0, 5, 13], r"cum_seqlens_q must .* packed length 12"),
    ("cum_seqlens_q not from 0", varlen, [0, 5, 12], [2, 5, 12], r"cum_seqlens_q must start at 0"),
    ("cum_seqlens_k decreasing", varlen_k, [0, 6, 12], [0, 9, 4], r"cum_seqlens_k must start at 0, never decrease"),
    ("segment ids below -1", segments, SEG_OK, SEG_BAD, r"q_segment_ids must be >= -1"),
    ("context_lens past capacity", paged_lens, [5, 12], [5, 13], r"context_lens must be in \[0, .* = 12\]"),
    ("context_lens negative", paged_lens, [5, 12], [-2, 12], r"context_lens must be in \[0, "),
    ("block_tables past the cache", paged_tables, [[3, 1, 7], [0, 2, 6]], [[3, 1, 7], [0, 8, 6]], r"block_tables must"),
    ("block_tables negative", paged_tables, [[3, 1, 7], [0, 2, 6]], [[-1, 1, 7], [0, 2, 6]], r"block_tables must"),
    # A bound on the sum blames the sum, not an element; a scalar has no index.
    (
        "group_sizes sum",
        gmm_sizes,
        [2, 2, 3, 3],
        [2, 2, 3, 5],
        r"must sum to at most m = 10 .*; got sum\(group_sizes\) = 12",
    ),
    (
        "group_offset past the groups",
        gmm_offset,
        2,
        9,
        r"group_offset must be in \[0, .* = \[0, 2\] .*; got group_offset = 9",
    ),
]
IDS = [c[0] for c in CASES]


def _arr(x):
    return jnp.asarray(np.asarray(x, np.int32))


@pytest.mark.parametrize(("name", "fn", "good", "bad", "msg"), CASES, ids=IDS)
def test_plain_jit_raises_from_inside_with_checks_on(name, fn, good, bad, msg):
    with ejkernel.checks(), pytest.raises(Exception, match=msg) as info:
        jax.block_until_ready(fn(_arr(bad)))
    assert "ValueError" in str(info.value) or isinstance(info.value, ValueError)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "fn", "good", "bad", "msg"), CASES, ids=IDS)
def test_checkify_mode_functionalizes_the_check(name, fn, good, bad, msg):
    with ejkernel.checks("checkify"):
        err, _ = checkify.checkify(fn)(_arr(bad))
        assert err.get() is not None and re.search(msg, err.get()), err.get()
        err, out = checkify.checkify(fn)(_arr(good))
        assert err.get() is None
    np.testing.assert_allclose(np.asarray(out), np.asarray(fn(_arr(good))), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("name", "fn", "good", "bad", "msg"), CASES, ids=IDS)
def test_eager_values_are_checked_without_the_switch(name, fn, good, bad, msg):
    """Outside jit the values are concrete: always a ValueError, checks on or off."""
    with pytest.raises(ValueError, match=msg):
        _eager(fn, _arr(bad))


def _eager(fn, x):
    with jax.disable_jit():
        return fn(x)


@pytest.mark.parametrize(("name", "fn", "good", "bad", "msg"), CASES[:1] + CASES[5:6], ids=IDS[:1] + IDS[5:6])
def test_checks_off_by_default_under_jit(name, fn, good, bad, msg):
    """Off (the default), a traced bad value is not checked: documented, and no host round trip."""
    assert current_policy().value_checks is False
    jax.block_until_ready(fn(_arr(bad)))  # no error: the docstrings say what the kernels then do


def test_switch_nests_and_restores():
    assert not ejkernel.checks_enabled()
    with ejkernel.checks():
        assert ejkernel.checks_enabled()
        with ejkernel.checks(False):
            assert not ejkernel.checks_enabled()
        assert ejkernel.checks_enabled()
        with ejkernel.checks("checkify"):
            assert current_policy().value_checks == "checkify"
    assert not ejkernel.checks_enabled()


def test_environment_variable():
    assert Policy.from_env({"EJKERNEL_CHECKS": "1"}).value_checks is True
    assert Policy.from_env({"EJKERNEL_CHECKS": "off"}).value_checks is False
    assert Policy.from_env({"EJKERNEL_CHECKS": "checkify"}).value_checks == "checkify"
    with pytest.raises(ValueError, match="value_checks must be False, True or 'checkify'"):
        Policy(value_checks="maybe")
    with pytest.raises(ValueError, match="EJKERNEL_CHECKS='sometimes'"):
        Policy.from_env({"EJKERNEL_CHECKS": "sometimes"})


def test_a_failed_check_is_not_logged_as_a_failed_callback_too(caplog):
    """JAX logs a failing ``jax.debug.callback`` with its traceback; the error reaching the caller
    already says it all, so a failed value check is not logged. Other callbacks still are."""
    with ejkernel.checks(), pytest.raises(Exception, match="cum_seqlens_q must start at 0"):
        jax.block_until_ready(varlen(_arr([0, 7, 5])))
    assert not [r for r in caplog.records if "callback failed" in r.getMessage()]

    def fails(x):
        raise RuntimeError("not a value check")

    with pytest.raises(Exception, match="not a value check"):
        jax.block_until_ready(jax.jit(lambda x: jax.debug.callback(fails, x) or x)(jnp.ones(2)))
    assert [r for r in caplog.records if "callback failed" in r.getMessage()]
