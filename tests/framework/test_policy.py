"""The execution policy: defaults, validation, environment parsing and scoping.

``Policy.from_env`` is tested with explicit dicts (never the real environment, except through a
subprocess for the import-time behaviour). ``policy()`` scopes through ``contextvars``: it nests,
restores on exit, stays out of new threads and is copied into asyncio tasks. The last tests check
that a scoped policy reaches a real ``flash_attention`` call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import platformdirs
import pytest

import ejkernel
from ejkernel.errors import ConfigResolutionError
from ejkernel.ops import Policy, current_policy, default_policy, policy
from ejkernel.ops.policy import parse_backend_list

# -- the dataclass --------------------------------------------------------------------------------


def test_defaults():
    p = Policy()
    assert p.autotune is False
    assert p.autotune_mode == "fwd"
    assert p.autotune_repeats == 5
    assert p.on_cache_miss == "heuristic"
    assert p.persistent_cache is True
    assert p.cache_dir == Path(platformdirs.user_cache_dir("ejkernel"))
    assert isinstance(p.cache_dir, Path)
    assert p.backends_allow is None
    assert p.backends_deny == frozenset()
    assert p.progress is None
    assert p == Policy()


def test_frozen_and_hashable():
    p = Policy()
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.autotune = True  # type: ignore[misc]
    assert hash(p) == hash(Policy())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"on_cache_miss": "ignore"}, "on_cache_miss"),
        ({"on_cache_miss": "ERROR"}, "on_cache_miss"),
        ({"autotune_mode": "bwd"}, "autotune_mode"),
        ({"autotune_mode": ""}, "autotune_mode"),
        ({"autotune_repeats": 0}, "autotune_repeats"),
        ({"autotune_repeats": -3}, "autotune_repeats"),
        ({"autotune_repeats": 2.0}, "autotune_repeats"),
    ],
)
def test_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Policy(**kwargs)


def test_normalization():
    p = Policy(cache_dir="/some/where", backends_allow=["xla", "triton"], backends_deny={"cuda"})
    assert p.cache_dir == Path("/some/where")
    assert p.backends_allow == frozenset({"xla", "triton"})
    assert isinstance(p.backends_allow, frozenset)
    assert p.backends_deny == frozenset({"cuda"})
    assert isinstance(p.backends_deny, frozenset)
    hash(p)  # hashable after normalization


@pytest.mark.parametrize("mode", ["fwd", "fwdbwd"])
@pytest.mark.parametrize("miss", ["heuristic", "warn", "error"])
def test_valid_values(mode, miss):
    p = Policy(autotune_mode=mode, on_cache_miss=miss, autotune_repeats=1)
    assert (p.autotune_mode, p.on_cache_miss, p.autotune_repeats) == (mode, miss, 1)


# -- backends -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, allow, deny",
    [
        ("", None, set()),
        ("all", None, set()),
        ("ALL", None, set()),
        ("*", None, set()),
        (" , ,, ", None, set()),
        ("xla", {"xla"}, set()),
        ("xla,triton", {"xla", "triton"}, set()),
        (" XLA , Triton ", {"xla", "triton"}, set()),
        ("+xla,+pallas", {"xla", "pallas"}, set()),
        ("-triton", None, {"triton"}),
        ("-triton,!cuda", None, {"triton", "cuda"}),
        ("- triton , ! CUDA", None, {"triton", "cuda"}),
        ("all,-cuda", None, {"cuda"}),
        ("xla,-cuda", {"xla"}, {"cuda"}),
        ("xla,xla,-cuda,-cuda", {"xla"}, {"cuda"}),
        ("*,xla", {"xla"}, set()),
    ],
)
def test_parse_backend_list(spec, allow, deny):
    got_allow, got_deny = parse_backend_list(spec)
    assert got_allow == (frozenset(allow) if allow is not None else None)
    assert got_deny == frozenset(deny)
    assert got_allow is None or isinstance(got_allow, frozenset)
    assert isinstance(got_deny, frozenset)


def test_backend_allowed():
    everything = Policy()
    assert everything.backend_allowed("xla")
    assert everything.backend_allowed("triton")

    only = Policy(backends_allow={"xla", "triton"})
    assert only.backend_allowed("xla")
    assert only.backend_allowed("triton")
    assert not only.backend_allowed("cuda")

    deny = Policy(backends_deny={"triton"})
    assert deny.backend_allowed("xla")
    assert not deny.backend_allowed("triton")

    both = Policy(backends_allow={"xla", "triton"}, backends_deny={"triton"})
    assert both.backend_allowed("xla")
    assert not both.backend_allowed("triton")  # deny wins
    assert not both.backend_allowed("pallas")

    nothing = Policy(backends_allow=frozenset())
    assert not nothing.backend_allowed("xla")


# -- from the environment -------------------------------------------------------------------------


def test_from_env_empty_is_the_default():
    assert Policy.from_env({}) == Policy()


@pytest.mark.parametrize("raw", ["1", "true", "TRUE", "True", "yes", "YES", "on", "On", " 1 "])
def test_from_env_true(raw):
    assert Policy.from_env({"EJKERNEL_AUTOTUNE": raw}).autotune is True
    assert Policy.from_env({"EJKERNEL_PERSISTENT_CACHE": raw}).persistent_cache is True


@pytest.mark.parametrize("raw", ["0", "false", "FALSE", "no", "No", "off", "OFF", " 0 "])
def test_from_env_false(raw):
    assert Policy.from_env({"EJKERNEL_AUTOTUNE": raw}).autotune is False
    assert Policy.from_env({"EJKERNEL_PERSISTENT_CACHE": raw}).persistent_cache is False


@pytest.mark.parametrize("raw", ["", "   "])
def test_from_env_blank_boolean_is_the_default(raw):
    p = Policy.from_env({"EJKERNEL_AUTOTUNE": raw, "EJKERNEL_PERSISTENT_CACHE": raw})
    assert p.autotune is False
    assert p.persistent_cache is True


@pytest.mark.parametrize("name", ["EJKERNEL_AUTOTUNE", "EJKERNEL_PERSISTENT_CACHE"])
@pytest.mark.parametrize("raw", ["maybe", "2", "y", "enabled", "-1"])
def test_from_env_bad_boolean_names_the_variable(name, raw):
    with pytest.raises(ValueError, match=name) as excinfo:
        Policy.from_env({name: raw})
    assert repr(raw) in str(excinfo.value)


def test_from_env_cache_miss_and_mode():
    p = Policy.from_env({"EJKERNEL_CACHE_MISS": "error", "EJKERNEL_AUTOTUNE_MODE": "fwdbwd"})
    assert p.on_cache_miss == "error"
    assert p.autotune_mode == "fwdbwd"
    p = Policy.from_env({"EJKERNEL_CACHE_MISS": " Warn ", "EJKERNEL_AUTOTUNE_MODE": " FWD "})
    assert p.on_cache_miss == "warn"
    assert p.autotune_mode == "fwd"


@pytest.mark.parametrize(
    "env, match",
    [
        ({"EJKERNEL_CACHE_MISS": "explode"}, "on_cache_miss"),
        ({"EJKERNEL_AUTOTUNE_MODE": "bwd"}, "autotune_mode"),
    ],
)
def test_from_env_bad_choice(env, match):
    with pytest.raises(ValueError, match=match):
        Policy.from_env(env)


def test_from_env_cache_dir(tmp_path, monkeypatch):
    assert Policy.from_env({"EJKERNEL_CACHE_DIR": str(tmp_path)}).cache_dir == tmp_path
    monkeypatch.setenv("HOME", str(tmp_path))
    p = Policy.from_env({"EJKERNEL_CACHE_DIR": "~/ejk-cache"})
    assert p.cache_dir == tmp_path / "ejk-cache"
    assert "~" not in str(p.cache_dir)


def test_from_env_persistent_cache_off():
    assert Policy.from_env({"EJKERNEL_PERSISTENT_CACHE": "0"}).persistent_cache is False


@pytest.mark.parametrize(
    "spec, allow, deny",
    [
        ("xla,triton", frozenset({"xla", "triton"}), frozenset()),
        ("-triton,!cuda", None, frozenset({"triton", "cuda"})),
        ("all", None, frozenset()),
    ],
)
def test_from_env_backends(spec, allow, deny):
    p = Policy.from_env({"EJKERNEL_BACKENDS": spec})
    assert p.backends_allow == allow
    assert p.backends_deny == deny


def test_from_env_backends_allow_and_deny_effect():
    p = Policy.from_env({"EJKERNEL_BACKENDS": "xla,triton"})
    assert p.backend_allowed("xla") and p.backend_allowed("triton") and not p.backend_allowed("cuda")
    p = Policy.from_env({"EJKERNEL_BACKENDS": "-triton,!cuda"})
    assert p.backend_allowed("xla") and not p.backend_allowed("triton") and not p.backend_allowed("cuda")
    p = Policy.from_env({"EJKERNEL_BACKENDS": "all"})
    assert p.backend_allowed("triton") and p.backend_allowed("cuda")


def test_from_env_everything_at_once(tmp_path):
    p = Policy.from_env(
        {
            "EJKERNEL_AUTOTUNE": "yes",
            "EJKERNEL_AUTOTUNE_MODE": "fwdbwd",
            "EJKERNEL_CACHE_MISS": "warn",
            "EJKERNEL_PERSISTENT_CACHE": "off",
            "EJKERNEL_CACHE_DIR": str(tmp_path),
            "EJKERNEL_BACKENDS": "xla,-cuda",
            "UNRELATED": "whatever",
        }
    )
    assert p == Policy(
        autotune=True,
        autotune_mode="fwdbwd",
        on_cache_miss="warn",
        persistent_cache=False,
        cache_dir=tmp_path,
        backends_allow=frozenset({"xla"}),
        backends_deny=frozenset({"cuda"}),
    )


def test_from_env_without_argument_reads_os_environ(monkeypatch, tmp_path):
    monkeypatch.setenv("EJKERNEL_AUTOTUNE", "on")
    monkeypatch.setenv("EJKERNEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("EJKERNEL_CACHE_MISS", "error")
    p = Policy.from_env()
    assert p.autotune is True
    assert p.cache_dir == tmp_path
    assert p.on_cache_miss == "error"


def test_environment_is_read_once_at_import(monkeypatch):
    before = current_policy()
    monkeypatch.setenv("EJKERNEL_AUTOTUNE", "1")
    monkeypatch.setenv("EJKERNEL_CACHE_MISS", "error")
    assert current_policy() == before
    assert default_policy() is current_policy()


def test_bad_environment_does_not_break_import():
    env = dict(os.environ, EJKERNEL_AUTOTUNE="maybe", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", "import ejkernel; print(ejkernel.ops.current_policy().autotune)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "False"
    assert "EJKERNEL_AUTOTUNE" in proc.stderr
    assert "maybe" in proc.stderr


def test_a_bad_variable_is_ignored_alone(tmp_path, caplog):
    """One invalid variable is reported and ignored; every other variable still applies."""
    env = {
        "EJKERNEL_AUTOTUNE": "maybe",
        "EJKERNEL_CACHE_MISS": "sometimes",
        "EJKERNEL_CACHE_DIR": str(tmp_path),
        "EJKERNEL_BACKENDS": "xla",
        "EJKERNEL_AUTOTUNE_MODE": "fwdbwd",
    }
    with caplog.at_level(logging.WARNING, logger="ejkernel"):
        p = Policy.from_env(env, strict=False)
    assert (p.cache_dir, p.backends_allow, p.autotune_mode) == (tmp_path, frozenset({"xla"}), "fwdbwd")
    assert (p.autotune, p.on_cache_miss) == (False, "heuristic")  # the bad ones keep their defaults
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "EJKERNEL_AUTOTUNE='maybe'" in messages and "EJKERNEL_CACHE_MISS='sometimes'" in messages
    with pytest.raises(ValueError, match="EJKERNEL_AUTOTUNE='maybe'"):
        Policy.from_env(env)  # strict (the default) raises


def test_environment_reaches_the_default_policy_in_a_fresh_process(tmp_path):
    env = dict(
        os.environ,
        EJKERNEL_AUTOTUNE="1",
        EJKERNEL_CACHE_MISS="warn",
        EJKERNEL_CACHE_DIR=str(tmp_path),
        EJKERNEL_BACKENDS="xla",
        JAX_PLATFORMS="cpu",
    )
    code = (
        "import ejkernel\n"
        "p = ejkernel.ops.default_policy()\n"
        "assert p is ejkernel.ops.current_policy()\n"
        "print(p.autotune, p.on_cache_miss, p.cache_dir, sorted(p.backends_allow))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == f"True warn {tmp_path} ['xla']"


# -- the policy() context manager -----------------------------------------------------------------


def test_policy_changes_fields_and_restores():
    before = current_policy()
    with policy(autotune=True, on_cache_miss="warn") as p:
        assert current_policy() is p
        assert p.autotune is True
        assert p.on_cache_miss == "warn"
        assert p.cache_dir == before.cache_dir  # the other fields are kept
        assert p.autotune_repeats == before.autotune_repeats
    assert current_policy() is before


def test_policy_without_changes_keeps_the_current_one():
    before = current_policy()
    with policy() as p:
        assert p is before
        assert current_policy() is before
    assert current_policy() is before


def test_policy_blocks_nest():
    before = current_policy()
    with policy(autotune=True) as outer:
        with policy(on_cache_miss="error") as inner:
            assert inner.autotune is True  # inherited from the outer block
            assert inner.on_cache_miss == "error"
            with policy(autotune=False, autotune_repeats=2):
                assert current_policy().autotune is False
                assert current_policy().on_cache_miss == "error"
                assert current_policy().autotune_repeats == 2
            assert current_policy() is inner
        assert current_policy() is outer
        assert current_policy().on_cache_miss == before.on_cache_miss
    assert current_policy() is before


def test_policy_restores_when_the_block_raises():
    before = current_policy()
    with pytest.raises(RuntimeError, match="boom"), policy(autotune=True, persistent_cache=False):
        assert current_policy().autotune is True
        raise RuntimeError("boom")
    assert current_policy() is before
    with pytest.raises(KeyError), policy(on_cache_miss="warn"), policy(on_cache_miss="error"):
        raise KeyError("x")
    assert current_policy() is before


def test_policy_with_a_base_replaces_it_whole(tmp_path):
    base = Policy(autotune_repeats=3, cache_dir=tmp_path)
    with policy(autotune=True, on_cache_miss="warn"), policy(base) as p:
        assert p is base
        assert current_policy() is base
        assert current_policy().autotune is False  # not inherited from the outer block
        assert current_policy().on_cache_miss == "heuristic"
    with policy(base, on_cache_miss="error") as p:
        assert p == dataclasses.replace(base, on_cache_miss="error")
        assert p.cache_dir == tmp_path
        assert p.autotune_repeats == 3


def test_policy_bad_changes_raise_and_change_nothing():
    before = current_policy()
    with pytest.raises(ValueError, match="on_cache_miss"), policy(on_cache_miss="sometimes"):
        pass  # pragma: no cover
    assert current_policy() is before
    with pytest.raises(TypeError), policy(no_such_field=1):
        pass  # pragma: no cover
    assert current_policy() is before


def test_policy_is_exported_at_the_top_level():
    assert ejkernel.policy is policy
    assert ejkernel.ops.policy is policy
    assert ejkernel.Policy is Policy


def test_a_new_thread_sees_the_default_policy():
    seen: list[Policy] = []
    with policy(autotune=True, on_cache_miss="error") as scoped:
        t = threading.Thread(target=lambda: seen.append(current_policy()))
        t.start()
        t.join(timeout=30)
        assert current_policy() is scoped
    assert seen == [default_policy()]
    assert seen[0] is not scoped


def test_a_thread_scope_does_not_leak_into_the_caller():
    entered, leave = threading.Event(), threading.Event()
    in_thread: list[Policy] = []

    def work() -> None:
        with policy(on_cache_miss="error"):
            in_thread.append(current_policy())
            entered.set()
            leave.wait(timeout=30)

    before = current_policy()
    t = threading.Thread(target=work)
    t.start()
    try:
        assert entered.wait(timeout=30)
        assert current_policy() is before  # the thread's block is its own
    finally:
        leave.set()
        t.join(timeout=30)
    assert in_thread[0].on_cache_miss == "error"


def test_an_asyncio_task_inherits_a_copy():
    async def child(entered: asyncio.Event, leave: asyncio.Event) -> tuple[Policy, Policy]:
        inherited = current_policy()
        with policy(on_cache_miss="error") as own:
            entered.set()
            await leave.wait()
            assert current_policy() is own
        return inherited, own

    async def main() -> None:
        with policy(autotune=True) as outer:
            entered, leave = asyncio.Event(), asyncio.Event()
            task = asyncio.create_task(child(entered, leave))
            await entered.wait()
            # the task's scope does not reach its parent
            assert current_policy() is outer
            with policy(autotune_repeats=7):
                leave.set()
                inherited, own = await task
            assert inherited is outer  # a copy of the context at creation
            assert own.autotune is True and own.on_cache_miss == "error"
            assert own.autotune_repeats == outer.autotune_repeats  # the parent's later change is not seen
            assert current_policy() is outer

    before = current_policy()
    asyncio.run(main())
    assert current_policy() is before


# -- a scoped policy reaches the calls ------------------------------------------------------------


def _qkv(seq: int):
    return tuple(jax.random.normal(jax.random.key(i), (1, seq, 2, 16), jnp.float32) for i in range(3))


def test_scoped_error_policy_reaches_a_call():
    q, k, v = _qkv(11)  # a shape no other test in this module uses: nothing cached in memory
    with (
        policy(on_cache_miss="error", persistent_cache=False, autotune=False),
        pytest.raises(ConfigResolutionError) as excinfo,
    ):
        ejkernel.flash_attention(q, k, v)
    err = excinfo.value
    message = str(err)
    for tier in ("memory", "persistent", "autotune", "heuristic"):
        assert any(a.startswith(tier) for a in err.attempts), err.attempts
        assert f"  - {tier}" in message
    assert "on_cache_miss='error'" in message
    assert "flash_attention" in err.key

    # without the scoped policy the same call works (the heuristic is allowed) ...
    with policy(on_cache_miss="heuristic"):
        out = ejkernel.flash_attention(q, k, v)
    assert out.shape == (1, 11, 2, 16)
    assert bool(jnp.all(jnp.isfinite(out)))
    # ... and the heuristic did not fill the memory cache, so the error policy still applies
    with policy(on_cache_miss="error", persistent_cache=False), pytest.raises(ConfigResolutionError):
        ejkernel.flash_attention(q, k, v)


def test_call_works_under_the_default_policy():
    q, k, v = _qkv(8)
    out = ejkernel.flash_attention(q, k, v)
    assert out.shape == (1, 8, 2, 16)
    ref = jax.nn.dot_product_attention(q, k, v)
    assert jnp.allclose(out, ref, atol=1e-5, rtol=1e-5)


def test_an_explicit_config_needs_no_cache_under_the_error_policy():
    q, k, v = _qkv(7)
    with policy(on_cache_miss="error", persistent_cache=False):
        out = ejkernel.flash_attention(q, k, v, cfg=ejkernel.FlashAttentionConfig())
    assert out.shape == (1, 7, 2, 16)
