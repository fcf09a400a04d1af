"""The shared conformance suite (``tests/ops/_conformance.py``) on the ops of this folder: every case
on every registered implementation and config, against the float32 reference or the declared decline."""

from __future__ import annotations

from .._conformance import conformance_tests

OPS = ["flash_mla", "flash_mla_decode", "deepseek_attn"]

test_conformance, test_conformance_full = conformance_tests(OPS)
