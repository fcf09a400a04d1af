"""The earlier API's module path ``ejkernel.ops.compat``: it is :mod:`ejkernel.compat.ops`."""

import sys

from ..compat import ops as _ops

sys.modules[__name__] = _ops
