"""Which backend implements which op: the op × backend support table, in Markdown.

The READMEs' support tables and the docs site's support page are rendered here, so they list
what the code registers rather than what someone remembered to write (``python
docs/gen_support.py --write-readmes`` rewrites the READMEs' tables; ``tests/framework/test_support_tables.py``
fails when one differs). ``ejkernel info --support-table`` prints the table of this installation.

The columns are the first-party backends (:data:`~ejkernel.ops.registry.KNOWN_BACKENDS`), whether
installed or not. A loaded backend reports the ops it registered. One that is not loaded (not
installed, disabled by the policy, or failed) is described by the ``OPS`` its package declares
next to its ``register``: importing a backend package is cheap and needs no GPU library (kernels
are imported when registered, and compiled when first used), so the table of a CPU machine still
lists the CUDA backend's ops where its package can be imported. A backend whose package cannot
be imported is listed with its ops unknown. Backends register through :func:`register_declared`,
which registers exactly the declared ops, so the declaration cannot drift from the registry.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .op import list_ops, op_class
from .registry import KNOWN_BACKENDS, KnownBackend, kernel_registry

__all__ = ["backend_ops", "backend_table", "declared_ops", "op_summary", "register_declared", "support_table"]


def register_declared(
    registry: Any, declared: Sequence[str], impls: Mapping[str, Any], platform: Any, backend: Any, priority: int
) -> None:
    """Register ``impls`` (op name → implementation), which must be exactly the ``declared`` ops.

    A backend's ``register`` calls this with its ``OPS``, so an implementation added without
    declaring it (or a declared op without one) fails the plugin's registration, saying which,
    instead of leaving the support tables wrong.
    """
    missing, extra = sorted(set(declared) - set(impls)), sorted(set(impls) - set(declared))
    if missing or extra or len(set(declared)) != len(declared):
        raise ValueError(
            f"the declared ops {list(declared)} and the implementations {sorted(impls)} differ: "
            f"declared without an implementation {missing}, implemented without a declaration {extra}"
            + (" (an op is declared twice)" if len(set(declared)) != len(declared) else "")
        )
    for op in declared:
        registry.register(op, platform, backend, priority=priority)(impls[op])


def declared_ops(known: KnownBackend) -> tuple[str, ...] | None:
    """The ``OPS`` that ``known``'s package declares, or ``None`` if it cannot be imported."""
    if not known.module:
        return None
    try:
        module = importlib.import_module(known.module)
    except ImportError:
        return None
    ops = getattr(module, "OPS", None)
    return None if ops is None else tuple(ops)


def backend_ops(registry: Any = None) -> dict[str, tuple[str, ...] | None]:
    """Each first-party backend's ops, sorted: those it registered if it is loaded, else those its
    package declares (``None``: not loaded and its package cannot be imported)."""
    registry = kernel_registry if registry is None else registry
    infos = {b.name: b for b in registry.backends(include_missing=True)}
    out: dict[str, tuple[str, ...] | None] = {}
    for name, known in KNOWN_BACKENDS.items():
        info = infos.get(name)
        if info is not None and info.status == "loaded":
            ops: tuple[str, ...] | None = tuple(key.partition("/")[0] for key in info.implementations)
        else:
            ops = declared_ops(known)
        out[name] = None if ops is None else tuple(sorted(set(ops)))
    return out


def op_summary(op: str) -> str:
    """What ``op`` computes, in Markdown: its folder's docstring's first sentence, without its name."""
    try:
        cls = op_class(op)
    except KeyError:
        return ""
    package = sys.modules.get(cls.__module__.rpartition(".")[0])
    line = " ".join((getattr(package, "__doc__", None) or cls.__doc__ or "").strip().split("\n\n")[0].split())
    head, sep, rest = line.partition(": ")
    if sep and head.startswith(f"``{op}``"):
        line = rest
    return line.replace("``", "`").replace("|", "\\|")


def _all_ops(by_backend: Mapping[str, Sequence[str] | None]) -> list[str]:
    # A backend may implement an op this core does not define (a newer backend): it gets a row too.
    return sorted(set(list_ops()).union(*(ops for ops in by_backend.values() if ops is not None)))


def support_table(by_backend: Mapping[str, Sequence[str] | None] | None = None) -> str:
    """The op × backend table (every op, every first-party backend) and a table of the backends.

    ``by_backend`` (default: :func:`backend_ops`) maps each backend to its ops, ``None`` where
    they are unknown.
    """
    by_backend = backend_ops() if by_backend is None else by_backend
    names = list(by_backend)
    lines = [
        "| op | " + " | ".join(f"`{n}`" for n in names) + " | what it computes |",
        "|---|" + ":-:|" * len(names) + "---|",
    ]
    for op in _all_ops(by_backend):
        cells = ["?" if by_backend[n] is None else "✓" if op in by_backend[n] else "" for n in names]  # type: ignore[operator]
        lines.append(f"| `{op}` | " + " | ".join(cells) + f" | {op_summary(op)} |")
    lines += [
        "",
        '`platform="auto"` picks, among the implementations that accept a call, the one of highest priority;',
        '`platform="<backend>"` asks for one.',
        "",
        "| backend | distribution | needs | install |",
        "|---|---|---|---|",
    ]
    for n in names:
        known = KNOWN_BACKENDS.get(n)
        if known is None:
            lines.append(f"| `{n}` | | | |")
            continue
        needs = known.needs + ("; not installed here, so its ops are unknown (`?`)" if by_backend[n] is None else "")
        lines.append(f"| `{n}` | `{known.distribution}` | {needs} | `{known.install}` |")
    return "\n".join(lines) + "\n"


def backend_table(name: str, by_backend: Mapping[str, Sequence[str] | None] | None = None) -> str:
    """The ops that the first-party backend ``name`` registers, as a Markdown table."""
    by_backend = backend_ops() if by_backend is None else by_backend
    if name not in by_backend:
        raise ValueError(f"name must be one of the backends {sorted(by_backend)}, got {name!r}")
    known = KNOWN_BACKENDS.get(name)
    dist = f"`{known.distribution}`" if known else f"`{name}`"
    ops = by_backend[name]
    if ops is None:
        return f"The ops of {dist} are unknown here: it is not installed and its package cannot be imported.\n"
    total = len(_all_ops(by_backend))
    count = f"all {total}" if len(ops) == total else f"{len(ops)} of the {total}"
    lines = [
        f'{dist} registers {count} ops of ejkernel (`platform="{name}"`):',
        "",
        "| op | what it computes |",
        "|---|---|",
    ]
    lines += [f"| `{op}` | {op_summary(op)} |" for op in ops]
    return "\n".join(lines) + "\n"
