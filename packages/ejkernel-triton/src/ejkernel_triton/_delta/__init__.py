"""The Triton delta rule shared by ``kernel_delta_attention`` and ``gated_delta_rule``:
``impl.py`` (declaration, configs), ``_call.py`` (host side: custom VJP, launches), ``_kernel.py``
(the state-recurrence, output and state-gradient kernels)."""

from .impl import TritonDeltaRule

__all__ = ["TritonDeltaRule"]
