# Sourced by demo.sh and test.sh: find usable Pythons on any machine, pyenv or not.
#
# pyenv hides every interpreter but the active one behind its shims: expose its newest 3.12 and
# 3.11 (when installed) so that `python3.12` / `python3.11` resolve. Then pick_python prints the
# first of the wanted versions that runs, falling back to any python3 >= 3.11.

if command -v pyenv >/dev/null 2>&1; then
  _versions=""
  for _minor in 3.12 3.11; do
    _v=$(pyenv versions --bare 2>/dev/null | grep -E "^${_minor}\.[0-9]+$" | sort -V | tail -n 1 || true)
    [ -n "$_v" ] && _versions="${_versions:+$_versions:}$_v"
  done
  [ -n "$_versions" ] && export PYENV_VERSION="$_versions"
fi

# pick_python [VERSION ...]: the first `pythonVERSION` that runs, else a python3 >= 3.11.
pick_python() {
  local v exe
  for v in "$@"; do
    exe=$(command -v "python$v" 2>/dev/null) || continue
    "$exe" -c "import sys" >/dev/null 2>&1 && { echo "$exe"; return 0; }
  done
  for exe in python3 python; do
    exe=$(command -v "$exe" 2>/dev/null) || continue
    if "$exe" -c "import sys; sys.exit(sys.version_info < (3, 11))" >/dev/null 2>&1; then
      echo "$exe"
      return 0
    fi
  done
  echo "no Python >= 3.11 found (install one, e.g. with pyenv or uv)" >&2
  return 1
}
