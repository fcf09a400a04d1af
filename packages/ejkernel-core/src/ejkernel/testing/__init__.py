"""Naive references and conformance cases for every op, for ejkernel and third-party backends.

- :mod:`ejkernel.testing.references`: plain float32 ``jnp`` references.
- :mod:`ejkernel.testing.conformance`: the shared cases, input builders and checks.
"""

from . import conformance, references
from .references import attention_reference, page_attention_reference

__all__ = ["attention_reference", "conformance", "page_attention_reference", "references"]
