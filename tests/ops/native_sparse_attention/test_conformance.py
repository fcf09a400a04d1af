"""The shared conformance suite (``tests/ops/_conformance.py``) on ``native_sparse_attention``:
every case on every registered implementation and config, against the float32 reference or the
declared decline."""

from __future__ import annotations

from .._conformance import conformance_tests

OPS = ["native_sparse_attention"]

test_conformance, test_conformance_full = conformance_tests(OPS)
