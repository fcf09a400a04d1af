"""Development sessions: ``nox -l`` lists them. ``bash scripts/test.sh`` runs the quick suite
(``lint`` and ``quick``); ``bash scripts/test.sh --full`` the full sessions; ``.ci/run`` both.

CI's sessions sample the case matrices to stay within an hour on 2 cores: the quick suite runs the
first case of each test x implementation x config, ``tests`` and ``triton_interpret`` run
SUITE_SAMPLE cases of each, spread from the first to the last (tests/conftest.py, ``--sample``), so
every op, implementation and config runs and the later cases' features (masks, segments, sinks,
...) too. ``full`` and ``triton_interpret_full`` (not in CI) run every case; ``EJKERNEL_TEST_SAMPLE``
sets the sample of any of these sessions (0: every case).

Python versions are found on PATH as ``python3.12`` / ``python3.11`` (``scripts/test.sh`` makes
pyenv expose both when pyenv is present). Pytest's exit code 5 (nothing collected, e.g. GPU tests
on a CPU machine) counts as success.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
QUICK_SESSIONS = ["lint", "quick"]
FULL_SESSIONS = ["tests", "compat", "triton_interpret", "packaging", "docs"]
nox.options.sessions = QUICK_SESSIONS
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml(str(ROOT / "pyproject.toml"))
PURE_PACKAGES = [
    "packages/ejkernel-core",
    "packages/ejkernel-xla",
    "packages/ejkernel-triton",
    "packages/ejkernel-pallas",
]
# The versions the GPU machine runs (tests) and the oldest supported ones (compat).
JAX_CURRENT = ["jax==0.11.2", "jaxlib==0.11.2"]
JAX_OLDEST = ["jax==0.10.2", "jaxlib==0.10.2"]
PYTEST_OK = [0, 5]


CUDA_PACKAGE = "packages/ejkernel-cuda"
# Every build requirement of ejkernel-cuda pinned with its hashes (``nox -s lock_cuda_build``):
# pip >= 25.3 checks the isolated build environment against it (--build-constraint).
CUDA_BUILD_REQUIREMENTS = f"{CUDA_PACKAGE}/build-requirements.txt"


# The quick suite: ``pytest --quick`` (tests/conftest.py says what it holds; no CUDA build).
QUICK_ARGS = ["tests", "packages/ejkernel-pallas/tests"]
# Cases of each test x implementation x config in the sampled sessions (tests, triton_interpret):
# 3 (first, middle and last case of every matrix) ran CI in 5337 s of its 5400; 2 keeps the first
# and the last, where the later cases' features (masks, segments, sinks) are.
SUITE_SAMPLE = 2


def _install(session: nox.Session, jax_pins: list[str], *, cuda: bool = False) -> None:
    session.install("-U", "pip")
    session.install(
        *jax_pins,
        *nox.project.dependency_groups(PYPROJECT, "test"),
        "-e",
        "packages/ejkernel-core[plot]",
        "-e",
        "packages/ejkernel-xla",
        "-e",
        "packages/ejkernel-triton",
        "-e",
        "packages/ejkernel-pallas",
    )
    if cuda:
        # Compiles the CUDA extension with nvcc (no GPU needed): CI checks that it builds.
        session.install(
            *jax_pins,
            "--no-deps",
            "--build-constraint",
            CUDA_BUILD_REQUIREMENTS,
            CUDA_PACKAGE,
            env={"EJKERNEL_CUDA_ARCHS": _cuda_archs()},
        )


def _cuda_archs() -> str:
    return os.environ.get("EJKERNEL_CUDA_ARCHS", "80-real;90a-real;90-virtual")


# Each backend package keeps the tests of its own machinery (registration, build, FFI) next to it;
# CI runs them with the shared suite. The backends' op tests are in tests/ops/<op or family>/.
PACKAGE_TESTS = ["packages/ejkernel-cuda/tests", "packages/ejkernel-pallas/tests"]


def _op_tests(pattern: str) -> list[str]:
    """The op folders' test files named ``pattern`` (``tests/ops/**/<pattern>``), repository-relative."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "ops").rglob(pattern))


def _workers() -> str:
    return os.environ.get("EJKERNEL_TEST_WORKERS", "auto")


def _sample(default: int | None) -> list[str]:
    """``--sample``: ``EJKERNEL_TEST_SAMPLE`` if set (0: every case), else ``default`` (None: pytest's)."""
    sample = os.environ.get("EJKERNEL_TEST_SAMPLE", "").strip()
    n = int(sample) if sample else default
    return [] if n is None else [f"--sample={n}"]


def _quick(session: nox.Session, jax_pins: list[str]) -> None:
    _install(session, jax_pins)
    args = [*_sample(None), *(session.posargs or QUICK_ARGS)]
    session.run("pytest", "-n", _workers(), "--quick", "--durations=10", *args, success_codes=PYTEST_OK)


