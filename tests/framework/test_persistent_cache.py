"""The config caches: in memory (ConfigCache) and on disk (PersistentCache).

Every on-disk test uses a file under ``tmp_path`` (or a scoped policy pointing there), never the
user's real cache. Covered: the JSON format, atomic writes (no temp files left, and those of a
killed writer removed), the read snapshot refreshed when another writer changes the file,
corrupt and foreign files (and entries that are not records) reported once and moved aside (not
deleted) at the next write, concurrent writers in processes and threads, and write failures that
are reported and survived.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import threading
from pathlib import Path

import filelock
import pytest

import ejkernel
from ejkernel.modules import FlashAttentionConfig
from ejkernel.ops import SCHEMA_VERSION, CacheRecord, ConfigCache, FwdParams, PersistentCache
from ejkernel.ops import cache as cache_module

# Garbage that is valid UTF-8 text, and garbage bytes that are not UTF-8 at all (what a crash
# mid-write on some filesystems, a disk error, or another program can leave behind).
GARBAGE_TEXT = b"not json at all {{{ ]] \n"
GARBAGE_BYTES = b"\x00\xffnot json at all {{{\x89PNG\r\n"
with_garbage = pytest.mark.parametrize("garbage", [GARBAGE_TEXT, GARBAGE_BYTES], ids=["text", "binary"])


def record(n: int = 0) -> dict:
    return {"op": "flash_attention", "impl": "xla", "config": {"fwd_params": {"q_blocksize": 2**n}}}


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def temp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp"))


def warnings_matching(caplog, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "ejkernel" and r.levelno == logging.WARNING and text in r.message]


# -- format and basic operations ------------------------------------------------------------------


def test_put_get_roundtrip_and_file_format(tmp_path):
    cache = PersistentCache(tmp_path / "c.json")
    assert cache.path == tmp_path / "c.json"
    assert cache.get("k") is None
    assert len(cache) == 0

    assert cache.put("k", record(3)) is True
    got = cache.get("k")
    assert got is not None
    assert got["config"] == record(3)["config"]
    assert got["op"] == "flash_attention"
    assert isinstance(got["created"], str) and got["created"]

    data = read_json(tmp_path / "c.json")
    assert data["schema"] == SCHEMA_VERSION
    assert set(data["entries"]) == {"k"}
    assert data["entries"]["k"]["config"] == record(3)["config"]
    assert "created" in data["entries"]["k"]
    assert temp_files(tmp_path) == []


def test_put_does_not_mutate_the_callers_record_and_keeps_an_explicit_created(tmp_path):
    cache = PersistentCache(tmp_path / "c.json")
    rec = record()
    assert cache.put("a", rec)
    assert "created" not in rec
    assert cache.put("b", {**record(), "created": "2000-01-01T00:00:00+00:00"})
    assert cache.get("b")["created"] == "2000-01-01T00:00:00+00:00"


def test_get_returns_a_copy(tmp_path):
    cache = PersistentCache(tmp_path / "c.json")
    cache.put("k", record())
    cache.get("k")["op"] = "changed"
    assert cache.get("k")["op"] == "flash_attention"


def test_items_iter_len_remove_and_clear(tmp_path):
    path = tmp_path / "c.json"
    cache = PersistentCache(path)
    for i, key in enumerate(["b", "a", "c"]):
        assert cache.put(key, record(i))
    assert len(cache) == 3
    assert list(cache) == ["a", "b", "c"]
    assert [k for k, _ in cache.items()] == ["a", "b", "c"]

    assert cache.remove("b") is True
    assert cache.get("b") is None
    assert list(cache) == ["a", "c"]
    assert set(read_json(path)["entries"]) == {"a", "c"}
    assert cache.remove("missing") is True  # nothing to remove is not a failure

    assert cache.clear() is True
    assert len(cache) == 0
    assert path.exists()  # the file stays, empty
    assert read_json(path) == {"schema": SCHEMA_VERSION, "entries": {}}
    assert temp_files(tmp_path) == []


def test_put_replaces_an_entry(tmp_path):
    cache = PersistentCache(tmp_path / "c.json")
    cache.put("k", record(1))
    cache.put("k", record(2))
    assert cache.get("k")["config"] == record(2)["config"]
    assert len(cache) == 1


def test_put_creates_missing_folders(tmp_path):
    path = tmp_path / "deep" / "er" / "c.json"
    cache = PersistentCache(path)
    assert cache.put("k", record())
    assert read_json(path)["entries"]["k"]["op"] == "flash_attention"


def test_stores_a_real_config_that_round_trips(tmp_path):
    cfg = FlashAttentionConfig(platform="xla", backend="any", fwd_params=FwdParams(q_blocksize=64, kv_blocksize=32))
    cache = PersistentCache(tmp_path / "c.json")
    cache.put("k", {"config": cfg.to_dict(), "time_ms": 1.5})
    fresh = PersistentCache(tmp_path / "c.json")
    assert FlashAttentionConfig.from_dict(fresh.get("k")["config"]) == cfg
    assert fresh.get("k")["time_ms"] == 1.5


def test_default_path_follows_the_scoped_policy(tmp_path):
    cache = PersistentCache()
    with ejkernel.ops.policy(cache_dir=tmp_path):
        assert cache.path == tmp_path / f"configs-v{SCHEMA_VERSION}.json"
        assert PersistentCache().path == tmp_path / f"configs-v{SCHEMA_VERSION}.json"
        assert cache.put("k", record())
        assert (tmp_path / f"configs-v{SCHEMA_VERSION}.json").exists()
        with ejkernel.ops.policy(cache_dir=tmp_path / "other"):
            assert cache.path == tmp_path / "other" / f"configs-v{SCHEMA_VERSION}.json"
            assert cache.get("k") is None  # looked up at each access
        assert cache.get("k") is not None
    assert cache.path == ejkernel.ops.current_policy().cache_dir / f"configs-v{SCHEMA_VERSION}.json"
    assert cache.path != tmp_path / f"configs-v{SCHEMA_VERSION}.json"


# -- several readers and writers ------------------------------------------------------------------


def test_a_second_instance_sees_what_the_first_wrote(tmp_path):
    path = tmp_path / "c.json"
    first, second = PersistentCache(path), PersistentCache(path)
    assert second.get("a") is None  # caches an (empty) snapshot
    first.put("a", record(1))
    assert second.get("a")["config"] == record(1)["config"]
    first.put("b", record(2))
    assert set(second) == {"a", "b"}
    # writes merge: the second instance adds to what the first wrote
    second.put("c", record(3))
    assert set(first) == {"a", "b", "c"}
    first.remove("a")
    assert second.get("a") is None


def test_snapshot_refreshes_when_a_same_size_file_replaces_it_within_one_timestamp_tick(tmp_path):
    # Filesystems with coarse modification times (FAT, HFS+, some NFS setups: a second or more;
    # older Linux kernels stamp files at timer-tick resolution) can give two successive writes
    # the same mtime. When the new content also has the same size, a snapshot keyed on
    # (mtime, size) goes stale. os.utime simulates that here. Each write renames a new file
    # over the old one, so the inode changes and the change is detectable.
    path = tmp_path / "c.json"
    writer, reader = PersistentCache(path), PersistentCache(path)
    created = "2000-01-01T00:00:00+00:00"
    writer.put("k", {"config": {}, "v": 1, "created": created})
    before = path.stat()
    assert reader.get("k")["v"] == 1
    writer.put("k", {"config": {}, "v": 2, "created": created})
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # same tick as the first write
    assert path.stat().st_size == before.st_size
    assert read_json(path)["entries"]["k"]["v"] == 2
    assert reader.get("k")["v"] == 2


def _put_many(path: str, worker: int, count: int, barrier) -> None:
    """Process worker (module level, for the spawn context): put ``count`` distinct keys."""
    cache = PersistentCache(path)
    barrier.wait(timeout=120)
    for i in range(count):
        if not cache.put(f"w{worker}-{i}", {"config": {}, "worker": worker, "i": i}):
            raise SystemExit(3)


def test_concurrent_processes_lose_no_entries(tmp_path):
    path = tmp_path / "c.json"
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_put_many, args=(str(path), w, 25, barrier)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=180)
    for p in procs:
        if p.is_alive():
            p.kill()
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]

    data = read_json(path)  # valid JSON
    assert data["schema"] == SCHEMA_VERSION
    expected = {f"w{w}-{i}" for w in range(4) for i in range(25)}
    assert set(data["entries"]) == expected
    assert set(PersistentCache(path)) == expected
    assert temp_files(tmp_path) == []


@pytest.mark.parametrize("shared", [True, False], ids=["one-instance", "two-instances"])
def test_concurrent_threads_lose_no_entries(tmp_path, shared):
    path = tmp_path / "c.json"
    caches = [PersistentCache(path)] * 2 if shared else [PersistentCache(path), PersistentCache(path)]
    barrier = threading.Barrier(2)
    failures: list[object] = []

    def work(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            for i in range(25):
                if not caches[n].put(f"t{n}-{i}", {"config": {}, "i": i}):
                    failures.append((n, i))
                caches[n].get(f"t{n}-{i}")
        except Exception as e:  # pragma: no cover - reported below
            failures.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert failures == []
    expected = {f"t{n}-{i}" for n in range(2) for i in range(25)}
    assert set(read_json(path)["entries"]) == expected
    assert set(caches[0]) == expected
    assert set(caches[1]) == expected
    assert temp_files(tmp_path) == []


# -- corrupt and foreign files --------------------------------------------------------------------


def _check_moved_aside(tmp_path: Path, cache: PersistentCache, original: bytes, caplog) -> None:
    path = cache.path
    assert cache.put("new", record(5)) is True
    aside = sorted(tmp_path.glob("c.corrupt-*.json"))
    assert len(aside) == 1, sorted(p.name for p in tmp_path.iterdir())
    assert aside[0].read_bytes() == original  # nothing lost
    data = read_json(path)
    assert data["schema"] == SCHEMA_VERSION
    assert set(data["entries"]) == {"new"}
    assert cache.get("new")["config"] == record(5)["config"]
    assert len(warnings_matching(caplog, "moved the unusable config cache")) == 1
    assert temp_files(tmp_path) == []


@with_garbage
def test_corrupt_file_is_ignored_reported_once_and_moved_aside(tmp_path, caplog, garbage):
    caplog.set_level(logging.WARNING, logger="ejkernel")
    path = tmp_path / "c.json"
    path.write_bytes(garbage)
    cache = PersistentCache(path)

    assert cache.get("k") is None
    assert cache.get("other") is None
    assert len(cache) == 0
    assert cache.items() == []
    reports = warnings_matching(caplog, "ignoring config cache")
    assert len(reports) == 1
    assert str(path) in reports[0].message
    assert path.read_bytes() == garbage  # reading never touches the file

    _check_moved_aside(tmp_path, cache, garbage, caplog)
    assert len(warnings_matching(caplog, "ignoring config cache")) == 1  # the fresh file is fine


@with_garbage
def test_corrupt_file_moved_aside_by_a_first_put(tmp_path, caplog, garbage):
    caplog.set_level(logging.WARNING, logger="ejkernel")
    path = tmp_path / "c.json"
    path.write_bytes(garbage)
    _check_moved_aside(tmp_path, PersistentCache(path), garbage, caplog)


def test_truncated_file_counts_as_corrupt(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="ejkernel")
    path = tmp_path / "c.json"
    good = json.dumps({"schema": SCHEMA_VERSION, "entries": {"k": record()}}).encode()
    path.write_bytes(good[: len(good) // 2])
    cache = PersistentCache(path)
    assert cache.get("k") is None
    assert len(warnings_matching(caplog, "ignoring config cache")) == 1
    _check_moved_aside(tmp_path, cache, good[: len(good) // 2], caplog)


@pytest.mark.parametrize(
    "content",
    [
        {"schema": SCHEMA_VERSION + 98, "entries": {"k": {"config": {}}}},
        {"schema": None, "entries": {"k": {"config": {}}}},
        {"entries": {"k": {"config": {}}}},
        {"schema": SCHEMA_VERSION},
        {"schema": SCHEMA_VERSION, "entries": [["k", {"config": {}}]]},
        [{"schema": SCHEMA_VERSION, "entries": {}}],
        "just a string",
        None,
    ],
    ids=["other-schema", "null-schema", "no-schema", "no-entries", "entries-list", "list", "string", "null"],
)
def test_foreign_file_is_treated_like_a_corrupt_one(tmp_path, caplog, content):
    caplog.set_level(logging.WARNING, logger="ejkernel")
    path = tmp_path / "c.json"
    original = json.dumps(content).encode()
    path.write_bytes(original)
    cache = PersistentCache(path)
    assert cache.get("k") is None
    assert cache.get("k") is None
    assert len(warnings_matching(caplog, "ignoring config cache")) == 1
    _check_moved_aside(tmp_path, cache, original, caplog)


def test_a_changed_corrupt_file_is_reported_again(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="ejkernel")
    path = tmp_path / "c.json"
    path.write_bytes(GARBAGE_TEXT)
    cache = PersistentCache(path)
    assert cache.get("k") is None
    path.write_bytes(GARBAGE_TEXT + b"more garbage")
    assert cache.get("k") is None
    assert cache.get("k") is None
    assert len(warnings_matching(caplog, "ignoring config cache")) == 2


def test_entries_that_are_not_records_are_reported_and_moved_aside_never_dropped(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="ejkernel")
    path = tmp_path / "c.json"
    odd = {"int": 3, "list": [1, 2], "str": "x", "null": None}
    entries = {"good": {"config": {}}, **odd, "also": {"config": {"a": 1}}}
    path.write_text(json.dumps({"schema": SCHEMA_VERSION, "entries": entries}), encoding="utf-8")
    cache = PersistentCache(path)
    assert cache.get("good") == {"config": {}}
    assert cache.get("also") == {"config": {"a": 1}}
    for key in odd:
        assert cache.get(key) is None
    assert list(cache) == ["also", "good"]
    assert len(cache) == 2
    assert warnings_matching(caplog, "ignoring config cache") == []  # a usable file, not a corrupt one
    (report,) = warnings_matching(caplog, "entries of the config cache")
    assert "ignoring 4 entries" in report.message and "int, list, null, str" in report.message
    assert cache.put("new", record())
    assert set(read_json(path)["entries"]) == {"also", "good", "new"}
    (aside,) = tmp_path.glob("c.unreadable-*.json")
    assert read_json(aside) == {"schema": SCHEMA_VERSION, "entries": odd}  # every value, as it was
    assert len(warnings_matching(caplog, "that are not records aside to")) == 1
    assert list(tmp_path.glob("*.corrupt-*")) == [] and temp_files(tmp_path) == []
    assert cache.put("newer", record())  # moved once
    assert len(list(tmp_path.glob("c.unreadable-*.json"))) == 1


def _killed_mid_write(path: str) -> None:
    cache = PersistentCache(path)
    os.fsync = lambda fd: os._exit(9)  # dies after writing its temporary file, before the rename
    cache.put("lost", {"config": {}})


def test_a_temp_file_left_by_a_killed_writer_is_removed_by_the_next_writer(tmp_path):
    path = tmp_path / "c.json"
    assert PersistentCache(path).put("kept", record())
    proc = multiprocessing.get_context("spawn").Process(target=_killed_mid_write, args=(str(path),))
    proc.start()
    proc.join(timeout=180)
    assert proc.exitcode == 9
    (left,) = temp_files(tmp_path)
    assert "lost" in (tmp_path / left).read_text()  # the killed writer's payload, never renamed
    cache = PersistentCache(path)
    assert set(cache) == {"kept"}  # readers never see it
    assert cache.put("next", record())
    assert temp_files(tmp_path) == []
    assert set(read_json(path)["entries"]) == {"kept", "next"}


# -- write failures -------------------------------------------------------------------------------


def test_write_fails_when_the_parent_is_a_file(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="ejkernel")
    blocker = tmp_path / "afile"
    blocker.write_text("I am a file, not a folder", encoding="utf-8")
    cache = PersistentCache(blocker / "c.json")

    assert cache.get("k") is None
    assert cache.put("k", record()) is False
    assert cache.put("k2", record()) is False
    assert cache.remove("k") is False
    assert cache.clear() is False
    failures = warnings_matching(caplog, "could not write the config cache")
    assert len(failures) == 1
    assert str(blocker / "c.json") in failures[0].message
    assert cache.get("k") is None
    assert len(cache) == 0
    assert blocker.read_text(encoding="utf-8") == "I am a file, not a folder"


def test_write_failure_is_reported_once_per_path(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="ejkernel")
    (tmp_path / "f1").write_text("x", encoding="utf-8")
    (tmp_path / "f2").write_text("x", encoding="utf-8")
    cache = PersistentCache()
    for _ in range(2):
        for name in ("f1", "f2"):
            with ejkernel.ops.policy(cache_dir=tmp_path / name):
                assert cache.put("k", record()) is False
    assert len(warnings_matching(caplog, "could not write the config cache")) == 2


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0,
    reason="running as root (os.geteuid() == 0): root ignores file permissions, so a read-only folder stays writable",
)
def test_write_fails_in_a_read_only_folder(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="ejkernel")
    folder = tmp_path / "ro"
    folder.mkdir()
    cache = PersistentCache(folder / "c.json")
    assert cache.put("before", record()) is True
    os.chmod(folder, 0o500)
    try:
        assert cache.put("k", record()) is False
        assert cache.put("k2", record()) is False
        assert len(warnings_matching(caplog, "could not write the config cache")) == 1
        assert cache.get("k") is None
        assert cache.get("before") is not None  # the old file is intact and still read
        assert temp_files(folder) == []
    finally:
        os.chmod(folder, 0o700)


def test_lock_timeout_is_reported_and_survived(tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.WARNING, logger="ejkernel")
    monkeypatch.setattr(cache_module, "_LOCK_TIMEOUT_S", 0.2)
    path = tmp_path / "c.json"
    cache = PersistentCache(path)
    assert cache.put("before", record())
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with filelock.FileLock(str(path) + ".lock"):
            held.set()
            release.wait(timeout=30)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(timeout=30)
        assert cache.put("k", record()) is False
    finally:
        release.set()
        t.join(timeout=30)
    assert len(warnings_matching(caplog, "could not write the config cache")) == 1
    assert cache.get("k") is None
    assert cache.get("before") is not None
    assert cache.put("k", record()) is True  # works again once the lock is free


# -- the in-memory cache --------------------------------------------------------------------------


def test_config_cache_put_get_contains_len_items_clear():
    cache = ConfigCache()
    cfg = FlashAttentionConfig(platform="xla", fwd_params=FwdParams(q_blocksize=16))
    assert cache.get("k") is None
    assert "k" not in cache
    assert len(cache) == 0

    cache.put("k", cfg, source="autotune", time_ms=2.5)
    rec = cache.get("k")
    assert rec == CacheRecord(cfg, "autotune", 2.5)
    assert rec.config is cfg
    assert "k" in cache
    assert len(cache) == 1

    cache.put("j", cfg)
    assert cache.get("j") == CacheRecord(cfg, "unknown", None)
    cache.put("k", FlashAttentionConfig(), source="persistent")
    assert cache.get("k").config == FlashAttentionConfig()
    assert sorted(k for k, _ in cache.items()) == ["j", "k"]
    items = cache.items()
    items.clear()  # a copy
    assert len(cache) == 2

    cache.clear()
    assert len(cache) == 0
    assert cache.items() == []
    assert "k" not in cache


def test_config_cache_thread_safety():
    cache = ConfigCache()
    n_threads, per_thread = 8, 200
    cfgs = [FlashAttentionConfig(fwd_params=FwdParams(q_blocksize=2**i)) for i in range(n_threads)]
    barrier = threading.Barrier(n_threads)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            for i in range(per_thread):
                cache.put(f"{n}-{i}", cfgs[n], source=str(n))
                assert f"{n}-{i}" in cache
                cache.get(f"{(n + 1) % n_threads}-{i}")
                len(cache)
                cache.items()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert len(cache) == n_threads * per_thread
    for n in range(n_threads):
        assert cache.get(f"{n}-{per_thread - 1}") == CacheRecord(cfgs[n], str(n), None)


# -- what a call sees -----------------------------------------------------------------------------


@with_garbage
def test_a_corrupt_default_cache_file_does_not_break_a_call(tmp_path, caplog, garbage):
    import jax
    import jax.numpy as jnp

    caplog.set_level(logging.WARNING, logger="ejkernel")
    (tmp_path / f"configs-v{SCHEMA_VERSION}.json").write_bytes(garbage)
    q, k, v = (jax.random.normal(jax.random.key(i), (1, 13, 2, 16), jnp.float32) for i in range(3))
    with ejkernel.ops.policy(cache_dir=tmp_path, persistent_cache=True, autotune=False, on_cache_miss="heuristic"):
        out = ejkernel.flash_attention(q, k, v)
    assert out.shape == (1, 13, 2, 16)
    assert bool(jnp.all(jnp.isfinite(out)))
    assert len(warnings_matching(caplog, "ignoring config cache")) == 1
