"""XLA ``state_space_v2``: the chunked gated linear recurrence of ``ejkernel_xla._linear``."""

from .impl import XlaStateSpaceV2

__all__ = ["XlaStateSpaceV2"]
