"""Backend discovery through the ``ejkernel.backends`` entry point, with real (fake) plugins.

Each fake plugin is an installed distribution in miniature: a ``*.dist-info`` folder with
``METADATA`` and ``entry_points.txt`` next to its module, on ``sys.path``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from ejkernel.errors import BackendUnavailableError, NoImplementationError, UnknownPlatformError
from ejkernel.ops import KernelRegistry, Policy, policy
from ejkernel.ops.registry import KNOWN_BACKENDS, KnownBackend

GOOD = """
from ejkernel.ops import KernelImpl
from ejkernel.modules import FlashAttentionConfig

class Impl(KernelImpl):
    def heuristic_cfg(self, args, device):
        return FlashAttentionConfig()
    def run(self, args, cfg):
        return args.query * 0 + 42.0

def register(registry):
    registry.register("flash_attention", "pallas", "any", priority=1000, name="acme")(Impl)
"""

BROKEN_IMPORT = "import this_module_does_not_exist_anywhere\ndef register(registry): pass\n"

HALF_REGISTERED = """
from ejkernel.ops import KernelImpl
def register(registry):
    registry.register("flash_attention", "cuda", "gpu", name="half")(KernelImpl)
    raise RuntimeError("registration failed halfway")
"""


def install_fake(root, dist: str, module: str, source: str, ep_name: str | None = None, target: str | None = None):
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    ep = f"{ep_name or module} = {target or module + ':register'}"
    (info / "entry_points.txt").write_text(f"[ejkernel.backends]\n{ep}\n")


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    install_fake(tmp_path, "acme-backend", "acme_backend", GOOD, ep_name="acme")
    install_fake(tmp_path, "broken-backend", "broken_backend", BROKEN_IMPORT, ep_name="broken")
    install_fake(tmp_path, "half-backend", "half_backend", HALF_REGISTERED, ep_name="half")
    install_fake(tmp_path, "notcallable-backend", "nc_backend", "register = 3\n", ep_name="notcallable")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    return tmp_path


def test_discovery_is_lazy_isolated_and_reported(plugins, caplog):
    reg = KernelRegistry()
    assert reg._plugins is None  # nothing scanned at construction
    with caplog.at_level(logging.WARNING, logger="ejkernel"):
        infos = {b.name: b for b in reg.backends()}
    assert infos["acme"].status == "loaded"
    assert infos["acme"].distribution == "acme-backend" and infos["acme"].version == "1.0"
    assert infos["acme"].implementations == ("flash_attention/acme",)
    assert infos["xla"].status == "loaded"  # the real plugin is unaffected by the broken ones
    assert infos["broken"].status == "failed" and "this_module_does_not_exist_anywhere" in infos["broken"].error
    assert infos["half"].status == "failed" and "registration failed halfway" in infos["half"].error
    assert infos["notcallable"].status == "failed" and "not callable" in infos["notcallable"].error
    # What a failing plugin registered before failing is rolled back.
    assert "half" not in [i.name for i in reg.implementations("flash_attention")]
    # Failures are logged once, not at every query.
    assert sum("failed to" in r.message for r in caplog.records) == 3
    caplog.clear()
    reg.backends()
    assert not caplog.records
    # The third-party implementation wins by priority.
    assert reg.get("flash_attention").name == "acme"
    assert reg.get("flash_attention").plugin == "acme"


def test_policy_disables_plugins_until_allowed(plugins):
    reg = KernelRegistry()
    with policy(Policy(backends_deny=frozenset({"acme", "broken", "half", "notcallable"}))):
        infos = {b.name: b for b in reg.backends()}
        assert infos["acme"].status == "disabled"
        names = [i.name for i in reg.implementations("flash_attention")]
        assert "acme" not in names and "xla" in names
    infos = {b.name: b for b in reg.backends()}  # a later policy that allows it loads it
    assert infos["acme"].status == "loaded"


def test_import_ejkernel_survives_broken_plugins(plugins):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(plugins), os.environ.get("PYTHONPATH", "")]))
    code = textwrap.dedent(
        """
        import jax.numpy as jnp, ejkernel
        q = jnp.ones((1, 4, 2, 8))
        out = ejkernel.flash_attention(q, q, q)           # the acme plugin answers 42
        assert float(out[0, 0, 0, 0]) == 42.0, out
        print({b.name: b.status for b in ejkernel.backends()})
        """
    )
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "'broken': 'failed'" in res.stdout and "'acme': 'loaded'" in res.stdout
    res = subprocess.run(
        [sys.executable, "-m", "ejkernel", "info"], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert "broken" in res.stdout and "failed to import" in res.stdout and "this_module_does_not_exist" in res.stdout
    assert "half" in res.stdout and "failed to register" in res.stdout
    # Every first-party backend is listed: installed, or not with the command that installs it.
    installed = {ep.name for ep in importlib.metadata.entry_points(group="ejkernel.backends")}  # loads nothing
    for name, known in KNOWN_BACKENDS.items():
        assert name in res.stdout
        if name not in installed:
            assert "not installed" in res.stdout and known.install in res.stdout


def test_env_var_sets_the_default_backend_policy(plugins):
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(plugins), os.environ.get("PYTHONPATH", "")]),
        EJKERNEL_BACKENDS="-acme",
    )
    code = "import ejkernel; print({b.name: b.status for b in ejkernel.backends()})"
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "'acme': 'disabled'" in res.stdout and "'xla': 'loaded'" in res.stdout


# -- platform= naming a backend that cannot serve the call -----------------------------------------

# Known backends for the fake plugins (the real table names the first-party distributions).
KNOWN = {
    "broken": KnownBackend("broken", "broken-backend", "pip install 'ejkernel-core[broken]'"),
    "ghost": KnownBackend("ghost", "ghost-backend", "pip install 'ejkernel-core[ghost]'", "a ghost device"),
}


def unavailable(reg: KernelRegistry, op: str, platform: str) -> BackendUnavailableError:
    with pytest.raises(BackendUnavailableError) as info:
        reg.get(op, platform=platform)
    assert isinstance(info.value, NoImplementationError)  # what callers caught before
    return info.value


def test_platform_names_a_backend_that_failed_to_import(plugins):
    err = unavailable(KernelRegistry(known_backends=KNOWN), "flash_attention", "broken")
    assert err.status == "failed to import" and err.backend == "broken"
    msg = str(err)
    assert "failed to import" in msg and "No module named 'this_module_does_not_exist_anywhere'" in msg
    assert "reinstall it: pip install 'ejkernel-core[broken]'" in msg
    assert "xla" in err.installed and "flash_attention" in msg


def test_platform_names_a_backend_that_failed_to_register(plugins):
    err = unavailable(KernelRegistry(known_backends=KNOWN), "flash_attention", "half")
    assert err.status == "failed to register"
    assert "registration failed halfway" in str(err)
    # A third-party plugin's install command comes from its distribution.
    assert err.install == "pip install --force-reinstall half-backend" and err.install in str(err)


def test_platform_names_a_known_backend_that_is_not_installed(plugins):
    err = unavailable(KernelRegistry(known_backends=KNOWN), "flash_attention", "ghost")
    assert err.status == "not installed"
    msg = str(err)
    assert "is not installed" in msg and "ghost-backend" in msg and "a ghost device" in msg
    assert "install it: pip install 'ejkernel-core[ghost]'" in msg


def test_platform_names_a_backend_without_the_op(plugins):
    err = unavailable(KernelRegistry(known_backends=KNOWN), "mean_pooling", "acme")
    assert err.status == "no implementation"
    msg = str(err)
    assert "acme-backend 1.0" in msg and "has no implementation of mean_pooling" in msg
    assert "it implements: flash_attention" in msg and "xla" in err.installed


def test_platform_names_a_backend_the_policy_disables(plugins):
    reg = KernelRegistry(known_backends=KNOWN)
    with policy(Policy(backends_deny=frozenset({"acme"}))):
        err = unavailable(reg, "flash_attention", "acme")
    assert err.status == "disabled" and "disabled by the policy" in str(err)


def test_select_explains_a_missing_backend_too(plugins):
    import jax.numpy as jnp

    from ejkernel.ops import bind, device_for_arrays

    reg = KernelRegistry(known_backends=KNOWN)
    q = jnp.ones((1, 4, 2, 8))
    args = bind("flash_attention", q, q, q)
    with pytest.raises(BackendUnavailableError, match="is not installed"):
        reg.select("flash_attention", args, device_for_arrays([q]), platform="ghost")


def test_an_unknown_platform_mentions_the_backends_that_failed_to_load(plugins):
    with pytest.raises(UnknownPlatformError) as info:
        KernelRegistry(known_backends=KNOWN).get("flash_attention", platform="acmee")
    msg = str(info.value)
    assert "unknown platform 'acmee'" in msg and "backends that failed to load" in msg
    assert "broken: ModuleNotFoundError" in msg and "registration failed halfway" in msg
    assert set(info.value.failed) == {"broken", "half", "notcallable"}


def test_backends_lists_known_backends_that_are_not_installed(plugins):
    reg = KernelRegistry(known_backends=KNOWN)
    assert "ghost" not in {b.name for b in reg.backends()}  # the default lists what is installed
    infos = {b.name: b for b in reg.backends(include_missing=True)}
    assert infos["ghost"].status == infos["ghost"].state == "not installed"
    assert infos["ghost"].install == "pip install 'ejkernel-core[ghost]'"
    assert infos["broken"].state == "failed to import" and infos["broken"].install == KNOWN["broken"].install
    assert infos["half"].state == "failed to register"
    assert infos["acme"].state == "loaded"
