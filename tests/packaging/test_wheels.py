"""Packaging: build the wheels, install ``ejkernel-core[xla]`` from them into a fresh virtual
environment, and call the API there (``nox -s packaging``; needs network for jax)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["ejkernel-core", "ejkernel-xla"]


def sh(*cmd: object, timeout: int = 900) -> str:
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{cmd}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    dist = tmp_path_factory.mktemp("dist")
    for pkg in PACKAGES:
        sh(sys.executable, "-m", "build", "--wheel", "--outdir", dist, ROOT / "packages" / pkg)
    found = {w.name.split("-")[0].replace("_", "-"): w for w in dist.glob("*.whl")}
    assert set(found) == set(PACKAGES), found
    return found


def test_wheel_contents(wheels):
    with zipfile.ZipFile(wheels["ejkernel-core"]) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "ejkernel/py.typed" in names and "ejkernel/testing/conformance.py" in names
    assert not any(n.startswith("tests/") for n in names)
    assert "Provides-Extra: xla" in meta
    assert "Requires-Dist: ejkernel-xla==0.1.0; extra == 'xla'" in meta
    assert "ejkernel = ejkernel.cli:main" in entry
    with zipfile.ZipFile(wheels["ejkernel-xla"]) as z:
        names = z.namelist()
        entry = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "[ejkernel.backends]" in entry and "xla = ejkernel_xla:register" in entry
    assert "Requires-Dist: ejkernel-core==0.1.0" in meta


def test_install_from_wheels_into_a_fresh_venv(wheels, tmp_path):
    venv = tmp_path / "venv"
    sh(sys.executable, "-m", "venv", venv)
    py = venv / "bin" / "python"
    dist = wheels["ejkernel-core"].parent
    sh(py, "-m", "pip", "install", "-q", "--find-links", dist, "ejkernel-core[xla]")
    check = textwrap.dedent(
        """
        import jax.numpy as jnp, numpy as np, ejkernel
        from ejkernel.ops import record_dispatches
        from ejkernel.testing import attention_reference
        assert ejkernel.__version__ == "0.1.0", ejkernel.__version__
        assert [(b.name, b.status) for b in ejkernel.backends()] == [("xla", "loaded")], ejkernel.backends()
        q = jnp.asarray(np.random.default_rng(0).standard_normal((1, 33, 4, 16)), jnp.float32)
        k = v = q[:, :, :2]
        with record_dispatches() as log:
            out = ejkernel.flash_attention(q, k, v, causal=True)
        assert log[0].impl == "xla" and log[0].plugin == "xla"
        err = float(jnp.max(jnp.abs(out - attention_reference(q, k, v, causal=True))))
        assert err < 1e-5, err
        print("ok", ejkernel.__file__)
        """
    )
    out = sh(py, "-c", check)
    assert out.startswith("ok") and str(venv) in out  # the installed copy, not the source tree
    assert "xla" in sh(venv / "bin" / "ejkernel", "info")
    # Without a backend the call fails with an error that names the extra to install.
    sh(py, "-m", "pip", "uninstall", "-q", "-y", "ejkernel-xla")
    res = subprocess.run(
        [
            str(py),
            "-c",
            "import jax.numpy as jnp, ejkernel; q = jnp.ones((1, 4, 2, 8)); ejkernel.flash_attention(q, q, q)",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode != 0 and "pip install ejkernel-core[xla]" in res.stderr
