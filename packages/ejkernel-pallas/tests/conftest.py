"""Session setup for this package's tests: a private config-cache folder, so the tests never read
or write the user's real cache (set at import, before ejkernel reads its environment; only if the
caller has not set one). The op tests of the Pallas kernels, in interpret mode, are
``tests/ops/**/test_pallas_interpret*.py``.
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("EJKERNEL_CACHE_DIR", tempfile.mkdtemp(prefix="ejkernel-pallas-test-cache-"))
