#!/usr/bin/env bash
# Runs the test suite the way CI does, on a fresh machine: lint, the suite on Python 3.12 +
# jax 0.11.2, the suite on Python 3.11 + jax 0.10.2, and the wheel/install smoke test.
# Extra arguments are nox arguments, e.g. `bash scripts/test.sh -s tests -- -k mask_info`.
set -euo pipefail
cd "$(dirname "$0")/.."

# pyenv hides every interpreter but the active one: expose a 3.12 and a 3.11 if it has them.
if command -v pyenv >/dev/null 2>&1; then
  versions=""
  for minor in 3.12 3.11; do
    v=$(pyenv versions --bare 2>/dev/null | grep -E "^${minor}\.[0-9]+$" | sort -V | tail -n 1 || true)
    [ -n "$v" ] && versions="${versions:+$versions:}$v"
  done
  [ -n "$versions" ] && export PYENV_VERSION="$versions"
fi

python=$(command -v python3.12 || command -v python3)
"$python" -m venv .venv-nox
.venv-nox/bin/python -m pip install -q -U pip "nox>=2024.10"
if [ "$#" -gt 0 ]; then
  exec .venv-nox/bin/nox "$@"
fi
exec .venv-nox/bin/nox
