"""The shared conformance suite: every case of every op on every registered implementation.

Each (implementation, config, case) either matches the op's float32 reference or raises
``UnsupportedError`` with the reason its *declaration* gives (device, dtypes, sizes, unsupported
features), decided by :func:`ejkernel.testing.conformance.expected_decline`, never by asking the
implementation. ``-m full`` runs the full case matrix (every dtype twin) instead of the default set.
"""

from __future__ import annotations

import pytest

from ejkernel.testing import conformance as C

PARAMS = [pytest.param(p, id=str(p)) for p in C.params()]
FULL = [pytest.param(p, id=str(p), marks=pytest.mark.full) for p in C.params(full=True)]


@pytest.mark.parametrize("param", PARAMS)
def test_conformance(param):
    C.check_impl(param.impl, param.case, param.cfg)


@pytest.mark.parametrize("param", FULL)
def test_conformance_full(param):
    C.check_impl(param.impl, param.case, param.cfg)
