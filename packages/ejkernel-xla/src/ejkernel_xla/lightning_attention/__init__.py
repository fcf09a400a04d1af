"""XLA ``lightning_attention``: the chunked gated linear recurrence of ``ejkernel_xla._linear``."""

from .impl import XlaLightningAttention

__all__ = ["XlaLightningAttention"]
