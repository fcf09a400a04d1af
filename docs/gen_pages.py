"""The generated pages of the API reference (run by mkdocs-gen-files at every build).

- ``ops/<op>.md`` for every op of :func:`ejkernel.ops.list_ops` (never a hard-coded list): its
  function, its Module (``Op``) and Config classes, the rest of its folder's exports, and its
  implementations as the registry declares them;
- ``api/ops/<module>.md`` for every public module of ``ejkernel.ops`` (the framework);
- ``cli.md``: the ``ejkernel`` command, with every subcommand's ``--help`` as this build prints it;
- ``support.md``: the op × backend support table (``docs/gen_support.py``);
- ``benchmarks.md``: the benchmark records' table per device (``docs/gen_bench.py``);
- ``SUMMARY.md``: the navigation (mkdocs-literate-nav).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import pkgutil
import sys
from pathlib import Path
from typing import Any

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).parent))

import gen_bench
import gen_support

import ejkernel
import ejkernel.ops
from ejkernel.ops import kernel_registry, list_ops, op_class

# The framework modules in reading order; modules not named here follow, by name.
FRAMEWORK_ORDER = ["executor", "policy", "config", "op", "args", "impl", "registry", "selection", "cache", "autotune"]
TITLES = {"op": "Op definitions", "impl": "Implementations", "args": "Arguments records", "kv_cache": "KV-cache writes"}


def write(path: str, text: str) -> None:
    with mkdocs_gen_files.open(path, "w") as f:
        f.write(text)


def _path(obj: Any, package: str, name: str) -> str:
    """The identifier mkdocstrings documents ``obj`` under (where it is defined, if it says)."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if module and qualname and module.startswith("ejkernel.") and "<" not in qualname:
        return f"{module}.{qualname}"
    return f"{package}.{name}"


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().split("\n\n")[0].replace("\n", " ")


def op_page(name: str) -> str:
    cls = op_class(name)
    package = cls.__module__.rpartition(".")[0]
    exports = cls.exports()
    function = getattr(cls, "function", None)
    aliases = [n for n, o in exports.items() if o is function and n != name]
    impls = kernel_registry.implementations(name)

    lines = [f"# `{name}`", "", _first_line(sys.modules[package].__doc__), ""]
    lines += ["| | |", "|---|---|"]
    if function is not None:
        lines.append(f"| function | `ejkernel.{name}`" + "".join(f", `ejkernel.{a}`" for a in aliases) + " |")
    lines.append(f"| module (for an `Executor`) | `ejkernel.modules.{cls.__name__}` |")
    lines.append(f"| config | `ejkernel.{cls.config_cls.__name__}` |")
    lines.append(f"| trainable | {'yes (gradients)' if cls.trainable else 'no'} |")
    listed = ", ".join(f"`{i.name}` ({i.platform.value}, {i.backend.value})" for i in impls) or "none registered"
    lines.append(f"| implementations | {listed}: see the [support table](../support.md#{name}) |")
    lines.append("")

    documented: set[int] = set()
    blocks: list[tuple[str, Any]] = []
    if function is not None:
        blocks.append((name, function))
    blocks += [(cls.__name__, cls), (cls.config_cls.__name__, cls.config_cls)]
    blocks += [(n, o) for n, o in exports.items() if n not in aliases]
    for export, obj in blocks:
        if id(obj) in documented:
            continue
        documented.add(id(obj))
        lines += [f"::: {_path(obj, package, export)}", ""]
        if obj is cls.config_cls:
            lines += ["    options:", "      inherited_members: true", ""]
    return "\n".join(lines)


def framework_modules() -> list[str]:
    """The public modules of ``ejkernel.ops`` other than op folders (and ``families``)."""
    here = Path(ejkernel.ops.__file__).parent
    names = [
        m.name
        for m in pkgutil.iter_modules([str(here)])
        if not m.name.startswith("_") and not m.ispkg and not (here / m.name / "op.py").exists()
    ]
    return sorted(names, key=lambda n: (FRAMEWORK_ORDER.index(n) if n in FRAMEWORK_ORDER else len(FRAMEWORK_ORDER), n))


