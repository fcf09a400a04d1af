"""The shared conformance suite: every case of every op on every registered implementation, run
from each op folder's ``test_conformance.py`` for the ops that folder holds
(``test_conformance_coverage.py`` checks that every op is in exactly one).

Each (implementation, config, case) either matches the op's float32 reference or raises
``UnsupportedError`` with the reason its *declaration* gives (device, dtypes, sizes, unsupported
features), decided by :func:`ejkernel.testing.conformance.expected_decline`, never by asking the
implementation. ``-m full`` runs the full case matrix (every dtype twin) instead of the default set.

The test names (``test_conformance``, ``test_conformance_full``), the parameter name (``param``,
which ``--sample`` reads) and the ids (``<op>-<impl>-<config>-<case>``, which
``docs/gen_support.py`` reads from the JUnit XML) are the same in every folder.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from ejkernel.testing import conformance as C


def conformance_tests(ops: Sequence[str]) -> tuple[Callable[..., None], Callable[..., None]]:
    """``test_conformance`` (the default cases) and ``test_conformance_full`` (every dtype twin,
    marked ``full``) over the implementations, configs and cases of ``ops``."""
    default = [pytest.param(p, id=str(p)) for p in C.params(ops)]
    full = [pytest.param(p, id=str(p), marks=pytest.mark.full) for p in C.params(ops, full=True)]

    @pytest.mark.parametrize("param", default)
    def test_conformance(param):
        C.check_impl(param.impl, param.case, param.cfg)

    @pytest.mark.parametrize("param", full)
    def test_conformance_full(param):
        C.check_impl(param.impl, param.case, param.cfg)

    return test_conformance, test_conformance_full
