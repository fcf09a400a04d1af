#!/usr/bin/env bash
# The main job: install ejkernel-core with the XLA backend into .venv and run the API demo on the
# best available backend (the CPU here).
set -euo pipefail
cd "$(dirname "$0")/.."
python=$(command -v python3.12 || command -v python3.11 || command -v python3)
"$python" -m venv .venv
.venv/bin/python -m pip install -q -U pip
.venv/bin/python -m pip install -q -e "packages/ejkernel-core[xla]" -e packages/ejkernel-xla
exec .venv/bin/ejkernel demo "$@"
