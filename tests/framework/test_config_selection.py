"""Config resolution: each of the seven tiers, and autotuning timed on the device."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.errors import ConfigResolutionError
from ejkernel.modules import FlashAttention, FlashAttentionConfig, PageAttentionConfig
from ejkernel.ops import (
    Autotuner,
    BwdParams,
    ConfigCache,
    ConfigSelectorChain,
    Executor,
    FwdParams,
    KernelImpl,
    KernelRegistry,
    PersistentCache,
    Tier,
    overlay,
    policy,
    record_dispatches,
)


@pytest.fixture
def persistent(tmp_path):
    return PersistentCache(tmp_path / "configs.json")


@pytest.fixture
def executor(persistent):
    return Executor(ConfigSelectorChain(cache=ConfigCache(), persistent=persistent))


def qkv(seq=24, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.standard_normal((1, seq, 2, 16)), jnp.float32) for _ in range(3))


def call(executor, *arrays, **kw):
    with record_dispatches() as log:
        out = executor(FlashAttention(), *arrays, **kw)
    assert len(log) == 1
    return out, log[0]


def test_tier_heuristic(executor):
    _, d = call(executor, *qkv())
    assert d.tier is Tier.HEURISTIC and d.impl == "xla"
    assert d.config.fwd_params.q_blocksize is not None  # complete
    assert d.config.platform == "xla"


def test_tier_explicit_partial_config_is_completed(executor):
    cfg = FlashAttentionConfig(fwd_params=FwdParams(q_blocksize=8))
    _, d = call(executor, *qkv(), cfg=cfg)
    assert d.tier is Tier.EXPLICIT
    assert d.config.fwd_params.q_blocksize == 8
    assert d.config.fwd_params.kv_blocksize is not None and d.config.bwd_params is not None


def test_tier_overlay_nests_and_loses_to_explicit(executor):
    outer = FlashAttentionConfig(fwd_params=FwdParams(q_blocksize=8, kv_blocksize=8))
    inner = FlashAttentionConfig(fwd_params=FwdParams(q_blocksize=16, kv_blocksize=8))
    with overlay(outer):
        _, d = call(executor, *qkv())
        assert d.tier is Tier.OVERLAY and d.config.fwd_params.q_blocksize == 8
        with overlay(flash_attention=inner):
            _, d = call(executor, *qkv())
            assert d.config.fwd_params.q_blocksize == 16
        _, d = call(executor, *qkv(), cfg=FlashAttentionConfig(fwd_params=FwdParams(q_blocksize=32)))
        assert d.tier is Tier.EXPLICIT
    with overlay(PageAttentionConfig(num_splits=1)):  # another op's overlay does not apply
        _, d = call(executor, *qkv())
        assert d.tier is Tier.HEURISTIC
    with pytest.raises(TypeError), overlay(flash_attention=PageAttentionConfig()):
        pass


def test_overlay_platform_selects_the_implementation(executor):
    with overlay(FlashAttentionConfig(platform="triton")), pytest.raises(Exception, match="triton"):
        call(executor, *qkv())


def test_tier_memory(executor):
    _, first = call(executor, *qkv())
    chosen = FlashAttentionConfig(
        platform="xla", fwd_params=FwdParams(q_blocksize=8, kv_blocksize=16), bwd_params=BwdParams(8, 16)
    )
    executor.chain.cache.put(first.key, chosen, source="test")
    _out, d = call(executor, *qkv())
    assert d.tier is Tier.MEMORY and d.config == chosen


def test_tier_persistent_then_memory(executor, persistent):
    _, first = call(executor, *qkv(seq=30))
    stored = FlashAttentionConfig(fwd_params=FwdParams(q_blocksize=8, kv_blocksize=8), bwd_params=BwdParams(8, 8))
    persistent.put(first.key, {"op": "flash_attention", "impl": "xla", "config": stored.to_dict()})
    _, d = call(executor, *qkv(seq=30))
    assert d.tier is Tier.PERSISTENT and d.config.fwd_params == stored.fwd_params
    _, d = call(executor, *qkv(seq=30))
    assert d.tier is Tier.MEMORY


def test_stale_persistent_entry_is_skipped(executor, persistent, caplog):
    _, first = call(executor, *qkv(seq=31))
    persistent.put(first.key, {"config": {"fwd_params": {"q_blocksize": -3}}})
    with caplog.at_level(logging.WARNING, logger="ejkernel"):
        _, d = call(executor, *qkv(seq=31))
    assert d.tier is Tier.HEURISTIC
    assert any("ignoring cached config" in r.message for r in caplog.records)


def test_tier_error_lists_every_tier(executor):
    with policy(on_cache_miss="error"), pytest.raises(ConfigResolutionError) as info:
        call(executor, *qkv(seq=33))
    text = str(info.value)
    for fragment in ("memory: miss", "persistent: miss", "autotune: disabled", "on_cache_miss='error'"):
        assert fragment in text


def test_cache_miss_warn(executor, caplog):
    with policy(on_cache_miss="warn"), caplog.at_level(logging.WARNING, logger="ejkernel"):
        _, d = call(executor, *qkv(seq=34))
    assert d.tier is Tier.HEURISTIC
    assert any("config cache miss" in r.message for r in caplog.records)


# -- autotuning -------------------------------------------------------------------------------


class Tunable(KernelImpl):
    """Three candidates: q_blocksize 1 is slow (extra work), 2 is fast, 3 fails to compile."""

    def heuristic_cfg(self, args, device):
        return FlashAttentionConfig(fwd_params=FwdParams(q_blocksize=1))

    def candidate_cfgs(self, args, device):
        return [FlashAttentionConfig(fwd_params=FwdParams(q_blocksize=n)) for n in (1, 2, 3)]

    def run(self, args, cfg):
        n = cfg.fwd_params.q_blocksize
        if n == 3:
            raise RuntimeError("candidate 3 cannot compile")
        out = jnp.zeros(args.query.shape[:3] + args.value.shape[3:], args.query.dtype) + args.query[..., :1] * 0
        if n == 1:
            m = jnp.eye(192, dtype=jnp.float32) * 0.5

            def body(i, x):
                return jnp.tanh(x @ m + 0.01)

            waste = jax.lax.fori_loop(0, 400, body, m)
            out = out + waste[0, 0] * 0
        return out


@pytest.fixture
def tunable_executor(persistent):
    reg = KernelRegistry(None)
    reg.register("flash_attention", "xla", priority=1, name="tunable")(Tunable)
    return Executor(ConfigSelectorChain(cache=ConfigCache(), persistent=persistent), registry=reg)


def test_tier_autotune_picks_the_fastest_and_survives_failures(tunable_executor, persistent, caplog):
    with policy(autotune=True, autotune_repeats=3), caplog.at_level(logging.INFO, logger="ejkernel"):
        _, d = call(tunable_executor, *qkv(seq=40))
    assert d.tier is Tier.AUTOTUNE
    assert d.config.fwd_params.q_blocksize == 2
    assert any("candidate 3 cannot compile" in r.message for r in caplog.records)
    stored = persistent.get(d.key)
    assert stored["config"]["fwd_params"]["q_blocksize"] == 2
    assert stored["candidates"] == 3 and stored["time_ms"] > 0 and stored["mode"] == "fwd"
    # The same executor now answers from memory; a new one (another process's view) from disk.
    with policy(autotune=True):
        _, d2 = call(tunable_executor, *qkv(seq=40))
        assert d2.tier is Tier.MEMORY
        fresh = Executor(
            ConfigSelectorChain(cache=ConfigCache(), persistent=persistent), registry=tunable_executor.registry
        )
        _, d3 = call(fresh, *qkv(seq=40))
        assert d3.tier is Tier.PERSISTENT and d3.config.fwd_params.q_blocksize == 2


def test_autotune_works_under_jit(tunable_executor):
    q, k, v = qkv(seq=41)

    @jax.jit
    def f(q, k, v):
        return tunable_executor(FlashAttention(), q, k, v)

    with policy(autotune=True, autotune_repeats=2), record_dispatches() as log:
        out = f(q, k, v)
    assert out.shape == q.shape
    assert log[0].tier is Tier.AUTOTUNE and log[0].config.fwd_params.q_blocksize == 2


def test_autotune_with_every_candidate_failing_falls_back(persistent, caplog):
    class AllFail(Tunable):
        def candidate_cfgs(self, args, device):
            return [FlashAttentionConfig(fwd_params=FwdParams(q_blocksize=3))]

    reg = KernelRegistry(None)
    reg.register("flash_attention", "xla", name="allfail")(AllFail)
    ex = Executor(ConfigSelectorChain(cache=ConfigCache(), persistent=persistent), registry=reg)
    with policy(autotune=True), caplog.at_level(logging.INFO, logger="ejkernel"):
        _, d = call(ex, *qkv(seq=42))
    assert d.tier is Tier.HEURISTIC
    with policy(autotune=True, on_cache_miss="error"), pytest.raises(ConfigResolutionError, match="0/1 candidates ran"):
        call(ex, *qkv(seq=42))


@pytest.mark.slow
def test_autotune_forward_backward_on_the_real_kernel(executor, persistent):
    with policy(autotune=True, autotune_mode="fwdbwd", autotune_repeats=1):
        _, d = call(executor, *qkv(seq=300))
    assert d.tier is Tier.AUTOTUNE
    rec = persistent.get(d.key)
    assert rec["mode"] == "fwdbwd" and rec["candidates"] > 1


@pytest.mark.slow
def test_second_process_reuses_the_tuned_config(tmp_path):
    code = textwrap.dedent(
        """
        import time, numpy as np, jax.numpy as jnp, ejkernel
        from ejkernel.ops import record_dispatches
        rng = np.random.default_rng(0)
        q, k, v = (jnp.asarray(rng.standard_normal((1, 260, 2, 32)), jnp.float32) for _ in range(3))
        t = time.perf_counter()
        with record_dispatches() as log:
            ejkernel.flash_attention(q, k, v, causal=True).block_until_ready()
        print(log[0].tier.value, round(time.perf_counter() - t, 2))
        """
    )
    env = dict(os.environ, EJKERNEL_CACHE_DIR=str(tmp_path), EJKERNEL_AUTOTUNE="1")
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert first.stdout.split()[0] == "autotune"
    assert second.stdout.split()[0] == "persistent"
    entries = json.loads((tmp_path / "configs-v1.json").read_text())["entries"]
    assert len(entries) == 1
    (rec,) = entries.values()
    assert rec["op"] == "flash_attention" and rec["impl"] == "xla" and rec["tuning_seconds"] > 0


def test_forbid_reautotune(tunable_executor):
    """Earlier releases' ``forbid_reautotune``: a key this chain tuned is not tuned twice (after its
    memory entry is cleared, asking again is an error); with it off, it is tuned again."""
    chain = tunable_executor.chain
    chain.persistent = None
    with policy(autotune=True, autotune_repeats=2):
        _, d = call(tunable_executor, *qkv(seq=43))
        assert d.tier is Tier.AUTOTUNE
        chain.cache.clear()
        with pytest.raises(RuntimeError, match="Re-autotune requested"):
            call(tunable_executor, *qkv(seq=43))
        chain.forbid_reautotune = False
        _, d = call(tunable_executor, *qkv(seq=43))
        assert d.tier is Tier.AUTOTUNE


# -- autotuning across implementations ----------------------------------------------------------


class Wasteful(KernelImpl):
    """Nothing to tune; ``waste`` loop iterations of extra work make it slower, ``fail`` makes it
    fail to run (as a kernel that does not compile)."""

    waste = 0
    fail = False

    def heuristic_cfg(self, args, device):
        return FlashAttentionConfig()

    def run(self, args, cfg):
        if self.fail:
            raise RuntimeError(f"{self.name} cannot compile")
        out = jnp.zeros(args.query.shape[:3] + args.value.shape[3:], args.query.dtype) + args.query[..., :1]
        if self.waste:
            m = jnp.eye(192, dtype=jnp.float32) * 0.5
            waste = jax.lax.fori_loop(0, self.waste, lambda i, x: jnp.tanh(x @ m + 0.01), m)
            out = out + waste[0, 0] * 0
        return out


def competing(persistent, *specs, tuner=None):
    """An executor whose registry holds, for each ``(name, priority, waste, fail)``, a
    :class:`Wasteful` implementation of ``flash_attention``."""
    reg = KernelRegistry(None)
    for name, priority, waste, fail in specs:
        cls = type(name, (Wasteful,), {"waste": waste, "fail": fail})
        reg.register("flash_attention", "xla", priority=priority, name=name)(cls)
    return Executor(ConfigSelectorChain(cache=ConfigCache(), persistent=persistent, tuner=tuner), registry=reg)


class NoTuning(Autotuner):
    def tune(self, *args, **kwargs):
        raise AssertionError("nothing should be timed: the choice is cached")


def test_autotune_chooses_among_implementations_and_caches_the_winner(persistent):
    ex = competing(persistent, ("slow", 10, 400, False), ("fast", 0, 0, False))
    _, d = call(ex, *qkv(seq=44))
    assert d.impl == "slow" and d.tier is Tier.HEURISTIC  # without autotuning: the priority order
    with policy(autotune=True, autotune_repeats=3):
        _, d = call(ex, *qkv(seq=44))
        assert d.impl == "fast" and d.tier is Tier.AUTOTUNE
        stored = persistent.get(d.key)
        assert stored["impl"] == "fast" and set(stored["times_ms"]) == {"slow", "fast"}
        assert stored["times_ms"]["fast"] < stored["times_ms"]["slow"]
        assert "slow@1+fast@1" in d.key  # the candidates are part of the key
        _, d2 = call(ex, *qkv(seq=44))
        assert d2.impl == "fast" and d2.tier is Tier.MEMORY
        # Another process's view: the choice comes from disk, nothing is timed.
        fresh = Executor(
            ConfigSelectorChain(cache=ConfigCache(), persistent=persistent, tuner=NoTuning()), registry=ex.registry
        )
        _, d3 = call(fresh, *qkv(seq=44))
        assert d3.impl == "fast" and d3.tier is Tier.PERSISTENT
        # Another shape is chosen on its own.
        _, d4 = call(ex, *qkv(seq=45))
        assert d4.impl == "fast" and d4.key != d.key


def test_autotune_across_implementations_skips_one_that_fails(persistent, caplog):
    ex = competing(persistent, ("broken", 20, 0, True), ("slow", 10, 400, False), ("fast", 0, 0, False))
    with policy(autotune=True, autotune_repeats=2), caplog.at_level(logging.INFO, logger="ejkernel"):
        _, d = call(ex, *qkv(seq=46))
    assert d.impl == "fast"
    assert persistent.get(d.key)["times_ms"]["broken"] is None
    assert any("broken cannot compile" in r.message for r in caplog.records)


class Recording(Autotuner):
    def __init__(self):
        super().__init__()
        self.timed = []

    def tune(self, op, impl, *args, **kwargs):
        self.timed.append(impl.name)
        return super().tune(op, impl, *args, **kwargs)


def test_asking_for_an_implementation_skips_the_choice(persistent):
    tuner = Recording()
    ex = competing(persistent, ("slow", 10, 400, False), ("fast", 0, 0, False), tuner=tuner)
    with policy(autotune=True, autotune_repeats=1):
        _, d = call(ex, *qkv(seq=47), platform="slow")
        assert d.impl == "slow"
        _, d = call(ex, *qkv(seq=49), cfg=FlashAttentionConfig(platform="slow"))
        assert d.impl == "slow"
    assert set(tuner.timed) == {"slow"}  # its config was tuned; "fast" was never a candidate


def test_autotune_across_implementations_under_jit(persistent):
    ex = competing(persistent, ("slow", 10, 400, False), ("fast", 0, 0, False))

    @jax.jit
    def f(q, k, v):
        return ex(FlashAttention(), q, k, v)

    with policy(autotune=True, autotune_repeats=2), record_dispatches() as log:
        out = f(*qkv(seq=48))
    assert out.shape == (1, 48, 2, 16)
    assert log[0].impl == "fast" and log[0].tier is Tier.AUTOTUNE
