"""A pytest plugin for the docs build: conformance results that say what they measured.

``nox -s docs`` runs the conformance suite with it (``PYTHONPATH=docs pytest -p conformance_plugin
--junitxml=...``). It changes nothing in how a case is checked; it adds to the JUnit XML:

- per test, the property ``outcome``: what :func:`ejkernel.testing.conformance.check_impl` returned
  (``ok``: the output matched the reference; ``declined``: the implementation declined as its
  declaration says it must, e.g. a GPU kernel on a CPU);
- per run, where it ran (``ejkernel.platform``, ``ejkernel.device``, versions, the commit) and
  what was selected (``ejkernel.selection``).

The suite's ``--sample=N`` (``tests/conftest.py``) keeps N cases of each implementation × config,
spread from the first to the last, so the docs build stays quick; the support table counts the cases
it did not run as "not run".
"""

from __future__ import annotations

import datetime
import platform
import subprocess
from typing import Any

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    from ejkernel.testing import conformance

    original = conformance.check_impl
    outcomes: list[str] = []

    def recording(*args: Any, **kwargs: Any) -> str:
        result = original(*args, **kwargs)
        outcomes.append(result)
        return result

    conformance.check_impl = recording
    try:
        yield
    finally:
        conformance.check_impl = original
    if outcomes:
        item.user_properties.append(("outcome", outcomes[-1]))


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def pytest_sessionstart(session: pytest.Session) -> None:
    from _pytest.junitxml import xml_key

    xml = session.config.stash.get(xml_key, None)
    if xml is None or hasattr(session.config, "workerinput"):  # only the process that writes the XML
        return
    import jax

    import ejkernel

    commit = _git("rev-parse", "--short", "HEAD")
    if commit and _git("status", "--porcelain", "--untracked-files=no"):
        commit += " + uncommitted changes"
    n = session.config.getoption("sample")
    devices = jax.devices()
    for name, value in {
        "ejkernel.platform": jax.default_backend(),
        "ejkernel.device": f"{len(devices)} x {devices[0].device_kind}",
        "ejkernel.versions": f"ejkernel {ejkernel.__version__}, jax {jax.__version__}, python {platform.python_version()}",
        "ejkernel.commit": commit or "unknown",
        "ejkernel.date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "ejkernel.selection": (
            f"{n} cases of each implementation x config, first to last" if n else "every case of the default set"
        ),
    }.items():
        xml.add_global_property(name, value)
