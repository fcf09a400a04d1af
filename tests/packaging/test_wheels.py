"""Packaging: every install command of the README's "Set up" section, each in a fresh environment
(``nox -s packaging``; needs the package index for jax, uv, and nvcc for the CUDA wheel).

- the uv workspace: ``uv sync --extra xla`` in a copy of the checkout, then a call on the CPU;
  the other extras' syncs are resolved from the workspace (``uv export``), not installed;
- the wheelhouse: ``bash scripts/wheelhouse.sh`` (the CUDA wheel for one architecture,
  EJKERNEL_CUDA_ARCHS, default 80-real: the ``tests`` session compiles every default one), then
  ``pip install --find-links dist "ejkernel-core[xla]"`` and ``[triton]`` into a fresh venv and a
  call on the CPU; ``[gpu]`` and the CUDA 12 line are only resolved (``uv pip compile``: their
  CUDA wheels are gigabytes);
- the CUDA wheel's offline build: the script builds it from the hash-checked build requirements
  it collects in ``dist/cuda-build`` alone, with the network cut where unshare may; its extension
  loads in a fresh venv, and a build requirement whose hash does not match stops the build.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from .conftest import HAVE_NVCC, ROOT, sh

pytestmark = pytest.mark.packaging

CUDA = ROOT / "packages/ejkernel-cuda"
CUDA_REQUIREMENTS = "packages/ejkernel-cuda/build-requirements.txt"
PURE = ["ejkernel-core", "ejkernel-xla", "ejkernel-triton", "ejkernel-pallas"]

# The README's "Set up" commands this file runs or resolves (each must appear there verbatim).
UV_SYNC = {
    "xla": "uv sync --extra xla",
    "gpu": "uv sync --extra gpu",
    "tpu": "uv sync --extra tpu",
}
WHEELHOUSE = "bash scripts/wheelhouse.sh"
PIP_XLA = 'pip install --find-links dist "ejkernel-core[xla]"'
PIP_GPU = 'pip install --find-links dist "ejkernel-core[gpu]"'
PIP_CUDA12 = 'pip install --find-links dist "ejkernel-core[xla,triton,cuda]" "jax[cuda12]"'
# packages/ejkernel-cuda/README.md's offline build of the CUDA wheel (the script's is uv's equivalent).
PIP_CUDA_OFFLINE = (
    f"pip wheel --no-deps --no-index --find-links dist/cuda-build --build-constraint {CUDA_REQUIREMENTS} "
    "-w dist ./packages/ejkernel-cuda"
)

# Import from the installed copy, check which distributions' backends loaded (ejkernel-xla brings
# two: xla and cudnn), run flash_attention on the CPU through the XLA backend and compare with
# the reference; prints the location of the imported package.
CHECK = textwrap.dedent(
    """
    import sys, jax.numpy as jnp, numpy as np, ejkernel
    from ejkernel.ops import record_dispatches
    from ejkernel.testing import attention_reference
    assert ejkernel.__version__ == "0.1.0", ejkernel.__version__
    loaded = sorted({b.distribution for b in ejkernel.backends() if b.status == "loaded"})
    assert loaded == sorted("ejkernel-" + d for d in sys.argv[1].split(",")), ejkernel.backends()
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


