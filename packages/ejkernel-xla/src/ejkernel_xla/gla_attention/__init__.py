"""XLA ``gla_attention``: the chunked gated linear recurrence of ``ejkernel_xla._linear``."""

from .impl import XlaGLAttention

__all__ = ["XlaGLAttention"]
