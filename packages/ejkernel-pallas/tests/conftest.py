"""Session setup for the Pallas interpret-mode tests.

A private config-cache folder, so the tests never read or write the user's real cache (set at
import, before ejkernel reads its environment; only if the caller has not set one).

The TPU interpreter turns each kernel into a large XLA CPU program (a loop over the grid with a
host callback per memory access); compiling it dominates these tests, and LLVM's optimizations
roughly double that time while buying nothing for programs that run for milliseconds. When this
package's tests run on their own (and the caller has not chosen an optimization level), XLA's
CPU backend is created without them. Set before the first computation creates the backend.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("EJKERNEL_CACHE_DIR", tempfile.mkdtemp(prefix="ejkernel-pallas-test-cache-"))

_HERE = Path(__file__).resolve().parent
_FLAG = "--xla_backend_optimization_level=0"


def pytest_configure(config):
    args = [Path(str(a).split("::")[0]).resolve() for a in config.args]
    only_ours = bool(args) and all(a == _HERE or _HERE in a.parents for a in args)
    flags = os.environ.get("XLA_FLAGS", "")
    if only_ours and "xla_backend_optimization_level" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}".strip()
