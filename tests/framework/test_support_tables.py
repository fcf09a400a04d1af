"""The support tables cannot go stale: they are generated, and checked here against the code.

The READMEs' op × backend tables (between the ``support-table`` markers) must equal what
:mod:`ejkernel.ops.support` renders from the registry (``docs/gen_support.py`` names the files),
and each backend package's ``register`` must register exactly the ``OPS`` it declares, the list
the tables read for a backend that is not installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

from ejkernel.ops import KernelRegistry, kernel_registry, list_ops
from ejkernel.ops import support as S
from ejkernel.ops.registry import KNOWN_BACKENDS

ROOT = Path(__file__).resolve().parents[2]


def _gen_support():
    """``docs/gen_support.py`` as a module, loaded without putting docs/ on ``sys.path``."""
    if "ejkernel_docs_gen_support" not in sys.modules:
        spec = importlib.util.spec_from_file_location("ejkernel_docs_gen_support", ROOT / "docs" / "gen_support.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
        spec.loader.exec_module(module)
    return sys.modules["ejkernel_docs_gen_support"]


G = _gen_support()
PLUGINS = {name: (target.partition(":")[0], src) for name, target, src in G._repo_plugins()}


def test_every_known_backend_is_a_package_of_this_repository():
    assert set(PLUGINS) == set(KNOWN_BACKENDS)
    for name, (module, _) in PLUGINS.items():
        assert KNOWN_BACKENDS[name].module == module


@pytest.mark.parametrize("path", sorted(G.readme_tables(), key=str), ids=lambda p: str(p.relative_to(ROOT)))
def test_readme_table_is_generated(path):
    table = G.readme_tables()[path]
    text = path.read_text()
    expected = G.replace_block(text, table, path)
    assert text == expected, (
        f"the support table of {path.relative_to(ROOT)} differs from the registry's; regenerate it with "
        f"`{G.REGENERATE}` (it rewrites the block between the support-table markers). Expected:\n{table}"
    )


def test_stale_readme_is_detected(tmp_path):
    path = ROOT / "README.md"
    table = G.readme_tables()[path]
    text = G.replace_block(path.read_text(), table, path)
    row = next(line for line in table.splitlines() if line.startswith("| `page_attention` |"))
    edited = text.replace(row, row.replace("✓", "", 1))
    assert edited != text and G.replace_block(edited, table, path) == text
    with pytest.raises(ValueError, match=r"has no support-table block.*--write-readmes"):
        G.replace_block("# a README without the markers\n", table, path)


@pytest.mark.parametrize("name", sorted(KNOWN_BACKENDS))
def test_register_registers_exactly_the_declared_ops(name):
    module, _ = PLUGINS[name]
    with G._repo_sources():
        package = importlib.import_module(module)
    registry = KernelRegistry(entry_point_group=None)
    package.register(registry)
    assert sorted(registry.ops()) == sorted(package.OPS)
    assert len(package.OPS) == len(set(package.OPS))
    for op in package.OPS:
        # The backend's own name, and other implementations under ``<name>_<kind>`` names (the
        # Pallas backend's Mosaic GPU flash attention beside its TPU one).
        names = [i.name for i in registry.implementations(op)]
        assert name in names and all(n == name or n.startswith(f"{name}_") for n in names), names
        assert {i.platform.value for i in registry.implementations(op)} == {name}
    assert set(package.OPS) <= set(list_ops()), "a backend declares an op the core does not define"


def test_loaded_backends_report_their_declared_ops():
    """The table reads a loaded backend from the registry and any other from its ``OPS``: the same."""
    with G._repo_sources():
        by_backend = S.backend_ops()
        declared = {name: S.declared_ops(known) for name, known in KNOWN_BACKENDS.items()}
    loaded = {b.name for b in kernel_registry.backends() if b.status == "loaded"}
    assert loaded, "no backend is loaded: the registry side of the table is untested"
    for name in KNOWN_BACKENDS:
        assert declared[name] is not None
        assert by_backend[name] == tuple(sorted(declared[name])), name


def test_register_declared_rejects_a_mismatch():
    registry = KernelRegistry(entry_point_group=None)

    def impl(args, cfg):
        return args

    with pytest.raises(ValueError, match=r"implemented without a declaration \['mean_pooling'\]"):
        S.register_declared(registry, ("attention",), {"attention": impl, "mean_pooling": impl}, "xla", "any", 0)
    with pytest.raises(ValueError, match=r"declared without an implementation \['mean_pooling'\]"):
        S.register_declared(registry, ("attention", "mean_pooling"), {"attention": impl}, "xla", "any", 0)
    with pytest.raises(ValueError, match="declared twice"):
        S.register_declared(registry, ("attention", "attention"), {"attention": impl}, "xla", "any", 0)
    assert registry.ops() == []  # nothing half-registered
    S.register_declared(registry, ("attention",), {"attention": impl}, "xla", "any", 0)
    assert registry.ops() == ["attention"]


def test_tables_mark_unknown_backends_and_foreign_ops():
    by_backend = {"xla": ("attention", "future_op"), "cuda": None}
    table = S.support_table(by_backend)
    assert "| `attention` | ✓ | ? |" in table
    assert "| `future_op` | ✓ | ? |" in table  # an op the core does not define still gets a row
    assert "| `flash_attention` |  | ? |" in table
    assert "not installed here, so its ops are unknown" in table
    assert "unknown here" in S.backend_table("cuda", by_backend)
    assert f"2 of the {len(list_ops()) + 1} ops" in S.backend_table("xla", by_backend)
    with pytest.raises(ValueError, match="name must be one of the backends"):
        S.backend_table("tpu", by_backend)


def test_cli_prints_the_table(capsys):
    from ejkernel.cli import main

    assert main(["info", "--support-table"]) == 0
    out = capsys.readouterr().out
    assert out == S.support_table()
    for op in list_ops():
        assert f"| `{op}` |" in out