@nox.session(python="3.12")
def quick(session: nox.Session) -> None:
    """The quick suite on Python 3.12 with jax 0.11.2: the framework, the CLI, the README's code and
    a sample of every op's conformance on the implementations this machine runs (the README's test
    command; ``EJKERNEL_TEST_SAMPLE=0`` runs every case)."""
    _quick(session, JAX_CURRENT)


@nox.session(python="3.12")
def tests(session: nox.Session) -> None:
    """The whole suite on Python 3.12 with jax 0.11.2 (8 simulated CPU devices), SUITE_SAMPLE cases of
    each conformance and Pallas-interpreter matrix (``full`` runs every case), the CUDA extension
    built first (its own tests need it; on a CPU machine they check the build and the declarations)."""
    _install(session, JAX_CURRENT, cuda=True)
    paths = session.posargs or ["tests", *PACKAGE_TESTS]
    # CI runs the quick suite first: EJKERNEL_AFTER_QUICK=1 runs only what it left out of the sample.
    after = ["--after-quick"] if os.environ.get("EJKERNEL_AFTER_QUICK") == "1" else []
    args = [*_sample(SUITE_SAMPLE), *after]
    session.run("pytest", "-n", _workers(), "--durations=15", *args, *paths, success_codes=PYTEST_OK)


@nox.session(python="3.12")
def full(session: nox.Session) -> None:
    """The full matrices (not in CI): every case of every conformance and Pallas-interpreter test
    (the sessions above run a sample), every dtype twin of every conformance case and every
    compiled-config check (``-m full``), on every implementation here; without the CUDA build."""
    _install(session, JAX_CURRENT)
    paths = session.posargs or QUICK_ARGS
    session.run(
        "pytest", "-n", _workers(), "--durations=15", *_sample(0), "-m", "not packaging", *paths, success_codes=PYTEST_OK
    )  # fmt: skip


@nox.session(python="3.11")
def compat(session: nox.Session) -> None:
    """The quick suite on the oldest supported stack: Python 3.11 with jax 0.10.2 (every op,
    backend and config on a sample of cases; the whole suite runs in ``tests``)."""
    _quick(session, JAX_OLDEST)


@nox.session(python="3.12")
def lint(session: nox.Session) -> None:
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", "packages", "tests", "noxfile.py", "benchmarks")
    session.run("ruff", "format", "--check", "packages", "tests", "noxfile.py", "benchmarks")


@nox.session(python="3.12")
def build(session: nox.Session) -> None:
    """Wheels and sdists of every distribution into dist/."""
    session.install("build")
    for pkg in PURE_PACKAGES:
        session.run("python", "-m", "build", "--outdir", "dist", pkg)


@nox.session(python="3.12")
def build_cuda(session: nox.Session) -> None:
    """The ejkernel-cuda wheel into dist/ (nvcc on PATH; EJKERNEL_CUDA_ARCHS picks the GPUs), its
    build requirements checked against build-requirements.txt."""
    session.install("-U", "pip")
    session.run(
        "python", "-m", "pip", "wheel", "--no-deps", "--build-constraint", CUDA_BUILD_REQUIREMENTS,
        "-w", "dist", CUDA_PACKAGE, env={"EJKERNEL_CUDA_ARCHS": _cuda_archs()},
    )  # fmt: skip


@nox.session(python="3.12")
def lock_cuda_build(session: nox.Session) -> None:
    """Rewrite packages/ejkernel-cuda/build-requirements.txt: ejkernel-cuda's ``[build-system]
    requires`` plus the cmake and ninja that scikit-build-core asks for where the machine's are
    missing or too old, resolved for every platform and Python >= 3.11, with the hashes of every
    file of each pinned version."""
    session.install("uv")
    cuda = nox.project.load_toml(f"{CUDA_PACKAGE}/pyproject.toml")
    wanted = [
        *cuda["build-system"]["requires"],
        f"cmake{cuda['tool']['scikit-build']['cmake']['version']}",
        "ninja>=1.5",
    ]
    spec = Path(session.create_tmp()) / "cuda-build.in"
    spec.write_text("\n".join(wanted) + "\n")
    session.run(
        "uv", "pip", "compile", "--quiet", "--universal", "--python-version", "3.11", "--generate-hashes",
        "--no-annotate", "--custom-compile-command", "nox -s lock_cuda_build", "-o", CUDA_BUILD_REQUIREMENTS, str(spec),
    )  # fmt: skip


@nox.session(python="3.12")
def wheelhouse(session: nox.Session) -> None:
    """The five wheels into dist/ (``bash scripts/wheelhouse.sh``; EJKERNEL_CUDA_ARCHS picks the GPUs)."""
    session.install("uv")
    session.run("bash", "scripts/wheelhouse.sh", *session.posargs, external=True)


