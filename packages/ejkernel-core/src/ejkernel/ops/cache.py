"""Config caches: in memory (:class:`ConfigCache`) and on disk (:class:`PersistentCache`).

Keys are readable strings built by :func:`cache_key`: device fingerprint, op and implementation
(with versions), and an abstract description of the arguments (shapes, dtypes, static options).
Arrays never enter a key by value.

The on-disk cache is one JSON file, ``configs-v<schema>.json``, in the policy's ``cache_dir``::

    {"schema": 1, "entries": {"<key>": {"op": ..., "impl": ..., "config": {...}, ...}}}

Writes take a file lock, re-read the file, merge, write a temporary file and rename it over the
old one, so concurrent processes never lose each other's entries and readers never see half a
file. A corrupt or foreign file is reported, ignored, and moved aside (never deleted) at the next
write; so are entries that are not records (``<name>.unreadable-<time>.json``), while the
others stay. A temporary file left by a writer killed mid-write is removed by the next writer
(under the lock, no other writer is mid-write). Failing to write (read-only folder, lock
timeout) is reported and survived.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import glob
import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import filelock

from .config import OpConfig
from .policy import current_policy

__all__ = ["SCHEMA_VERSION", "CacheRecord", "ConfigCache", "PersistentCache", "cache_key"]

log = logging.getLogger("ejkernel")

SCHEMA_VERSION = 1
_LOCK_TIMEOUT_S = 30.0


def cache_key(device_fingerprint: str, op: str, op_version: str, impl: str, impl_version: str, description: str) -> str:
    """``<device>::<op>@<version>::<impl>@<version>::<abstract arguments>``."""
    return f"{device_fingerprint}::{op}@{op_version}::{impl}@{impl_version}::{description}"


@dataclasses.dataclass(frozen=True)
class CacheRecord:
    """A cached config with where it came from."""

    config: OpConfig
    source: str = "unknown"
    time_ms: float | None = None


class ConfigCache:
    """Thread-safe in-memory map from cache key to config (the third tier)."""

    def __init__(self) -> None:
        self._data: dict[str, CacheRecord] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> CacheRecord | None:
        with self._lock:
            return self._data.get(key)

    def put(self, key: str, config: OpConfig, *, source: str = "unknown", time_ms: float | None = None) -> None:
        with self._lock:
            self._data[key] = CacheRecord(config, source, time_ms)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def items(self) -> list[tuple[str, CacheRecord]]:
        with self._lock:
            return list(self._data.items())

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._data


class PersistentCache:
    """The on-disk config cache (the fourth tier). See the module docstring for the format.

    Args:
        name: where the file is: a path (it contains a separator or ends in ``.json``), or a
            name such as ``"flash-attn"`` (earlier releases' one-file-per-op form) that names
            ``<name>.json`` in the policy's ``cache_dir``. Default: ``configs-v<schema>.json``
            there, looked up at each access so a scoped policy can point elsewhere.
        path: the file, by keyword (earlier releases' ``PersistentCache(opname, path=...)``).
        loader: ``loader(dict) -> config``, instead of the config class's ``from_dict``.
        dumper: ``dumper(config) -> dict`` (JSON-serialisable), instead of ``to_dict``.
        cfg_type: the config class entries are read back as (default: the op's Config class).
    """

    def __init__(
        self,
        name: str | os.PathLike[str] | None = None,
        path: str | os.PathLike[str] | None = None,
        loader: Any = None,
        dumper: Any = None,
        cfg_type: type | None = None,
    ):
        if name is not None and path is not None:
            self.name: str | None = os.fspath(name)
        else:
            self.name = None
        if path is None and name is not None:
            text = os.fspath(name)
            if os.sep in text or "/" in text or text.endswith(".json") or isinstance(name, os.PathLike):
                path = name
            else:
                self.name = text
        if self.name is not None and not self.name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise ValueError(f"PersistentCache: {self.name!r} is neither a file path nor a plain name")
        for what, fn in (("loader", loader), ("dumper", dumper)):
            if fn is not None and not callable(fn):
                raise TypeError(f"PersistentCache: {what} must be callable, got {type(fn).__name__}")
        if cfg_type is not None and not isinstance(cfg_type, type):
            raise TypeError(f"PersistentCache: cfg_type must be a class, got {cfg_type!r}")
        self.loader, self.dumper, self.cfg_type = loader, dumper, cfg_type
        self._fixed_path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._snapshot: dict[str, Any] = {}
        self._stamp: tuple[Path, int, int, int, int] | None = None
        self._reported: set[tuple[Path, int, int, int, int]] = set()
        self._write_failed: set[Path] = set()

    @property
    def path(self) -> Path:
        if self._fixed_path is not None:
            return self._fixed_path
        if self.name is not None:
            return current_policy().cache_dir / f"{self.name}.json"
        return current_policy().cache_dir / f"configs-v{SCHEMA_VERSION}.json"

    # -- (de)serializing configs --------------------------------------------------------------

    def encode(self, cfg: OpConfig) -> dict[str, Any]:
        """A config as stored: ``dumper(cfg)`` if given, else ``cfg.to_dict()``."""
        return dict(self.dumper(cfg)) if self.dumper is not None else cfg.to_dict()

    def decode(self, data: dict[str, Any], config_cls: type[OpConfig]) -> OpConfig:
        """A stored config back: ``loader(data)`` if given, else ``from_dict`` of ``cfg_type``
        (default ``config_cls``)."""
        if self.loader is not None:
            cfg = self.loader(data)
        else:
            cls = self.cfg_type or config_cls
            cfg = cls.from_dict(data) if hasattr(cls, "from_dict") else cls(**data)
        if not isinstance(cfg, config_cls):
            raise TypeError(f"stored config read back as {type(cfg).__name__}, expected {config_cls.__name__}")
        return cfg

    # -- reading ------------------------------------------------------------------------------

    def _parse(self, path: Path) -> tuple[dict[str, Any], str | None, dict[str, Any]]:
        """Entries of the file at ``path``; if it is corrupt or foreign, why; and its entries
        that are not records (kept out of the first, never dropped)."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return {}, None, {}
        except OSError as e:
            return {}, f"unreadable ({e})", {}
        try:
            data = json.loads(raw.decode("utf-8"))
        except ValueError as e:  # UnicodeDecodeError is a ValueError too
            return {}, f"not valid UTF-8 JSON ({e})", {}
        if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
            return {}, "not an ejkernel config cache (no 'entries' object)", {}
        if data.get("schema") != SCHEMA_VERSION:
            return {}, f"schema {data.get('schema')!r}, expected {SCHEMA_VERSION}", {}
        entries = {k: v for k, v in data["entries"].items() if isinstance(v, dict)}
        unreadable = {k: v for k, v in data["entries"].items() if not isinstance(v, dict)}
        return entries, None, unreadable

    def _load(self) -> dict[str, Any]:
        path = self.path
        # Writers rename a new file into place, so the inode changes even where timestamps are
        # too coarse to tell two writes apart.
        try:
            st = path.stat()
            stamp = (path, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
        except OSError:
            stamp = (path, 0, 0, 0, -1)
        with self._lock:
            if stamp == self._stamp:
                return self._snapshot
            entries, problem, unreadable = self._parse(path) if stamp[-1] >= 0 else ({}, None, {})
            if (problem or unreadable) and stamp not in self._reported:
                self._reported.add(stamp)
                if problem:
                    log.warning(
                        "ejkernel: ignoring config cache %s: %s (it is moved aside at the next write)", path, problem
                    )
                else:
                    log.warning(
                        "ejkernel: ignoring %d entries of the config cache %s that are not records: %s "
                        "(they are moved aside at the next write)",
                        len(unreadable),
                        path,
                        ", ".join(sorted(unreadable)[:5]) + (", ..." if len(unreadable) > 5 else ""),
                    )
            self._snapshot, self._stamp = entries, stamp
            return entries

    def get(self, key: str) -> dict[str, Any] | None:
        """The record stored under ``key`` (a dict with at least ``config``), or ``None``."""
        rec = self._load().get(key)
        return dict(rec) if rec is not None else None

    def items(self) -> list[tuple[str, dict[str, Any]]]:
        return sorted(self._load().items())

    def __len__(self) -> int:
        return len(self._load())

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._load()))

    # -- writing ------------------------------------------------------------------------------

    def put(self, key: str, record: dict[str, Any]) -> bool:
        """Store ``record`` under ``key``; returns whether it reached the disk."""
        record = dict(record)
        record.setdefault("created", _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"))
        return self._update(lambda entries: entries.__setitem__(key, record))

    def remove(self, key: str) -> bool:
        return self._update(lambda entries: entries.pop(key, None))

    def clear(self) -> bool:
        """Remove every entry (the file stays, empty)."""
        return self._update(lambda entries: entries.clear())

    def _update(self, change) -> bool:
        path = self.path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with filelock.FileLock(str(path) + ".lock", timeout=_LOCK_TIMEOUT_S):
                self._remove_leftover_temp_files(path)
                entries, problem, unreadable = self._parse(path)
                stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
                if problem and path.exists():
                    aside = path.with_name(f"{path.stem}.corrupt-{stamp}{path.suffix}")
                    os.replace(path, aside)
                    log.warning("ejkernel: moved the unusable config cache %s aside to %s (%s)", path, aside, problem)
                if unreadable:
                    aside = path.with_name(f"{path.stem}.unreadable-{stamp}{path.suffix}")
                    self._write_atomically(aside, {"schema": SCHEMA_VERSION, "entries": unreadable})
                    log.warning(
                        "ejkernel: moved %d entries of the config cache %s that are not records aside to %s",
                        len(unreadable),
                        path,
                        aside,
                    )
                change(entries)
                self._write_atomically(path, {"schema": SCHEMA_VERSION, "entries": entries})
        except (OSError, filelock.Timeout) as e:
            if path not in self._write_failed:
                self._write_failed.add(path)
                log.warning("ejkernel: could not write the config cache %s: %s", path, e)
            return False
        with self._lock:
            self._stamp = None  # re-read next time (another process may have merged in between)
        return True

    @staticmethod
    def _write_atomically(path: Path, data: dict[str, Any]) -> None:
        payload = json.dumps(data, indent=1, sort_keys=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @staticmethod
    def _remove_leftover_temp_files(path: Path) -> None:
        """Temporary files of writers killed before their rename (called under the lock, so no
        other writer is mid-write)."""
        for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
            try:
                tmp.unlink()
                log.debug("ejkernel: removed %s, left by a config cache writer that did not finish", tmp)
            except OSError:
                pass  # another writer's cleanup won, or not ours to remove: harmless either way
