#!/usr/bin/env bash
# The wheelhouse: the wheels of the five distributions into dist/ (or the folder given), so that
#
#   pip install --find-links dist "ejkernel-core[xla]"      # or [triton], [gpu], [all], ...
#
# resolves ejkernel-core's extras from them the way an index would (jax and the rest come from
# the index). Built with uv (`pip install uv`; bootstrapped into .venv-tools when missing).
#
# ejkernel-cuda compiles with nvcc (no GPU needed) for EJKERNEL_CUDA_ARCHS (default
# "80-real;90a-real;90-virtual"; e.g. EJKERNEL_CUDA_ARCHS=90a-real for an H100 alone builds
# faster), and for one CPython: UV_PYTHON, else python3.12, else python3.11. Its build
# requirements (packages/ejkernel-cuda/build-requirements.txt, pinned with hashes, checked on
# download and again in the build) go into dist/cuda-build for that CPython, so that a machine with
# nvcc and no network can build it from dist/ (README.md). The wheel here is built that way: from
# dist/cuda-build alone and, where unshare may cut the build off the network (root, or
# unprivileged user namespaces), without network, so that a build step that reaches out fails
# here and not on an offline machine.
# Without nvcc the wheel is skipped with a note ([cuda], [gpu] and [all] then cannot be installed
# from dist/).
set -euo pipefail
out=$(realpath -m "${1:-$(dirname "$0")/../dist}")
cd "$(dirname "$0")/.."

. scripts/_python.sh
python=${UV_PYTHON:-$(pick_python 3.12 3.11)}
uv=$(command -v uv 2>/dev/null || true)
if [ -z "$uv" ]; then
  [ -x .venv-tools/bin/uv ] || { "$python" -m venv .venv-tools && .venv-tools/bin/python -m pip install -q uv; }
  uv=.venv-tools/bin/uv
fi

mkdir -p "$out"
rm -f "$out"/ejkernel_*.whl  # no stale wheel of an older build
for pkg in ejkernel-core ejkernel-xla ejkernel-triton ejkernel-pallas; do
  "$uv" build --quiet --python "$python" --package "$pkg" --wheel --out-dir "$out"
done
# The build requirements: pip downloads them and checks their hashes (uv has no download command).
reqs=packages/ejkernel-cuda/build-requirements.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$uv" venv --quiet --python "$python" "$work/venv"
"$uv" pip install --quiet --python "$work/venv/bin/python" pip
rm -rf "$out/cuda-build"
"$work/venv/bin/python" -m pip download --quiet --require-hashes --only-binary=:all: -r "$reqs" -d "$out/cuda-build"
if command -v nvcc >/dev/null 2>&1; then
  offline=()
  if unshare --net --map-root-user true 2>/dev/null; then
    offline=(unshare --net --map-root-user)
  fi
  echo "ejkernel-cuda: compiling for CUDA architectures ${EJKERNEL_CUDA_ARCHS:-80-real;90a-real;90-virtual}" \
    "from $out/cuda-build alone ($([ ${#offline[@]} -gt 0 ] && echo "no network: unshare" || echo "network not cut"))" >&2
  # As packages/ejkernel-cuda/README.md's offline pip wheel, with uv (which sets up the build
  # environment several times faster); not quiet: nvcc errors show.
  "${offline[@]}" "$uv" build --python "$python" --package ejkernel-cuda --wheel --out-dir "$out" \
    --offline --no-index --find-links "$out/cuda-build" --build-constraints "$reqs" --require-hashes
else
  echo "ejkernel-cuda: skipped (no nvcc on PATH); [cuda], [gpu] and [all] need its wheel" >&2
fi
ls -1 "$out"/ejkernel_*.whl