@nox.session(python="3.12")
def packaging(session: nox.Session) -> None:
    """The README's install commands, each in a fresh environment: ``uv sync --extra xla`` in a copy
    of the checkout, and the wheelhouse (CUDA wheel for one architecture, built offline from the
    hash-checked build requirements it collects) + ``pip install --find-links dist
    "ejkernel-core[xla]"`` / ``[triton]``, each with a call on the CPU; the ``[gpu]`` installs are
    resolved only. And the main job, ``bash scripts/demo.sh``, with every other code block of the
    README run as written in the ``.venv`` it makes."""
    session.install("pytest", "pytest-timeout", "uv")
    session.run(
        "pytest",
        "-m",
        "packaging",
        "-p",
        "no:cacheprovider",
        "--durations=0",
        "tests/packaging",
        env={"EJKERNEL_CUDA_ARCHS": os.environ.get("EJKERNEL_CUDA_ARCHS", "80-real")},
    )


@nox.session(python="3.11")
def triton_interpret(session: nox.Session) -> None:
    """The Triton kernels and their host wrappers on the CPU, in Triton's interpreter (in CI: no
    other session runs the Triton kernels): the ``interpret`` tests of
    ``tests/ops/**/test_triton_interpret*.py``, which skip themselves without ``TRITON_INTERPRET=1``,
    SUITE_SAMPLE cases of each case matrix (``triton_interpret_full`` runs every case).

    Needs a CPU build of PyTorch (the interpreter takes torch tensors): ``torch==2.13.0`` as this
    workplace's machines carry it for Python 3.11. NumPy stays below 2.3, whose stricter scalar
    conversion the Triton 3.6 interpreter trips over.
    """
    _triton_interpret(session, "interpret and not full", SUITE_SAMPLE)


@nox.session(python="3.11")
def triton_interpret_full(session: nox.Session) -> None:
    """``triton_interpret`` with every case of every matrix and the ``full``-marked interpreter tests
    (not in CI)."""
    _triton_interpret(session, "interpret", 0)


def _triton_interpret(session: nox.Session, markers: str, sample: int) -> None:
    session.install(
        *JAX_OLDEST,
        "torch==2.13.0",
        "numpy<2.3",
        "pytest",
        "pytest-xdist",
        "pytest-timeout",
        "-e",
        "packages/ejkernel-core",
    )
    session.install("--no-deps", "-e", "packages/ejkernel-xla", "-e", "packages/ejkernel-triton", "triton==3.6.0")
    session.run(
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-n",
        _workers(),
        "--durations=15",
        "-W",
        "ignore::DeprecationWarning:triton.runtime.interpreter",
        "-m",
        markers,
        *_sample(sample),
        *(session.posargs or _op_tests("test_triton_interpret*.py")),
        env={"TRITON_INTERPRET": "1"},
        success_codes=PYTEST_OK,
    )


@nox.session(python="3.12")
def bench(session: nox.Session) -> None:
    """The CPU benchmark of the foundation issue, written to benchmarks/results/cpu/."""
    _install(session, JAX_CURRENT)
    session.run("bash", "benchmarks/cpu.sh", external=True)


@nox.session(python="3.12")
def docs(session: nox.Session) -> None:
    """The API reference site into site/ (``mkdocs build --strict``: warnings are errors).

    Its support table (docs/gen_support.py) shows the committed conformance records of
    docs/conformance_results.toml and a CPU run of the suite made here: ``EJKERNEL_DOCS_CONFORMANCE``
    is N (N cases of each implementation x config, first to last; default 2), ``all`` or ``off``.
    """
    session.install(
        *JAX_CURRENT,
        *nox.project.dependency_groups(PYPROJECT, "docs"),
        "pytest>=8",
        "pytest-xdist>=3.5",
        "pytest-timeout>=2.2",
        "-e",
        "packages/ejkernel-core",
        "-e",
        "packages/ejkernel-xla",
        "-e",
        "packages/ejkernel-pallas",
    )
    # Registering the Triton backend needs neither triton nor a GPU: its declarations are documented.
    session.install("--no-deps", "-e", "packages/ejkernel-triton")
    tools = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.py"))  # not the pages' Markdown
    session.run("ruff", "check", *tools)
    session.run("ruff", "format", "--check", *tools)
    env = {"DISABLE_MKDOCS_2_WARNING": "true", "NO_MKDOCS_2_WARNING": "1"}
    sample = os.environ.get("EJKERNEL_DOCS_CONFORMANCE", "2").strip().lower()
    if sample != "off":
        results = str(Path(session.create_tmp()) / "cpu_conformance.xml")
        session.run(
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "conformance_plugin",
            f"--sample={0 if sample == 'all' else int(sample)}",
            "-n",
            _workers(),
            f"--junitxml={results}",
            *_op_tests("test_conformance.py"),
            env={"PYTHONPATH": "docs"},
            success_codes=[0, 1],  # failures are shown in the table, not hidden by a failed build
        )
        env["EJKERNEL_DOCS_RESULTS"] = results
    session.run("mkdocs", "build", "--strict", "--site-dir", "site", env=env)
