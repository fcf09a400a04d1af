"""The earlier import path ``ejkernel.modules.operations``: it is :mod:`ejkernel.compat.operations`
(which also provides ``ejkernel.modules.operations.configs`` and ``.<op>``)."""

import sys

from ...compat import operations as _operations

sys.modules[__name__] = _operations
