"""The case sampling of tests/conftest.py (``--sample``, ``--quick``, ``--after-quick``), on stand-in
items: CI runs the quick suite, then ``--after-quick --sample=N``, and the two together must be the
N-case sample, every test x implementation x config among it, the last case included."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from ..conftest import _TESTS, _select, _spread


@pytest.mark.parametrize("size", [1, 2, 3, 5, 14, 36, 39])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_spread_takes_n_cases_from_the_first_to_the_last(size, n):
    picked = _spread(size, n)
    assert len(picked) == min(size, n)
    assert 0 in picked and picked <= set(range(size))
    if n > 1:
        assert size - 1 in picked


def test_spread_spaces_the_cases_evenly():
    assert _spread(36, 4) == {0, 12, 23, 35}
    assert _spread(10, 3) == {0, 5, 9}


def _conformance_item(op, impl, cfg_id, case, marks=()):
    param = types.SimpleNamespace(impl=types.SimpleNamespace(op_name=op, name=impl), cfg_id=cfg_id)
    return types.SimpleNamespace(
        name=f"test_conformance[{op}-{impl}-{cfg_id}-{case}]",
        originalname="test_conformance",
        callspec=types.SimpleNamespace(params={"param": param}),
        path=_TESTS / "ops" / op / "test_conformance.py",
        keywords=dict.fromkeys(marks, True),
    )


def _interpret_item(cfg_id, case):
    return types.SimpleNamespace(
        name=f"test_conformance[{case}-{cfg_id}]",
        originalname="test_conformance",
        callspec=types.SimpleNamespace(params={"case": case, "cfg_id": cfg_id}),
        path=_TESTS / "ops" / "op" / "test_pallas_interpret.py",
        keywords={"interpret": True},
    )


def _plain_item(name, marks=()):
    return types.SimpleNamespace(
        name=name, path=Path(_TESTS / "framework" / "test_x.py"), keywords=dict.fromkeys(marks, True)
    )


def _items():
    items = [
        _conformance_item(op, impl, cfg, f"case{i}")
        for op in ("op_a", "op_b")
        for impl, cfg in (("xla", "heuristic"), ("xla", "small"), ("triton", "heuristic"))
        for i in range(10)
    ]
    items += [_interpret_item(cfg, f"case{i}") for cfg in ("heuristic", "small") for i in range(7)]
    return [*items, _plain_item("test_plain"), _plain_item("test_slow", marks=("slow",))]


def _selected(**options):
    opts = {"quick": False, "after_quick": False, "sample": None, **options}
    config = types.SimpleNamespace(
        getoption=opts.__getitem__, hook=types.SimpleNamespace(pytest_deselected=lambda items: None)
    )
    items = _items()
    _select(config, items)
    return [item.name for item in items]


def test_quick_runs_the_first_case_of_each_key_and_no_marked_test():
    quick = _selected(quick=True)
    assert len(quick) == 6 + 1  # 2 ops x 3 implementation-configs; the unmarked plain test
    assert all(name.endswith("-case0]") for name in quick if "conformance" in name)
    assert "test_slow" not in quick and not any("-heuristic]" in name for name in quick)  # interpreter


@pytest.mark.parametrize("n", [2, 4])
def test_quick_and_after_quick_make_the_sample(n):
    quick, after = _selected(quick=True), _selected(after_quick=True, sample=n)
    assert not set(quick) & set(after)
    assert sorted(quick + after) == sorted(_selected(sample=n))
    for key in ("op_a-xla-heuristic", "op_b-xla-small", "op_b-triton-heuristic"):
        assert f"test_conformance[{key}-case9]" in after  # the last case of every key
    assert "test_conformance[case6-small]" in after  # the interpreter's matrices are sampled too
    assert len(after) == 6 * (n - 1) + 2 * n + 1  # the slow test


def test_after_quick_without_a_sample_runs_every_case_quick_left_out():
    after = _selected(after_quick=True)
    assert len(after) == 6 * 9 + 2 * 7 + 1
    assert _selected(sample=0) == [item.name for item in _items()]
