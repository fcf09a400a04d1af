"""Naive references and the conformance suite of every op, for ejkernel and third-party backends.

- :mod:`ejkernel.testing.references`: plain float32 ``jnp`` references (one per op).
- :mod:`ejkernel.testing.conformance`: the shared suite (cases, checks, expected declines).
"""

from . import conformance, references
from .references import attention_reference, page_attention_reference, reference_of

__all__ = ["attention_reference", "conformance", "page_attention_reference", "reference_of", "references"]