def readme_setup() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("\n## Set up\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_shows_the_commands_tested_here():
    setup = readme_setup()
    lines = [ln.split("#")[0].strip() for ln in setup.splitlines()]
    for cmd in [*UV_SYNC.values(), WHEELHOUSE, PIP_XLA, PIP_GPU, PIP_CUDA12]:
        assert cmd in lines, f"README 'Set up' no longer shows {cmd!r}: update it or this test"


def test_the_cuda_readme_shows_the_offline_build_tested_here():
    lines = [ln.split("#")[0].strip() for ln in (CUDA / "README.md").read_text().splitlines()]
    assert PIP_CUDA_OFFLINE in lines, "packages/ejkernel-cuda/README.md no longer shows the offline build"
    script = (ROOT / "scripts/wheelhouse.sh").read_text().replace("\\\n", " ")
    assert re.search(
        r'build .*--package ejkernel-cuda .*--offline --no-index --find-links "\$out/cuda-build" '
        r'--build-constraints "\$reqs" --require-hashes',
        script,
    ), "scripts/wheelhouse.sh no longer builds the CUDA wheel from dist/cuda-build alone, hash-checked"


def test_the_workspace_root_forwards_every_extra_of_core():
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    core = tomllib.loads((ROOT / "packages/ejkernel-core/pyproject.toml").read_text())["project"]
    forwarded = root["project"]["optional-dependencies"]
    assert {k: [f"ejkernel-core[{k}]"] for k in core["optional-dependencies"]} == forwarded
    members = {p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists()}
    assert set(root["tool"]["uv"]["sources"]) == members


# --- the uv workspace -------------------------------------------------------------------------


def test_uv_sync_installs_core_and_a_backend_from_the_checkout(checkout, env, uv):
    sh(uv, *UV_SYNC["xla"].split()[1:], cwd=checkout, env=env, timeout=600)
    out = sh(checkout / ".venv/bin/python", "-c", CHECK, "xla", cwd=checkout, env=env)
    assert out.startswith("ok") and str(checkout / "packages/ejkernel-core/src") in out  # editable
    # `uv run` keeps the synced extras (an inexact sync): the XLA backend is still there.
    assert "ejkernel-xla" in sh(uv, "run", "ejkernel", "info", cwd=checkout, env=env)


@pytest.mark.parametrize(
    ("extra", "members", "wanted"),
    [
        pytest.param("triton", ["ejkernel-core", "ejkernel-triton"], ["triton==", "jax-triton=="], id="sync-triton"),
        pytest.param(
            "gpu",
            ["ejkernel-core", "ejkernel-xla", "ejkernel-triton", "ejkernel-cuda"],
            ["jax-cuda13-plugin==", "triton=="],
            id="sync-gpu",
        ),
        pytest.param("tpu", ["ejkernel-core", "ejkernel-pallas", "ejkernel-xla"], ["libtpu=="], id="sync-tpu"),
    ],
)
def test_uv_sync_extras_resolve_from_the_workspace(checkout, env, uv, extra, members, wanted):
    """What `uv sync --extra EXTRA` would install: the members from the checkout, editable."""
    out = sh(uv, "export", "--extra", extra, "--no-hashes", "--no-header", cwd=checkout, env=env, timeout=300)
    editable = sorted(re.findall(r"^-e \./packages/(\S+)$", out, re.M))
    assert editable == sorted(members), out
    for name in wanted:
        assert re.search(rf"^{re.escape(name)}", out, re.M), f"{name} not in the {extra} sync:\n{out}"
    if extra == "gpu":
        assert "jax-cuda12" not in out


# --- the wheelhouse -------------------------------------------------------------------------------


CUDA_ARCHS = os.environ.get("EJKERNEL_CUDA_ARCHS", "80-real")


@pytest.fixture(scope="module")
def wheelhouse_log(checkout, env) -> str:
    """``bash scripts/wheelhouse.sh`` in the fresh copy (no CMake build folder from earlier builds);
    what it printed."""
    res = subprocess.run(
        ["bash", "scripts/wheelhouse.sh"],
        cwd=checkout,
        env={**env, "EJKERNEL_CUDA_ARCHS": CUDA_ARCHS},
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert res.returncode == 0, f"wheelhouse.sh:\n{res.stdout[-3000:]}\n{res.stderr[-6000:]}"
    return res.stdout + res.stderr


@pytest.fixture(scope="module")
def wheelhouse(checkout, wheelhouse_log) -> Path:
    return checkout / "dist"


def wheel(dist: Path, name: str) -> Path:
    (found,) = dist.glob(f"{name.replace('-', '_')}-0.1.0-*.whl")
    return found


def read(whl: Path, suffix: str) -> str:
    with zipfile.ZipFile(whl) as z:
        return z.read(next(n for n in z.namelist() if n.endswith(suffix))).decode()


def test_the_wheelhouse_holds_the_five_wheels(wheelhouse):
    names = sorted(w.name.split("-")[0].replace("_", "-") for w in wheelhouse.glob("*.whl"))
    assert names == sorted(PURE + (["ejkernel-cuda"] if HAVE_NVCC else []))
    core = wheel(wheelhouse, "ejkernel-core")
    with zipfile.ZipFile(core) as z:
        names = z.namelist()
    assert "ejkernel/py.typed" in names and "ejkernel/testing/conformance.py" in names
    assert not any(n.startswith("tests/") for n in names)
    meta = read(core, ".dist-info/METADATA")
    for extra in ("xla", "triton", "cuda", "gpu", "tpu", "plot", "testing", "all"):
        assert f"Provides-Extra: {extra}" in meta
    assert "Requires-Dist: ejkernel-xla==0.1.0; extra == 'xla'" in meta
    assert "Requires-Dist: jax[cuda13]>=0.10.2; extra == 'gpu'" in meta
    assert "Requires-Dist: ejkernel-xla==0.1.0; extra == 'tpu'" in meta  # every op runs on a TPU host
    assert "ejkernel = ejkernel.cli:main" in read(core, ".dist-info/entry_points.txt")
    for backend, entry in [("ejkernel-xla", "xla = ejkernel_xla:register"), ("ejkernel-triton", "triton = ")]:
        assert "[ejkernel.backends]" in read(wheel(wheelhouse, backend), "entry_points.txt")
        assert entry in read(wheel(wheelhouse, backend), "entry_points.txt")
        assert "Requires-Dist: ejkernel-core==0.1.0" in read(wheel(wheelhouse, backend), "METADATA")
    if HAVE_NVCC:
        cuda = wheel(wheelhouse, "ejkernel-cuda")
        assert f"cp{sys.version_info.major}{sys.version_info.minor}" in cuda.name
        with zipfile.ZipFile(cuda) as z:
            assert any(re.fullmatch(r"ejkernel_cuda/_ext\..*\.so", n) for n in z.namelist()), z.namelist()


def test_pip_installs_core_xla_then_triton_from_the_wheelhouse(wheelhouse, env, tmp_path):
    venv = tmp_path / "venv"
    try:
        sh(sys.executable, "-m", "venv", venv)
        py = venv / "bin" / "python"
        pip = [py, "-m", "pip", "install", "-q", "--find-links", wheelhouse]
        sh(*pip, "ejkernel-core[xla]", cwd=tmp_path)  # = PIP_XLA
        out = sh(py, "-c", CHECK, "xla", cwd=tmp_path, env=env)
        assert out.startswith("ok") and str(venv) in out  # the installed copy, not the source tree
        assert "xla" in sh(venv / "bin" / "ejkernel", "info", env=env)
        # [triton] adds its backend (it loads on a CPU; its kernels decline there).
        sh(*pip, "ejkernel-core[triton]", cwd=tmp_path)
        sh(py, "-c", CHECK, "triton,xla", cwd=tmp_path, env=env)
        # Without a backend that runs here, the call fails with an error that names the extra.
        sh(py, "-m", "pip", "uninstall", "-q", "-y", "ejkernel-xla", "ejkernel-triton")
        res = subprocess.run(
            [
                str(py),
                "-c",
                "import jax.numpy as jnp, ejkernel; q = jnp.ones((1, 4, 2, 8)); ejkernel.flash_attention(q, q, q)",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert res.returncode != 0 and "pip install 'ejkernel-core[xla]'" in res.stderr, res.stderr[-3000:]
    finally:
        shutil.rmtree(venv, ignore_errors=True)  # 1.5 GB with triton


@pytest.mark.skipif(not HAVE_NVCC, reason="no nvcc: the wheelhouse has no ejkernel-cuda wheel")
@pytest.mark.parametrize(
    ("reqs", "wanted", "unwanted"),
    [
        (
            ["ejkernel-core[gpu]"],
            ["ejkernel-cuda", "ejkernel-triton", "jax-cuda13-plugin", "ejkernel-xla"],
            "jax-cuda12",
        ),
        (
            ["ejkernel-core[xla,triton,cuda]", "jax[cuda12]"],
            ["ejkernel-cuda", "ejkernel-triton", "jax-cuda12-plugin", "ejkernel-xla"],
            "jax-cuda13",
        ),
    ],
    ids=["cuda13", "cuda12"],  # not "gpu": conftest skips a test with that keyword off a GPU
)
def test_the_gpu_installs_resolve_from_the_wheelhouse(wheelhouse, env, uv, tmp_path, reqs, wanted, unwanted):
    """PIP_GPU and PIP_CUDA12, resolved for Linux (their CUDA wheels are gigabytes to install)."""
    (tmp_path / "requirements.in").write_text("\n".join(reqs) + "\n")
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    out = sh(
        uv,
        "pip",
        "compile",
        "--no-header",
        "--python-version",
        py,
        "--python-platform",
        "x86_64-manylinux_2_28",
        "--find-links",
        wheelhouse,
        tmp_path / "requirements.in",
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    pins = dict(line.split("==") for line in out.splitlines() if "==" in line and not line.startswith(" "))
    for name in wanted:
        assert name in pins, f"{name} not resolved for {reqs}:\n{out}"
    assert pins["ejkernel-cuda"] == pins["ejkernel-triton"] == pins["ejkernel-xla"] == "0.1.0"
    assert "triton" in pins and "jax-triton" in pins
    assert pins[wanted[2]] == pins["jaxlib"], "the CUDA plugin must match jaxlib"
    assert not any(n.startswith(unwanted) for n in pins), out


# --- the CUDA wheel's offline build ---------------------------------------------------------------


def build_requirements(path: Path) -> dict[str, tuple[Requirement, list[str]]]:
    """The entries of a hashed requirements file that apply to this Python: name -> (pin, hashes)."""
    text = path.read_text().replace("\\\n", " ")
    out = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        spec, *hashes = line.split("--hash=")
        req = Requirement(spec)
        if req.marker is None or req.marker.evaluate():
            out[canonicalize_name(req.name)] = (req, [h.strip() for h in hashes])
    return out


def pinned_version(req: Requirement) -> Version:
    (spec,) = req.specifier
    assert spec.operator == "==", req
    return Version(spec.version)


def test_every_cuda_build_requirement_is_pinned_with_hashes():
    """build-requirements.txt pins what [build-system] requires (and the cmake and ninja that
    scikit-build-core asks for), every pin with hashes, the CUTLASS one at CMake's version."""
    pyproject = tomllib.loads((CUDA / "pyproject.toml").read_text())
    pins = build_requirements(ROOT / CUDA_REQUIREMENTS)
    assert pins and all(hashes and all(h.startswith("sha256:") for h in hashes) for _, hashes in pins.values())
    wanted = [*pyproject["build-system"]["requires"], f"cmake{pyproject['tool']['scikit-build']['cmake']['version']}"]
    for line in [*wanted, "ninja"]:
        req = Requirement(line)
        pin, _ = pins[canonicalize_name(req.name)]
        assert req.specifier.contains(pinned_version(pin)), f"{line} vs {pin}: nox -s lock_cuda_build"
    cmake = (CUDA / "CMakeLists.txt").read_text()
    (cutlass,) = re.findall(r'set\(EJKERNEL_CUTLASS_VERSION "([0-9.]+)"\)', cmake)
    assert pinned_version(pins["nvidia-cutlass"][0]).release[:3] == Version(cutlass).release
    assert "fetch_cutlass" not in cmake and not (CUDA / "cmake").exists()


@pytest.fixture(scope="module")
def pip_venv(tmp_path_factory, uv, env) -> Path:
    """A fresh venv with a pip that checks build requirements (--build-constraint, pip >= 25.3)."""
    venv = tmp_path_factory.mktemp("pipvenv") / "venv"
    sh(uv, "venv", "--quiet", "--python", sys.executable, venv, env=env)
    sh(uv, "pip", "install", "--quiet", "--python", venv / "bin" / "python", "pip>=25.3", env=env)
    return venv / "bin" / "python"


def network_can_be_cut() -> bool:
    cut = subprocess.run(["unshare", "--net", "--map-root-user", "true"], capture_output=True, check=False)
    return cut.returncode == 0


def test_the_wheelhouse_holds_the_cuda_build_requirements(wheelhouse):
    pins = build_requirements(ROOT / CUDA_REQUIREMENTS)
    found = {}
    for whl in (wheelhouse / "cuda-build").glob("*.whl"):
        name, version, *_ = whl.name.split("-")
        found[canonicalize_name(name)] = Version(version)
    assert found == {name: pinned_version(req) for name, (req, _) in pins.items()}


@pytest.mark.skipif(not HAVE_NVCC, reason="no nvcc: the wheelhouse has no ejkernel-cuda wheel")
def test_the_cuda_wheel_is_built_offline_and_loads(wheelhouse, wheelhouse_log, pip_venv, env):
    """The script compiled the CUDA wheel from dist/cuda-build alone, with the network cut where
    unshare may (CI runs as root); the wheel installs alone and its extension loads, with the
    grouped GEMM exactly when 90a is among the architectures."""
    how = "no network: unshare" if network_can_be_cut() else "network not cut"
    assert f"from {wheelhouse}/cuda-build alone ({how})" in wheelhouse_log, wheelhouse_log[-3000:]
    install = [pip_venv, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    sh(*install, wheel(wheelhouse, "ejkernel-cuda"), env=env)
    probe = (
        "import json, ejkernel_cuda._ext as e; "
        "print(json.dumps([e.cuda_architectures, sorted(e.registrations()), e.has_grouped_matmul_sm90]))"
    )
    archs, targets, sm90 = json.loads(sh(pip_venv, "-c", probe, cwd=pip_venv.parent, env=env))
    assert archs == CUDA_ARCHS.replace(";", ",")
    assert sm90 == ("90a" in CUDA_ARCHS)
    expected = ["ejkernel_cuda_gmm", "ejkernel_cuda_paged_decode"] if sm90 else ["ejkernel_cuda_paged_decode"]
    assert targets == expected


def test_a_build_requirement_whose_hash_differs_stops_the_cuda_build(wheelhouse, checkout, pip_venv, env, tmp_path):
    """pip checks the build environment against build-requirements.txt: the README's offline build
    with nvidia-cutlass's hashes replaced fails before CMake runs."""
    lines = (checkout / CUDA_REQUIREMENTS).read_text().splitlines(keepends=True)
    first = last = next(i for i, line in enumerate(lines) if line.startswith("nvidia-cutlass=="))
    while lines[last].rstrip().endswith("\\"):  # the entry's continuation lines: its hashes
        last += 1
    entry = re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + "0" * 64, "".join(lines[first : last + 1]))
    assert entry.count("sha256:" + "0" * 64) >= 1
    tampered = tmp_path / "build-requirements.txt"
    tampered.write_text("".join(lines[:first]) + entry + "".join(lines[last + 1 :]))
    cmd = PIP_CUDA_OFFLINE.replace(CUDA_REQUIREMENTS, str(tampered)).replace("-w dist", f"-w {tmp_path / 'out'}")
    res = subprocess.run(
        [str(pip_venv), "-m", *cmd.split()], cwd=checkout, env=env, capture_output=True, text=True, timeout=600
    )
    log = res.stdout + res.stderr
    assert res.returncode != 0
    assert "Installing build dependencies: finished with status 'error'" in log, log[-3000:]
    (cutlass, _) = build_requirements(checkout / CUDA_REQUIREMENTS)["nvidia-cutlass"]
    assert "DO NOT MATCH THE HASHES" in log and str(cutlass) in log, log[-3000:]
    assert not list((tmp_path / "out").glob("*.whl"))
