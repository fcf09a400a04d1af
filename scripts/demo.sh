#!/usr/bin/env bash
# The main job: install ejkernel-core with the XLA backend into .venv and run the API demo on the
# best available backend (the CPU here). [plot] and [testing] bring what the README's examples use
# besides (matplotlib for `ejkernel bench --plot`, pytest for the conformance suite).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_python.sh
python=$(pick_python 3.12 3.11)
"$python" -m venv .venv
.venv/bin/python -m pip install -q -U pip
.venv/bin/python -m pip install -q -e "packages/ejkernel-core[xla,plot,testing]" -e packages/ejkernel-xla
exec .venv/bin/ejkernel demo "$@"