def cli_page() -> str:
    from ejkernel import cli

    summary, _, commands = (cli.__doc__ or "").strip().partition("\n\n")
    lines = ["# The `ejkernel` command", "", summary.replace("``", "`"), ""]
    if commands.strip():
        lines += ["```text", commands.strip(), "```", ""]
    lines += ["Every subcommand's help, as this build prints it:", ""]

    def walk(parser: argparse.ArgumentParser, prog: str) -> None:
        with contextlib.redirect_stdout(io.StringIO()) as out:
            parser.print_help()
        lines.extend([f"## `{prog}`", "", "```text", out.getvalue().rstrip(), "```", ""])
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, subparser in action.choices.items():
                    walk(subparser, f"{prog} {sub}")

    os.environ.setdefault("COLUMNS", "100")
    walk(cli._parser(), "ejkernel")
    return "\n".join(lines)


def package_page(ops: list[str]) -> str:
    lines = ["# `ejkernel`", "", "::: ejkernel", "    options:", "      show_root_heading: false", "      members:"]
    lines += ["        - backends", ""]
    lines += ["## Serving", ""]
    lines += ["`ejkernel.write_kv_pages` writes a serving step's keys and values into a paged KV cache, in the"]
    lines += ["layout of the op that reads it: [KV-cache writes](ops/kv_cache.md).", ""]
    lines += ["## Op exports", ""]
    lines += ["Besides its own names, `ejkernel` (and `ejkernel.modules`) exports every op's function, Module and"]
    lines += ["Config class and its folder's other public names, gathered from the op folders at import:", ""]
    lines += ["| op | names |", "|---|---|"]
    for name in ops:
        names = ", ".join(f"`{n}`" for n in op_class(name).exports())
        lines.append(f"| [`{name}`](../ops/{name}.md) | {names} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ops = list_ops()
    write("api/ejkernel.md", package_page(ops))
    for name in ops:
        write(f"ops/{name}.md", op_page(name))

    modules = framework_modules()
    for mod in modules:
        title = TITLES.get(mod, mod.capitalize())
        write(
            f"api/ops/{mod}.md",
            f"# {title}: `ejkernel.ops.{mod}`\n\n::: ejkernel.ops.{mod}\n    options:\n      show_root_heading: false\n",
        )

    write("cli.md", cli_page())

    extra = [p for p in os.environ.get(gen_support.ENV, "").split(os.pathsep) if p]
    write("support.md", gen_support.render(gen_support.load_sources(extra=extra)))
    write("benchmarks.md", gen_bench.render())

    nav = [
        "* [Home](index.md)",
        "* [Support table](support.md)",
        "* [Benchmarks](benchmarks.md)",
        "* Ops",
        *[f"    * [{name}](ops/{name}.md)" for name in ops],
        "* API",
        "    * [ejkernel](api/ejkernel.md)",
        "    * [MaskInfo](api/mask_info.md)",
        "    * [Errors](api/errors.md)",
        "    * ejkernel.ops",
        "        * [Overview](api/ops/index.md)",
        *[f"        * [{TITLES.get(m, m.capitalize())}](api/ops/{m}.md)" for m in modules],
        "        * [Attention family](api/ops/families.md)",
        "    * [Conformance suite](api/testing.md)",
        "* [CLI](cli.md)",
    ]
    # Hand-written pages the list above does not name (guides added to docs/pages/) go in too.
    pages = Path(__file__).parent / "pages"
    named = {line.rpartition("](")[2].rstrip(")") for line in nav if "](" in line}
    guides = [p.relative_to(pages).as_posix() for p in sorted(pages.rglob("*.md"))]
    guides = [g for g in guides if g not in named and g != "SUMMARY.md"]
    if guides:
        nav[1:1] = ["* Guides", *[f"    * [{_title(pages / g)}]({g})" for g in guides]]
    write("SUMMARY.md", "\n".join(nav) + "\n")


def _title(page: Path) -> str:
    """A page's first ``# `` heading (its file name without one)."""
    for line in page.read_text().splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return page.stem.replace("_", " ").capitalize()


main()
