"""Everything that exists only for code written against earlier ejkernel releases.

``import ejkernel`` does not import this package: it is loaded the first time code uses a name
of earlier releases (:mod:`ejkernel._compat_loader` lists the names the core forwards here), or
imports one of their paths, and then installs what those names need into the core:

- :mod:`ejkernel.compat.ops`: the earlier ``ejkernel.ops`` API (``Kernel``, ``Tuner``,
  ``autotune``, ...), served by ``ejkernel.ops``, ``ejkernel.ops.compat`` and the re-exports of
  ``ejkernel.ops.utils[...]``, and the op configs' earlier field names
  (``GLAttentionConfig(block_q=64)``);
- :mod:`ejkernel.compat.operations` and :mod:`ejkernel.compat.operation_configs`: the earlier
  paths ``ejkernel.modules.operations[.configs|.<op>]``;
- :mod:`ejkernel.compat.kernels`: the earlier private kernel paths
  ``ejkernel.kernels._<backend>.<op>`` (installed by ``import ejkernel.kernels``);
- :mod:`ejkernel.compat.mask_info`: ``MaskInfo``'s older members (``apply_causal``,
  ``get_or_compute_attention_mask``, ...).
"""

from __future__ import annotations

from .. import _compat_loader
from . import mask_info, ops

mask_info.install()
_compat_loader.install_config_fields(ops.earlier_config_fields)

__all__ = ["mask_info", "ops"]
