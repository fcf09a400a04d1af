"""Every op's shared conformance cases run from exactly one op folder: a new op joins the suite
by being listed in its folder's ``test_conformance.py`` (a test that never runs an op cannot fail)."""

from __future__ import annotations

import importlib
from pathlib import Path

from ejkernel.ops.op import list_ops


def test_every_op_is_in_exactly_one_conformance_file():
    listed = []
    for path in sorted(Path(__file__).parent.glob("*/test_conformance.py")):
        listed += importlib.import_module(f"tests.ops.{path.parent.name}.test_conformance").OPS
    assert sorted(listed) == sorted(list_ops())
