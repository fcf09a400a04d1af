"""``FwdParams``/``BwdParams`` under their earlier field names (``ejkernel.ops.utils.datacarrier``).

``FwdParams(blocksize_m=64, blocksize_n=128, num_warps=4)`` returns the config object of
:mod:`ejkernel.ops.config` (``q_blocksize=64, kv_blocksize=128``); ``isinstance`` checks answer
for it. The field table is :data:`ejkernel.compat.ops.PARAM_ALIASES` (with ``PARAM_IGNORED`` and
``PARAM_REFUSED``).
"""

from ...compat.ops import BwdParams, FwdParams

__all__ = ["BwdParams", "FwdParams"]
