"""The op × backend support table: the registry's declarations and the conformance suite's results.

Nothing in the table is written by hand. Ops come from :func:`ejkernel.ops.list_ops`, their
implementations and what each declares (platform, backend, dtypes, size limits, unsupported
features) from :data:`ejkernel.ops.kernel_registry`, and the conformance counts from JUnit XML
files of the conformance suite (``tests/ops/<op or family>/test_conformance.py``):

- the records listed in ``docs/conformance_results.toml`` (committed runs, e.g. on an H200);
- the files named in ``$EJKERNEL_DOCS_RESULTS`` (``os.pathsep``-separated), e.g. the CPU run
  that ``nox -s docs`` makes with ``docs/conformance_plugin.py``.

Each test id (``<op>-<impl>-<config>-<case>``) is matched against the suite this build would run
(:func:`ejkernel.testing.conformance.params`), so an implementation, config or case without a
result is counted as *not run*, never as passing. A passing test either ran and matched the
reference or declined as its declaration says it must (e.g. a GPU kernel on a CPU): files written
with the docs plugin record which; for older files the split is inferred from the declaration
and the platform the manifest names, and marked so.

Backend plugins that live in this repository but are not installed (``ejkernel-cuda`` needs
nvcc to install) are registered from their source tree so their declarations and results are
shown; the table says so.

Run it alone to print the page: ``python docs/gen_support.py [--results FILE.xml ...]``.

The op × backend table at the top of the page is :func:`ejkernel.ops.support.support_table`, the
same one the READMEs hold between ``<!-- support-table:start ... -->`` and
``<!-- support-table:end -->`` (the root and the core package's README: every op × every backend;
each backend package's README: the ops each of its backends registers). ``python docs/gen_support.py
--write-readmes`` rewrites those blocks in place; ``tests/framework/test_support_tables.py`` fails while
one differs from what this generates.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import os
import sys
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "docs" / "conformance_results.toml"
ENV = "EJKERNEL_DOCS_RESULTS"
SUITES = {"test_conformance": "default", "test_conformance_full": "full"}


# -- implementations --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Origin:
    """Where an implementation comes from: an installed plugin, or a plugin's source tree."""

    text: str
    installed: bool


@functools.cache
def implementations() -> dict[tuple[str, str], Origin]:
    """Every registered ``(op, impl)`` with its origin, in-repository plugins included."""
    from ejkernel.ops import kernel_registry, list_ops

    origins: dict[tuple[str, str], Origin] = {}
    for b in kernel_registry.backends():
        for key in b.implementations:
            op, _, name = key.partition("/")
            origins[(op, name)] = Origin(f"`{b.name}` ({b.distribution} {b.version})", True)
    installed = {b.name for b in kernel_registry.backends()}
    for name, target, src in _repo_plugins():
        if name in installed:
            continue
        before = {(op, i.name) for op in list_ops() for i in kernel_registry.implementations(op)}
        module, _, attr = target.partition(":")
        sys.path.insert(0, str(src))
        try:
            getattr(importlib.import_module(module), attr)(kernel_registry)
        except Exception as e:  # shown on the page; the rest of the table carries on
            SOURCE_ERRORS.append(f"`{name}` ({src.relative_to(ROOT)}): {type(e).__name__}: {e}")
            continue
        finally:
            sys.path.remove(str(src))
        for op in list_ops():
            for i in kernel_registry.implementations(op):
                if (op, i.name) not in before:
                    origins[(op, i.name)] = Origin(
                        f"`{name}`, read from `{src.parent.relative_to(ROOT)}` (not installed in this build)", False
                    )
    return origins


SOURCE_ERRORS: list[str] = []


