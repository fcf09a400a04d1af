"""Autotuning on an NVIDIA GPU: the Triton flash_attention tunes once, stores the config in the
persistent cache, and a second process reuses it without tuning (the tuning time is printed); a
call naming no implementation chooses among every implementation that accepts it (cuDNN, Triton,
XLA) and the cache records the winner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu

_CODE = textwrap.dedent(
    """
    import sys, time, numpy as np, jax, jax.numpy as jnp, ejkernel
    from ejkernel.ops import record_dispatches
    b, s, h, d = 2, 4096, 16, 128
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((b, s, h, d)), jnp.bfloat16) for _ in range(3))
    f = jax.jit(lambda q, k, v: ejkernel.flash_attention(q, k, v, causal=True, platform="triton"))
    t = time.perf_counter()
    with record_dispatches() as log:
        f(q, k, v).block_until_ready()
    print(log[0].tier.value, round(time.perf_counter() - t, 2), log[0].config.to_dict())
    """
)


@pytest.mark.parametrize("mode", ["fwd", "fwdbwd"])
def test_triton_autotune_persists_across_processes(tmp_path, mode):
    env = dict(os.environ, EJKERNEL_CACHE_DIR=str(tmp_path), EJKERNEL_AUTOTUNE="1", EJKERNEL_AUTOTUNE_MODE=mode)
    first = subprocess.run([sys.executable, "-c", _CODE], env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    second = subprocess.run([sys.executable, "-c", _CODE], env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    tier1, secs1 = first.stdout.split()[:2]
    tier2, secs2 = second.stdout.split()[:2]
    assert (tier1, tier2) == ("autotune", "persistent")
    entries = json.loads((tmp_path / "configs-v1.json").read_text())["entries"]
    (rec,) = entries.values()
    assert rec["impl"] == "triton" and rec["mode"] == mode and rec["candidates"] > 1
    print(
        f"\n[autotune {mode}] first process {secs1} s (tuning {rec['tuning_seconds']:.1f} s over "
        f"{rec['candidates']} candidates), second process {secs2} s; chosen {rec['config']} ({rec['time_ms']:.3f} ms)"
    )


_AUTO = textwrap.dedent(
    """
    import numpy as np, jax, jax.numpy as jnp, ejkernel
    from ejkernel.ops import record_dispatches
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((2, 2048, 8, 128)), jnp.bfloat16) for _ in range(3))
    with record_dispatches() as log:
        jax.jit(lambda q, k, v: ejkernel.flash_attention(q, k, v, causal=True))(q, k, v).block_until_ready()
    print(log[0].tier.value, log[0].impl)
    """
)


def test_autotune_chooses_among_implementations_across_processes(tmp_path):
    env = dict(os.environ, EJKERNEL_CACHE_DIR=str(tmp_path), EJKERNEL_AUTOTUNE="1")
    runs = [subprocess.run([sys.executable, "-c", _AUTO], env=env, capture_output=True, text=True, timeout=600)]
    assert runs[0].returncode == 0, runs[0].stderr[-3000:]
    runs.append(subprocess.run([sys.executable, "-c", _AUTO], env=env, capture_output=True, text=True, timeout=600))
    assert runs[1].returncode == 0, runs[1].stderr[-3000:]
    (tier1, impl1), (tier2, impl2) = (r.stdout.split()[:2] for r in runs)
    assert (tier1, tier2) == ("autotune", "persistent") and impl1 == impl2
    entries = json.loads((tmp_path / "configs-v1.json").read_text())["entries"]
    (choice,) = (e for e in entries.values() if "times_ms" in e)
    assert choice["impl"] == impl1 and {"cudnn", "triton", "xla"} <= set(choice["times_ms"])
    times = {n: t for n, t in choice["times_ms"].items() if t is not None}
    assert times[impl1] == min(times.values())
    print(f"\n[autotune across implementations] chose {impl1}: {choice['times_ms']}")
