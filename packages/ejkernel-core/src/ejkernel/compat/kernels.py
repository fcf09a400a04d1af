"""Earlier releases' kernel modules, ``ejkernel.kernels._<backend>.<op>``, mapped onto the public ops.

Earlier ejkernel kept each backend's kernels in the package ``ejkernel.kernels``, one folder per op
(``ejkernel/kernels/_triton``, ``_pallas/tpu``, ``_pallas/gpu``, ``_xla``, ``_cuda``), and its
README imported from there::

    from ejkernel.kernels._xla.page_attention import page_attention

Here the kernels live in separately installed backend distributions, so these import paths are
synthesized: ``ejkernel.kernels._<backend>.<op>`` (and its ``._interface`` submodule) is a module
whose ``<op>`` is the public op with ``platform=`` fixed to that backend (``_pallas.tpu`` and
``_pallas.gpu`` both mean ``platform="pallas"``). Every op of ``ejkernel.list_ops()`` has such a
path under every backend; calling one whose backend is not installed, or cannot run on this
device, raises the public op's ``NoImplementationError`` saying why. A name that is not an op
raises ``ModuleNotFoundError``.

Keyword names of the earlier private functions that differ from the public op's are mapped by
:data:`KEYWORD_ALIASES` (page_attention's ``scale`` is ``softmax_scale``). page_attention here
reads the earlier releases' cache layout, ``[num_blocks, num_kv_heads, block_size, dim]``
(``cache_layout="blocks_heads_tokens"``), unless ``cache_layout=`` says otherwise or
``block_size=``, the cache's page length, matches only the page axis of this library's layout;
``block_size`` is checked against the cache.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable
from typing import Any

#: ``ejkernel.kernels.<name>`` → the public ops' ``platform=``.
BACKENDS: dict[str, str | None] = {
    "_xla": "xla",
    "_triton": "triton",
    "_cuda": "cuda",
    "_pallas": None,  # a namespace: _pallas.tpu / _pallas.gpu
    "_pallas.tpu": "pallas",
    "_pallas.gpu": "pallas",
}

#: Per op, the earlier private functions' keyword names → the public op's.
KEYWORD_ALIASES: dict[str, dict[str, str]] = {"page_attention": {"scale": "softmax_scale"}}


def _page_attention_layout(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    from ..ops.page_attention.op import CACHE_LAYOUTS, EARLIER_CACHE_LAYOUT

    block_size = kwargs.pop("block_size", None)
    cache = args[1] if len(args) > 1 else kwargs.get("key_cache")
    if block_size is None or cache is None or len(getattr(cache, "shape", ())) != 4:
        kwargs.setdefault("cache_layout", EARLIER_CACHE_LAYOUT)
        return  # the op reports a missing or ill-shaped cache
    shape = tuple(int(n) for n in cache.shape)
    fits = [name for name, axes in CACHE_LAYOUTS.items() if shape[axes.index("block_size")] == block_size]
    if not fits and "cache_layout" not in kwargs:
        raise ValueError(
            f"page_attention: block_size={block_size} matches neither page axis of key_cache {shape} "
            "([num_blocks, num_kv_heads, block_size, dim] or [num_blocks, block_size, num_kv_heads, dim])"
        )
    # Both fit (block_size == num_kv_heads): the earlier layout, as without block_size.
    layout = kwargs.setdefault("cache_layout", EARLIER_CACHE_LAYOUT if EARLIER_CACHE_LAYOUT in fits else fits[0])
    if layout in CACHE_LAYOUTS and layout not in fits:
        axes = ", ".join(CACHE_LAYOUTS[layout])
        raise ValueError(
            f"page_attention: block_size={block_size} is not the page axis of key_cache {shape} read as "
            f"[{axes}, head_dim] (cache_layout={layout!r})"
        )


#: Per op, a function adapting an earlier private call's arguments in place (after the aliases).
ADAPTERS: dict[str, Callable[[tuple[Any, ...], dict[str, Any]], None]] = {
    "page_attention": _page_attention_layout,
}


def _bind(op: str, platform: str) -> Callable[..., Any]:
    import ejkernel

    public = getattr(ejkernel, op)
    aliases = KEYWORD_ALIASES.get(op, {})
    adapt = ADAPTERS.get(op)

    @functools.wraps(public)
    def call(*args: Any, **kwargs: Any) -> Any:
        for old, new in aliases.items():
            if old in kwargs:
                if new in kwargs:
                    raise TypeError(f"{op}: pass {new}= or its earlier name {old}=, not both")
                kwargs[new] = kwargs.pop(old)
        if adapt is not None:
            adapt(args, kwargs)
        if kwargs.setdefault("platform", platform) != platform:
            raise TypeError(
                f"ejkernel.kernels.{_module_of(platform)}.{op}.{op} runs platform={platform!r}; "
                f"for platform={kwargs['platform']!r} call ejkernel.{op}"
            )
        return public(*args, **kwargs)

    call.__doc__ = (
        f"``ejkernel.{op}(..., platform={platform!r})`` under its earlier import path.\n\n{public.__doc__ or ''}"
    )
    return call


def _module_of(platform: str) -> str:
    return next(name for name, p in BACKENDS.items() if p == platform)


class _BackendPackage(types.ModuleType):
    """``ejkernel.kernels._<backend>``: its ``<op>`` attribute is the op's function, as in earlier
    releases (whose package ``__init__`` imported ``from .<op> import <op>``), also after the
    import system binds the imported submodule ``<op>`` to it."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and value.__name__ == f"{self.__name__}.{name}":
            value = getattr(value, name, value)
        super().__setattr__(name, value)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    PREFIX = "ejkernel.kernels."

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if not fullname.startswith(self.PREFIX):
            return None
        parts = fullname[len(self.PREFIX) :].split(".")
        if parts[0] == "_pallas" and len(parts) > 1 and parts[1] in ("tpu", "gpu"):
            parts = [f"_pallas.{parts[1]}", *parts[2:]]
        backend, rest = parts[0], parts[1:]
        if backend not in BACKENDS or len(rest) > 2 or (len(rest) == 2 and rest[1] != "_interface"):
            return None
        if rest:
            import ejkernel

            if BACKENDS[backend] is None or rest[0] not in ejkernel.list_ops():
                return None
        is_package = len(rest) < 2
        return importlib.machinery.ModuleSpec(fullname, self, is_package=is_package)

    def create_module(self, spec: Any) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        parts = module.__name__[len(self.PREFIX) :].split(".")
        if parts[0] == "_pallas" and len(parts) > 1:
            parts = [f"_pallas.{parts[1]}", *parts[2:]]
        backend, rest = parts[0], parts[1:]
        if not rest:
            module.__doc__ = f"Earlier releases' {backend} kernels: ``ejkernel.kernels.{backend}.<op>``."
            module.__class__ = _BackendPackage
            return
        op = rest[0]
        module.__doc__ = f"``ejkernel.{op}`` on platform {BACKENDS[backend]!r}, under its earlier import path."
        setattr(module, op, _bind(op, BACKENDS[backend]))  # type: ignore[arg-type]
        module.__all__ = [op]  # type: ignore[attr-defined]


_FINDER = _Finder()


def install() -> None:
    """Put the finder of ``ejkernel.kernels._<backend>[.<op>[._interface]]`` on ``sys.meta_path``
    (``import ejkernel.kernels`` does)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _FINDER)


__all__ = ["ADAPTERS", "BACKENDS", "KEYWORD_ALIASES", "install"]
