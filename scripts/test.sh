#!/usr/bin/env bash
# The tests, on a fresh machine (installs nox into .venv-nox; nox makes each session's venv).
#   bash scripts/test.sh          the quick suite: lint, then the framework, the CLI, the README's
#                                 code and a sample of every op's conformance (Python 3.12 +
#                                 jax 0.11.2; no CUDA build): minutes on 2 cores
#   bash scripts/test.sh --full   the full sessions: the whole suite with the CUDA extension built,
#                                 the quick suite on Python 3.11 + jax 0.10.2, the Triton kernels in
#                                 Triton's interpreter, the wheels and installs, the docs build
#   bash scripts/test.sh ARGS     nox ARGS, e.g. `-s tests -- -k mask_info`
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/_python.sh
python=$(pick_python 3.12 3.11)
"$python" -m venv .venv-nox
.venv-nox/bin/python -m pip install -q -U pip "nox>=2024.10"
nox=.venv-nox/bin/nox
sessions=(-s lint quick)
if [ "${1:-}" = "--full" ]; then
  shift
  sessions=(-s tests compat triton_interpret packaging docs)
fi
if [ "$#" -gt 0 ]; then
  exec "$nox" "$@"
fi
if ! command -v python3.12 >/dev/null 2>&1; then
  # jax 0.11.2 needs Python 3.12: without it, lint and the quick suite on Python 3.11 + jax 0.10.2.
  echo "test.sh: no Python 3.12 here: running lint and compat on $("$python" --version 2>&1) only" >&2
  exec "$nox" --force-python 3.11 -s lint compat
fi
exec "$nox" "${sessions[@]}"