def _repo_plugins() -> Iterable[tuple[str, str, Path]]:
    """The ``ejkernel.backends`` entry points declared by this repository's packages."""
    for pyproject in sorted(ROOT.glob("packages/*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text()).get("project", {})
        for name, target in project.get("entry-points", {}).get("ejkernel.backends", {}).items():
            yield name, target, pyproject.parent / "src"


# -- the READMEs' tables ----------------------------------------------------------------------------

README_START = (
    "<!-- support-table:start: generated from the registry by `python docs/gen_support.py --write-readmes` -->"
)
README_END = "<!-- support-table:end -->"
REGENERATE = "python docs/gen_support.py --write-readmes"


@contextlib.contextmanager
def _repo_sources() -> Iterator[None]:
    """This repository's backend packages importable, where they are not installed (``ejkernel-cuda``
    needs nvcc to install), so that their declared ops are read; installed copies come first."""
    added = [
        str(src)
        for _, target, src in _repo_plugins()
        if importlib.util.find_spec(target.partition(":")[0]) is None and str(src) not in sys.path
    ]
    sys.path.extend(added)
    try:
        yield
    finally:
        for path in added:
            sys.path.remove(path)


def backend_ops() -> dict[str, tuple[str, ...] | None]:
    """:func:`ejkernel.ops.support.backend_ops`, with this repository's backends importable."""
    from ejkernel.ops import support

    with _repo_sources():
        return support.backend_ops()


def readme_tables() -> dict[Path, str]:
    """Each README that holds a support table → the table it must hold."""
    from ejkernel.ops import support

    by_backend = backend_ops()
    full = support.support_table(by_backend)
    out = {ROOT / "README.md": full, ROOT / "packages/ejkernel-core/README.md": full}
    for name, _, src in _repo_plugins():
        # A package may declare several backends (ejkernel-xla: xla and cudnn): its README lists each.
        path = src.parent / "README.md"
        table = support.backend_table(name, by_backend)
        out[path] = f"{out[path]}\n{table}" if path in out else table
    return out


def replace_block(text: str, table: str, path: Path) -> str:
    """``text`` with the block between the markers replaced by ``table``."""
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise ValueError(
            f"{path.relative_to(ROOT)} has no support-table block: add the lines {README_START!r} and "
            f"{README_END!r} where the table goes, then run `{REGENERATE}`"
        )
    # Blank lines around the table: Markdown ends a table at one, not at an HTML comment.
    return text[: start + len(README_START)] + "\n\n" + table + "\n" + text[end:]


def stale_readmes() -> list[Path]:
    """The READMEs whose support table differs from the generated one."""
    return [
        path
        for path, table in readme_tables().items()
        if replace_block(path.read_text(), table, path) != path.read_text()
    ]


def write_readmes() -> list[Path]:
    """Rewrite the READMEs' support tables in place; returns the files that changed."""
    changed = []
    for path, table in readme_tables().items():
        text = path.read_text()
        new = replace_block(text, table, path)
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed


# -- results ----------------------------------------------------------------------------------------


@dataclasses.dataclass
class Test:
    status: str  # passed, failed, skipped
    outcome: str | None  # ok, declined (recorded by the docs plugin), None: not recorded
    message: str = ""


@dataclasses.dataclass
class Source:
    """One JUnit XML file of the conformance suite and where it was measured."""

    label: str
    path: Path
    platform: str | None
    where: str
    date: str
    commit: str
    selection: str
    tests: dict[tuple[str, str], Test]  # (suite, test id) -> result

    @property
    def suites(self) -> list[str]:
        return [s for s in ("default", "full") if any(k[0] == s for k in self.tests)]


def read_junit(path: Path) -> tuple[dict[str, str], dict[tuple[str, str], Test]]:
    """The run's properties and its conformance tests, keyed by (suite, test id)."""
    root = ET.parse(path).getroot()
    props = {
        p.get("name", ""): p.get("value", "") for s in root.iter("testsuite") for p in s.findall("properties/property")
    }
    tests: dict[tuple[str, str], Test] = {}
    for case in root.iter("testcase"):
        func, _, rest = (case.get("name") or "").partition("[")
        if func not in SUITES or not rest.endswith("]"):
            continue
        status, message = "passed", ""
        for tag in ("failure", "error"):
            node = case.find(tag)
            if node is not None:
                status, message = "failed", node.get("message") or ""
        node = case.find("skipped")
        if node is not None:
            status, message = "skipped", node.get("message") or ""
        outcome = next(
            (p.get("value") for p in case.findall("properties/property") if p.get("name") == "outcome"), None
        )
        tests[(SUITES[func], rest[:-1])] = Test(status, outcome, message)
    return props, tests


def load_sources(manifest: Path = MANIFEST, extra: Iterable[str] = ()) -> list[Source]:
    """The committed records of the manifest, then the extra files (e.g. this build's run)."""
    entries: list[dict[str, Any]] = []
    if manifest.exists():
        entries += tomllib.loads(manifest.read_text()).get("results", [])
    entries += [{"path": p} for p in extra if p]
    sources = []
    for entry in entries:
        path = Path(entry["path"])
        path = path if path.is_absolute() else ROOT / path
        if not path.exists():
            raise FileNotFoundError(f"conformance results {path} (from {manifest.name} or ${ENV}) do not exist")
        props, tests = read_junit(path)
        platform = entry.get("platform") or props.get("ejkernel.platform")
        sources.append(
            Source(
                label=entry.get("label") or f"{(platform or '?').upper()}, this docs build",
                path=path,
                platform=platform,
                where=entry.get("where")
                or ", ".join(filter(None, [props.get("ejkernel.device"), props.get("ejkernel.versions")])),
                date=entry.get("date") or props.get("ejkernel.date", "?"),
                commit=entry.get("commit") or props.get("ejkernel.commit", "?"),
                selection=entry.get("selection") or props.get("ejkernel.selection", "?"),
                tests=tests,
            )
        )
    return sources


# -- tallies ----------------------------------------------------------------------------------------


@dataclasses.dataclass
class Tally:
    expected: int = 0
    ran: int = 0
    declined: int = 0
    failed: int = 0
    skipped: int = 0
    inferred: bool = False
    failures: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    @property
    def results(self) -> int:
        return self.ran + self.declined + self.failed + self.skipped

    @property
    def not_run(self) -> int:
        return self.expected - self.results

    def add(self, other: Tally) -> None:
        for f in ("expected", "ran", "declined", "failed", "skipped"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        self.inferred |= other.inferred
        self.failures += other.failures

    def cell(self) -> str:
        if not self.results:
            return "not run here"
        parts = []
        if self.failed:
            parts.append(f"❌ {self.failed} failed")
        if self.ran:
            parts.append(f"{'' if self.failed else '✅ '}{self.ran} ran")
        if self.declined:
            parts.append(f"{self.declined} declined")
        if self.skipped:
            parts.append(f"{self.skipped} skipped")
        if self.not_run:
            parts.append(f"{self.not_run} not run")
        return " · ".join(parts) + (" †" if self.inferred else "")


def _inferred_outcome(impl: Any, case: Any, platform: str | None) -> str:
    """``declined`` if the declaration rules ``case`` out on ``platform`` (a device kind), else ``ok``."""
    from ejkernel.ops import Backend, declared_decline
    from ejkernel.testing.conformance import bind

    if impl.backend is not Backend.ANY and impl.backend.value != platform:
        return "declined"
    return "declined" if declared_decline(impl, bind(impl.op_name, **case.inputs(0))) else "ok"


def tally(source: Source, suite: str, op: str) -> dict[tuple[str, str], Tally]:
    """``(impl, config) -> Tally`` of one op in one suite of one source."""
    from ejkernel.testing import conformance as C

    out: dict[tuple[str, str], Tally] = {}
    for p in C.params([op], full=suite == "full"):
        t = out.setdefault((p.impl.name, p.cfg_id), Tally())
        t.expected += 1
        result = source.tests.get((suite, str(p)))
        if result is None:
            continue
        if result.status == "failed":
            t.failed += 1
            t.failures.append((f"{p.cfg_id} / {p.case.name}", result.message))
        elif result.status == "skipped":
            t.skipped += 1
        else:
            outcome = result.outcome
            if outcome is None:
                outcome = _inferred_outcome(p.impl, p.case, source.platform)
                t.inferred = True
            if outcome == "declined":
                t.declined += 1
            else:
                t.ran += 1
    return out


def unmatched(source: Source) -> list[str]:
    """Test ids of ``source`` that no implementation, config and case of this build has."""
    from ejkernel.testing import conformance as C

    known = {("default", str(p)) for p in C.params()} | {("full", str(p)) for p in C.params(full=True)}
    return sorted(f"{suite}: {tid}" for suite, tid in source.tests if (suite, tid) not in known)


# -- the page ---------------------------------------------------------------------------------------


def _code(items: Iterable[Any]) -> str:
    return ", ".join(f"`{x}`" for x in items)


def _first_paragraph(doc: str | None) -> str:
    text = (doc or "").strip().split("\n\n")[0]
    return " ".join(line.strip() for line in text.splitlines())


def _sizes(impl: Any) -> str:
    parts = [f"`{axis}` ≤ {limit}" for axis, limit in impl.max_sizes.items()]
    for axis, rule in impl.allowed_sizes.items():
        desc = getattr(rule, "description", None)
        parts.append(f"`{axis}` {desc}" if desc else f"`{axis}` ∈ {{{', '.join(map(str, rule))}}}")
    return "; ".join(parts) or "any"


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _columns(sources: list[Source]) -> list[tuple[Source, str]]:
    return [(s, suite) for s in sources for suite in s.suites]


def _col_title(source: Source, suite: str) -> str:
    return source.label + (" (full matrix)" if suite == "full" else "")


def render(sources: list[Source], *, op_pages: str | None = "ops/{op}.md") -> str:
    """The support page (Markdown)."""
    from ejkernel.ops import kernel_registry, list_ops, op_class

    origins = implementations()
    columns = _columns(sources)
    tallies = {(id(s), suite, op): tally(s, suite, op) for s, suite in columns for op in list_ops()}

    out = [
        "# Support: ops × backends",
        "",
        "Generated at build time (`docs/gen_support.py`) from the registry's declarations and the results of",
        "the conformance suite (`tests/ops/<op or family>/test_conformance.py`); nothing here is written by hand.",
        "A conformance test either **ran** (output and gradients matched the float32 reference) or",
        "**declined** (raised `UnsupportedError` with the reason its declaration gives, as it must: e.g. a",
        "GPU kernel on a CPU, or an unsupported feature). Implementations, configs and cases a results file",
        "does not cover are counted as **not run**; *not run here* means no result at all.",
        "",
    ]
    if columns:
        out += [
            "## Where the results come from",
            "",
            "| results | measured on | when | tree | cases | file |",
            "|---|---|---|---|---|---|",
        ]
        for s in sources:
            rel = s.path.relative_to(ROOT) if s.path.is_relative_to(ROOT) else s.path.name
            out.append(f"| {s.label} | {_escape(s.where)} | {s.date} | {s.commit} | {_escape(s.selection)} | `{rel}` |")
        if any(t.inferred for ts in tallies.values() for t in ts.values()):
            out += [
                "",
                "† this file does not record whether a passing test ran or declined; the split is inferred from the",
                "declaration and the platform it was measured on (an implementation that reports itself unavailable",
                "there, e.g. for a missing driver feature, would be counted as *ran*).",
            ]
        out.append("")
    else:
        out += [
            '!!! warning "No conformance results"',
            "    No results file was given: every cell reads *not run here*.",
            "",
        ]
    if SOURCE_ERRORS:
        out += ["Plugins of this repository that could not be read:", ""] + [f"- {e}" for e in SOURCE_ERRORS] + [""]

    from ejkernel.ops.support import support_table

    out += ["## Ops by backend", "", support_table(backend_ops())]
    out += ["## Summary", "", "One row per implementation; its configs are added up.", ""]
    head = ["op", "implementation", "platform", "backend", "dtypes", "unsupported features"]
    head += [_col_title(s, suite) for s, suite in columns]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for op in list_ops():
        link = f"[`{op}`]({op_pages.format(op=op)})" if op_pages else f"`{op}`"
        impls = kernel_registry.implementations(op)
        if not impls:
            out.append(f"| {link} | *none registered* |" + " |" * (len(head) - 2))
        for impl in impls:
            row = [
                link,
                f"`{impl.name}`",
                impl.platform.value,
                impl.backend.value,
                _code(impl.dtypes) if impl.dtypes is not None else "all",
                _code(sorted(impl.unsupported)) or "none",
            ]
            for s, suite in columns:
                total = Tally()
                for (name, _), t in tallies[(id(s), suite, op)].items():
                    if name == impl.name:
                        total.add(t)
                row.append(total.cell())
            out.append("| " + " | ".join(row) + " |")
    out.append("")

    for op in list_ops():
        cls = op_class(op)
        impls = kernel_registry.implementations(op)
        out += [f"## `{op}`", ""]
        if op_pages:
            out += [f"API: [`{op}`]({op_pages.format(op=op)}).", ""]
        if cls.features:
            out += ["Optional features (implementations declare, by these names, those they do not support):", ""]
            out += ["| feature | meaning | declared unsupported by |", "|---|---|---|"]
            for feat, (meaning, _) in cls.features.items():
                by = [i.name for i in impls if feat in i.unsupported]
                out.append(f"| `{feat}` | {_escape(meaning)} | {_code(by) or '—'} |")
            out.append("")
        out += [
            "| implementation | platform | backend | priority | plugin | dtypes | sizes | configs tested | needs |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for impl in impls:
            origin = origins.get((op, impl.name), Origin(f"`{impl.plugin}`", True))
            needs = impl.device_requirement or (
                "any device" if impl.backend.value == "any" else f"a {impl.backend.value}"
            )
            out.append(
                f"| `{impl.name}` | {impl.platform.value} | {impl.backend.value} | {impl.priority} | {origin.text} | "
                f"{_code(impl.dtypes) if impl.dtypes is not None else 'all'} | {_sizes(impl)} | "
                f"{_code(['heuristic', *impl.test_configs])} | {needs} |"
            )
        out.append("")
        for impl in impls:
            desc = _first_paragraph(type(impl).__doc__)
            out.append(f"- **`{impl.name}`**: {desc}" if desc else f"- **`{impl.name}`**")
            for feat, reason in sorted(impl.unsupported.items()):
                out.append(f"    - `{feat}` unsupported: {reason}")
        out.append("")
        if columns:
            out += ["Conformance by implementation and config:", ""]
            head = ["implementation", "config"] + [_col_title(s, suite) for s, suite in columns]
            out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            keys = list(dict.fromkeys(k for s, suite in columns for k in tallies[(id(s), suite, op)]))
            for name, cfg in keys:
                cells = [tallies[(id(s), suite, op)].get((name, cfg), Tally()).cell() for s, suite in columns]
                out.append(f"| `{name}` | `{cfg}` | " + " | ".join(cells) + " |")
            out.append("")
            for s, suite in columns:
                for (name, cfg), t in tallies[(id(s), suite, op)].items():
                    if t.failures:
                        out += [f'??? failure "{len(t.failures)} failed: {name} / {cfg} on {_col_title(s, suite)}"', ""]
                        out += [f"    - `{case}`: {_escape(msg)[:300]}" for case, msg in t.failures]
                        out.append("")
    stale = [(s, unmatched(s)) for s in sources]
    if any(ids for _, ids in stale):
        out += [
            "## Results this build cannot place",
            "",
            "Tests in a results file that match no implementation, config and case of this build (renamed, removed,",
            "or from a plugin not available here). They are not counted above.",
            "",
        ]
        for s, ids in stale:
            if ids:
                out += [f'??? note "{s.label}: {len(ids)} tests"', ""] + [f"    - `{i}`" for i in ids] + [""]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", action="append", default=[], help="a JUnit XML file of the conformance suite")
    parser.add_argument("--manifest", type=Path, default=MANIFEST, help="the committed results (TOML)")
    parser.add_argument(
        "--write-readmes", action="store_true", help="rewrite the READMEs' support tables in place (nothing printed)"
    )
    args = parser.parse_args(argv)
    if args.write_readmes:
        for path in write_readmes():
            print(f"rewrote the support table of {path.relative_to(ROOT)}")
        return 0
    extra = [*filter(None, os.environ.get(ENV, "").split(os.pathsep)), *args.results]
    sys.stdout.write(render(load_sources(args.manifest, extra), op_pages=None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
