"""XLA ``recurrent_attention``: the chunked gated linear recurrence of ``ejkernel_xla._linear``."""

from .impl import XlaRecurrentAttention

__all__ = ["XlaRecurrentAttention"]
