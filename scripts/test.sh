#!/usr/bin/env bash
# Runs the test suite the way CI does, on a fresh machine: lint, the suite on Python 3.12 +
# jax 0.11.2, the suite on Python 3.11 + jax 0.10.2, the Triton kernels in Triton's interpreter,
# the wheel/install smoke test and the docs build.
# Extra arguments are nox arguments, e.g. `bash scripts/test.sh -s tests -- -k mask_info`.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/_python.sh
python=$(pick_python 3.12 3.11)
"$python" -m venv .venv-nox
.venv-nox/bin/python -m pip install -q -U pip "nox>=2024.10"
if [ "$#" -gt 0 ]; then
  exec .venv-nox/bin/nox "$@"
fi
if ! command -v python3.12 >/dev/null 2>&1; then
  # jax 0.11.2 needs Python 3.12: without it, lint and the suite on Python 3.11 + jax 0.10.2.
  echo "test.sh: no Python 3.12 here: running lint and compat on $("$python" --version 2>&1) only" >&2
  exec .venv-nox/bin/nox --force-python 3.11 -s lint compat
fi
exec .venv-nox/bin/nox
