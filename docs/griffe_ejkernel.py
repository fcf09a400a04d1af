"""Griffe extension for the API reference (``mkdocs.yml`` loads it; the sources are not changed).

What static analysis cannot see on its own, and the markup mkdocstrings does not read:

- **the signatures that** :func:`ejkernel.ops.executor.define` **makes.** A public op function is
  written ``@define(FlashAttention, signature=dense_attention_signature) def flash_attention():``;
  its real signature (the op's parameters, then the call options) exists only at run time. The
  extension imports the function, takes :func:`inspect.signature` of it as the truth for names,
  kinds and defaults, and keeps the source annotations of the parameters it shares with the
  function that declares them.
- **computed docstrings** (``__doc__ = "Config of ..." + Base.__doc__``): taken from the class.
- **reStructuredText in docstrings.** The docstrings are Google style with Sphinx markup; this
  turns roles (``:class:`~ejkernel.ops.Executor```) into optional cross-references (a link where
  the target is documented, plain code elsewhere, never a warning), ``::`` literal blocks into
  fenced code, bare ``>>>`` doctest lines into ``pycon`` code, and simple tables into Markdown.
- **grouped entries** (``mesh, in_specs, out_specs: ...`` in an Args section): one entry per name,
  each still checked against the signature.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import re
import types
import typing
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):`(?P<body>[^`]+)`")
_BORDER = re.compile(r"^(?P<indent> *)(=+)( +=+)+ *$")


def _role(match: re.Match[str]) -> str:
    body = match["body"].strip()
    explicit = re.fullmatch(r"(?P<title>.+?)\s*<(?P<target>[^>]+)>", body)
    if explicit:
        title, target = explicit["title"], explicit["target"]
    else:
        target = body.lstrip("~").lstrip(".")
        title = target.rsplit(".", 1)[-1] if body.startswith("~") else target
    return f'<autoref identifier="{target.lstrip("~")}" optional><code>{title}</code></autoref>'


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _tables(lines: list[str]) -> list[str]:
    """reST simple tables (``====  ====`` borders) → Markdown tables."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        border = _BORDER.match(lines[i])
        if not border:
            out.append(lines[i])
            i += 1
            continue
        pad = border["indent"]
        spans = [(m.start(), m.end()) for m in re.finditer(r"=+", lines[i])]
        rows: list[list[str]] = []
        borders = [len(rows)]
        j = i + 1
        while j < len(lines) and lines[j].strip():
            if _BORDER.match(lines[j]):
                borders.append(len(rows))
                j += 1
                if len(borders) == 3 or (len(borders) == 2 and (j >= len(lines) or not lines[j].strip())):
                    break
                continue
            starts = [start for start, _ in spans]
            cells = [lines[j][a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
            if not cells[0] and rows:  # a continuation line: joins the row above
                rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
            else:
                rows.append(cells)
            j += 1
        header = rows[: borders[1]] if len(borders) == 3 else []
        body = rows[borders[1] :] if len(borders) == 3 else rows
        head = header[0] if header else [""] * len(spans)
        out.append("")
        out.append(pad + "| " + " | ".join(head) + " |")
        out.append(pad + "|" + "---|" * len(spans))
        out.extend(pad + "| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body)
        out.append("")
        i = j
    return out


def _literal_blocks(lines: list[str]) -> list[str]:
    """``text::`` + indented block → ``text:`` + fenced code; bare ``>>>`` lines → ``pycon``."""
    out: list[str] = []
    i = 0
    in_fence = False
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        if not in_fence and line.rstrip().endswith("::") and not line.strip().startswith(">>>"):
            base = _indent(line)
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j < len(lines) and _indent(lines[j]) > base:
                k = j
                block: list[str] = []
                while k < len(lines) and (not lines[k].strip() or _indent(lines[k]) > base):
                    block.append(lines[k])
                    k += 1
                while block and not block[-1].strip():
                    block.pop()
                stripped = line.rstrip()[:-2].rstrip()
                out.append(stripped + ":" if stripped.strip() else "")
                cut = min(_indent(b) for b in block if b.strip())
                out.append("")
                out.append(" " * base + "```python")
                out.extend(" " * base + b[cut:] if b.strip() else "" for b in block)
                out.append(" " * base + "```")
                out.append("")
                i = k
                continue
        if not in_fence and line.lstrip().startswith(">>> ") and not (out and out[-1].lstrip().startswith("```")):
            base = _indent(line)
            k = i
            block = []
            while k < len(lines) and lines[k].strip() and _indent(lines[k]) >= base:
                block.append(lines[k][base:])
                k += 1
            out.append(" " * base + "```pycon")
            out.extend(" " * base + b for b in block)
            out.append(" " * base + "```")
            i = k
            continue
        out.append(line)
        i += 1
    return out


_SECTION = re.compile(
    r"^(?P<indent> *)(Args|Arguments|Parameters|Params|Attributes|Keyword Args|Keyword Arguments|Other Parameters):\s*$"
)
_GROUPED = re.compile(r"^(?P<indent> *)(?P<names>\w+(?:, \w+)+): (?P<desc>.*)$")


def _grouped_entries(lines: list[str]) -> list[str]:
    """``a, b: description`` in an Args-like section → one entry per name (same description).

    The docstrings document parameters that share a meaning together; Google style has one
    name per entry. Each name is still checked against the signature."""
    out: list[str] = []
    section: int | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        head = _SECTION.match(line)
        if head:
            section = len(head["indent"])
        elif section is not None and line.strip() and _indent(line) <= section:
            section = None
        grouped = _GROUPED.match(line) if section is not None else None
        if grouped is None:
            out.append(line)
            i += 1
            continue
        base = len(grouped["indent"])
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > base):
            j += 1
        cont = lines[i + 1 : j]
        while cont and not cont[-1].strip():
            cont.pop()
        for name in grouped["names"].split(", "):
            out.append(f"{grouped['indent']}{name}: {grouped['desc']}")
            out.extend(cont)
        out.extend(lines[i + 1 + len(cont) : j])
        i = j
    return out


def markdown_of(text: str) -> str:
    """The Markdown form of one reST-flavoured docstring."""
    lines = _grouped_entries(_tables(text.splitlines()))
    lines = _literal_blocks(lines)
    return _ROLE.sub(_role, "\n".join(lines))


def _annotation_text(obj: Any, homes: set[str]) -> str:
    """A runtime annotation (as ``inspect.signature`` gives it) as source text; ``homes`` collects
    the modules that define the classes it names."""
    if isinstance(obj, str):
        return obj
    if obj is Any:
        return "Any"
    if obj is None or obj is type(None):
        return "None"
    origin = typing.get_origin(obj)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_annotation_text(a, homes) for a in typing.get_args(obj))
    if origin is typing.Literal:
        return "Literal[" + ", ".join(repr(a) for a in typing.get_args(obj)) + "]"
    if isinstance(obj, type):
        if obj.__module__ != "builtins":
            homes.add(obj.__module__)
        return obj.__qualname__
    return repr(obj)


class EjkernelDocs(griffe.Extension):
    """Run-time docstrings and signatures, then reST → Markdown (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        objects = list(_walk(pkg))
        for obj in objects:
            if isinstance(obj, griffe.Class) and obj.docstring is None and "__doc__" in obj.members:
                _runtime_docstring(obj)
            if isinstance(obj, griffe.Function) and any(d.callable_path.endswith(".define") for d in obj.decorators):
                _define_signature(obj)
        for obj in objects:
            if obj.docstring is not None:
                obj.docstring.value = markdown_of(obj.docstring.value)


def _runtime_docstring(cls: griffe.Class) -> None:
    """A class that computes its docstring (``__doc__ = "..." + Base.__doc__``) gets the result."""
    doc = inspect.getdoc(griffe.dynamic_import(cls.path))
    if doc:
        cls.docstring = griffe.Docstring(doc, parent=cls)
    del cls.members["__doc__"]


def _define_signature(func: griffe.Function) -> None:
    """The signature :func:`ejkernel.ops.executor.define` gives ``func`` at run time."""
    signature = inspect.signature(griffe.dynamic_import(func.path))
    declaring = _declaring(func)
    declared = {p.name: p for p in declaring.parameters}
    params = []
    for p in signature.parameters.values():
        if p.name in declared:
            params.append(declared[p.name])
            continue
        annotation: str | griffe.Expr | None = None
        if p.annotation is not p.empty:
            homes: set[str] = set()
            text = _annotation_text(p.annotation, homes)
            # Names resolve (and link) in the module that defines them.
            # (A module griffe did not load, e.g. jaxtyping's: the name stays as text there.)
            scope = func.module
            if len(homes) == 1:
                with contextlib.suppress(KeyError):
                    scope = func.modules_collection[homes.pop()]
            annotation = griffe.safe_get_annotation(ast.parse(text, mode="eval").body, parent=scope) or text
        params.append(
            griffe.Parameter(
                p.name,
                annotation=annotation,
                kind=griffe.ParameterKind(p.kind.description),
                default=None if p.default is p.empty else repr(p.default),
            )
        )
    func.parameters = griffe.Parameters(*params)
    if declaring is not func:
        func.returns = declaring.returns


def _declaring(func: griffe.Function) -> griffe.Function:
    """The function whose parameters ``define`` copies: ``signature=`` if given, else ``func``."""
    for d in func.decorators:
        if isinstance(d.value, griffe.ExprCall):
            for arg in d.value.arguments:
                if isinstance(arg, griffe.ExprKeyword) and arg.name == "signature":
                    target = func.modules_collection[str(arg.value.canonical_path)]
                    return target.final_target if isinstance(target, griffe.Alias) else target
    return func


def _walk(obj: griffe.Object) -> Any:
    yield obj
    for member in obj.members.values():
        if not isinstance(member, griffe.Alias):
            yield from _walk(member)
