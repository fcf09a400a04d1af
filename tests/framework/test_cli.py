"""The ``ejkernel`` command: info, bench (table, JSON, PNG), cache, and the console script."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.cli import main
from ejkernel.ops import PersistentCache, policy

ATTENTION_KEYS = {
    "op", "impl", "device", "dtype", "b", "sq", "sk", "h", "hk", "d", "causal",
    "fwd_ms", "fwd_tflops", "fwdbwd_ms", "fwdbwd_tflops",
}  # fmt: skip


def test_info_runs_as_module_and_console_script():
    res = subprocess.run([sys.executable, "-m", "ejkernel", "info"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "xla" in res.stdout and "loaded" in res.stdout and "flash_attention" in res.stdout
    script = os.path.join(os.path.dirname(sys.executable), "ejkernel")
    res = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "bench" in res.stdout


@pytest.mark.slow
def test_bench_attention_json_and_plot(tmp_path, capsys):
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    code = main(
        [
            "bench", "flash_attention", "--shape", "1,40,48,4,2,16", "--causal", "both", "--repeats", "1",
            "--json", str(out_json), "--plot", str(out_png),
        ]
    )  # fmt: skip
    assert code == 0
    text = capsys.readouterr().out
    assert "jax.nn[xla]" in text and "ok" in text
    records = json.loads(out_json.read_text())
    assert {r["impl"] for r in records} == {"xla", "jax.nn[xla]"}
    assert {r["causal"] for r in records} == {False, True}
    for r in records:
        assert set(r) >= ATTENTION_KEYS, ATTENTION_KEYS - set(r)
        assert (
            r["fwd_ms"] > 0
            and r["fwdbwd_tflops"] > 0
            and 0 < r["compile_s"] < 120
            and 0 < r["compile_fwdbwd_s"] < 120
            and r["command"].startswith("ejkernel bench flash_attention --shape")
        )
        assert (r["sq"], r["sk"], r["h"], r["hk"], r["d"]) == (40, 48, 4, 2, 16)
    assert [r["check"] for r in records if r["impl"] == "xla"] == ["ok", "ok"]
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_bench_json_is_on_disk_after_each_record(tmp_path, monkeypatch):
    """A run cut short (a device call's time limit) keeps what it measured: the file holds every
    record so far after each one, written whole (never half a file, no temporary left), with the
    ratios against the peers measured so far."""
    from ejkernel.ops import benchmark as B

    out_json = tmp_path / "r.json"
    seen: list[int] = []
    files: list[list[dict]] = []
    write = B.write_json

    def spy(records, path, command):
        write(records, path, command)
        files.append(json.loads(path.read_text()))
        seen.append(len(files[-1]))

    monkeypatch.setattr(B, "write_json", spy)
    code = main(
        [
            "bench", "flash_attention", "--shape", "1,24,24,2,2,16", "--causal", "both", "--fwd-only",
            "--repeats", "1", "--json", str(out_json),
        ]
    )  # fmt: skip
    assert code == 0
    # one write per record as it is measured (1, 2, 3, 4), then the final one with the ratios
    assert seen[:-1] == list(range(1, len(seen))) and seen[-1] == len(seen) - 1 >= 2
    assert not list(tmp_path.glob("*.tmp"))
    assert all("ratio_fwd_tflops" in r for r in json.loads(out_json.read_text()))
    # The last write of the run itself (before the final one) has every ratio already: the peer's
    # records came last, and the earlier records of its case got their ratios then.
    assert all(r["ratio_fwd_tflops"] for r in files[-2])
    first_case = [r for r in files[0] if r["label"] == files[0][0]["label"]]
    assert first_case and all(r["ratio_fwd_tflops"] is None for r in first_case)  # no peer measured yet


def test_bench_records_a_peer_that_fails(tmp_path, monkeypatch, capsys):
    """A peer that fails (out of memory at a long shape) is reported and recorded with its reason,
    with no timings, and no ratio is taken against it; the op's own record is complete."""
    import jax

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 34359738368 bytes")

    monkeypatch.setattr(jax.nn, "dot_product_attention", out_of_memory)
    out_json = tmp_path / "r.json"
    code = main(
        [
            "bench", "flash_attention", "--shape", "1,24,24,2,2,16", "--fwd-only", "--impl", "xla",
            "--repeats", "1", "--json", str(out_json),
        ]
    )  # fmt: skip
    assert code == 0
    records = {r["impl"]: r for r in json.loads(out_json.read_text())}
    peer = records["jax.nn[xla]"]
    assert peer["check"].startswith("failed: RuntimeError: RESOURCE_EXHAUSTED") and peer.get("fwd_ms") is None
    assert peer["label"] == records["xla"]["label"]
    assert records["xla"]["fwd_ms"] > 0 and records["xla"]["ratio_fwd_tflops"] is None
    assert "jax.nn[xla]: failed on" in capsys.readouterr().out


def test_bench_varlen_and_impl_filter(tmp_path):
    out_json = tmp_path / "r.json"
    code = main(
        [
            "bench", "scaled_dot_product_attention", "--b", "2", "--sq", "32", "--h", "2", "--d", "16",
            "--varlen", "3", "--causal", "yes", "--fwd-only", "--no-peers", "--repeats", "1", "--json", str(out_json),
        ]
    )  # fmt: skip
    assert code == 0
    (rec,) = json.loads(out_json.read_text())
    assert rec["varlen"] == 3 and rec["fwdbwd_ms"] is None and rec["check"] == "ok"


def test_bench_default_row_says_which_implementation_the_dispatch_chose(tmp_path, capsys):
    """``--impl default``: the call that names no implementation, as users make it, with the
    implementation it dispatched to (on a GPU, where several accept, it is added unasked)."""
    out_json = tmp_path / "r.json"
    code = main(
        [
            "bench", "flash_attention", "--shape", "1,24,24,2,2,16", "--fwd-only", "--repeats", "1",
            "--impl", "xla", "--impl", "default", "--json", str(out_json),
        ]
    )  # fmt: skip
    assert code == 0
    assert "default (xla)" in capsys.readouterr().out
    records = {r["impl"]: r for r in json.loads(out_json.read_text())}
    assert set(records) == {"xla", "default", "jax.nn[xla]"}
    assert records["default"]["dispatch"] == "xla" and records["default"]["check"] == "ok"
    assert records["default"]["peer"] == "jax.nn[xla]" and records["default"]["ratio_fwd_tflops"] > 0
    assert "dispatch" not in records["xla"]


def test_bench_page_attention_reports_bandwidth(tmp_path):
    out_json = tmp_path / "p.json"
    code = main(
        [
            "bench", "page_attention", "--b", "3", "--h", "4", "--hk", "2", "--d", "32",
            "--context", "100", "--block-size", "8", "--repeats", "1", "--json", str(out_json),
        ]
    )  # fmt: skip
    assert code == 0
    records = json.loads(out_json.read_text())
    assert {r["impl"] for r in records} == {"xla", "jax.nn[xla] dense decode", "jax.nn[xla] gather + dense decode"}
    for r in records:
        assert r["gbps"] > 0 and r["peak_gbps"] > 0 and r["bytes"] > 0
    xla = next(r for r in records if r["impl"] == "xla")
    # On a CPU the XLA path's ratio is against the peer that gathers the pages in its timing.
    assert xla["check"] == "ok" and xla["peer"] == "jax.nn[xla] gather + dense decode"


def test_bench_ratios_take_each_cases_first_peer_with_a_record():
    """Several peer names in order of preference: each case's ratio is against the first that
    has a record of that case (a decode step's kernel peer, a mixed step's dense peer)."""
    from ejkernel.ops.benchmark import add_ratios

    rows = [("dec", "xla", 2.0), ("dec", "page_attention", 1.0), ("dec", "jax.nn[xla] dense", 4.0)]
    rows += [("mixed", "xla", 3.0), ("mixed", "jax.nn[xla] dense", 1.5), ("alone", "xla", 1.0)]
    records = [{"label": label, "impl": impl, "gbps": g} for label, impl, g in rows]
    add_ratios(records, ("gbps",), ("page_attention", "jax.nn[xla] dense"))
    got = {(r["label"], r["impl"]): (r["peer"], r["ratio_gbps"]) for r in records}
    assert got[("dec", "xla")] == ("page_attention", 2.0)
    assert got[("dec", "jax.nn[xla] dense")] == ("page_attention", 4.0)
    assert got[("mixed", "xla")] == ("jax.nn[xla] dense", 2.0)
    assert got[("alone", "xla")] == (None, None)


def _fake_loops(monkeypatch, timing):
    """Programs that return their loop length instead of running; the lengths built, in order."""
    lengths = []

    def fake_looped(fn, loop=timing.LOOP, feedback=None):
        lengths.append(loop)
        return lambda *a: loop

    monkeypatch.setattr(timing, "looped", fake_looped)
    return lengths


@pytest.mark.parametrize(
    ("fixed_ms", "per_call_ms", "expected"),
    [(0.75, 0.25, 0.25), (0.75, 0.004, 0.004), (0.0, 2.0, 2.0)],
    ids=["decode", "tiny", "no-overhead"],
)
def test_bench_timer_cancels_the_fixed_cost_of_a_program(monkeypatch, fixed_ms, per_call_ms, expected):
    """Per call = the slope between two loop lengths: a program's fixed cost (launch, the host's
    wait) drops out, whatever the per-call time; the longer program runs up to ~40 ms."""
    from ejkernel.ops import timing

    lengths = _fake_loops(monkeypatch, timing)
    monkeypatch.setattr(timing, "time_callable", lambda f, repeats: fixed_ms + f() * per_call_ms)
    assert timing.device_ms(lambda x: x, (jnp.ones(3),), 3) == pytest.approx(expected)
    short, long = lengths
    assert short == timing.LOOP and 2 * timing.LOOP <= long <= timing.MAX_LOOP
    program_ms = fixed_ms + long * per_call_ms
    assert program_ms <= 1.05 * timing.SLOPE_PROGRAM_MS and (
        long == timing.MAX_LOOP or program_ms > 0.5 * timing.SLOPE_PROGRAM_MS
    )


def test_bench_timer_times_slow_calls_with_one_program(monkeypatch):
    """Calls so slow that ten of them dwarf a program's fixed cost: no second, longer program."""
    from ejkernel.ops import timing

    lengths = _fake_loops(monkeypatch, timing)
    monkeypatch.setattr(timing, "time_callable", lambda f, repeats: 0.75 + f() * 80.0)
    assert timing.device_ms(lambda x: x, (jnp.ones(3),), 3) == pytest.approx(80.0, rel=1e-3)
    assert lengths == [timing.LOOP]


def test_bench_loop_runs_every_call_without_copying_the_inputs():
    """Every call of the timed loop runs, and every part of it: custom calls XLA is free to hoist
    (pure callbacks, like Triton kernels) that read the first argument, only a later one, or only
    an integer array run ``loop`` times (an optimization barrier on the first argument let XLA
    hoist the first; tying the first argument alone, the others). The inputs are never written
    in the loop: a memory-bound op must not pay a pass over its inputs per call (changing one
    element per step, by scatter or ``dynamic_update_slice``, compiled to a loop fusion writing
    the whole array: a full copy per call on the GPU, which no ``copy`` instruction showed).
    Integer inputs keep their values."""
    from ejkernel.ops import timing

    runs = {"first": 0, "rest": 0, "ints": 0}
    seen_ints = []

    def host(name):
        def f(x):
            runs[name] += 1
            if name == "ints":
                seen_ints.append(np.asarray(x).copy())
            return np.asarray(x, np.float32).sum(0)

        return f

    def cb(name, x):
        return jax.pure_callback(host(name), jax.ShapeDtypeStruct(x.shape[1:], jnp.float32), x)

    def fn(t, s, ids):
        return cb("first", t["x"]) * 2.0 + cb("rest", s) + cb("ints", ids)

    x = jnp.arange(12.0, dtype=jnp.float32).reshape(3, 4)
    s = jnp.ones((2, 4), jnp.float32)
    ids = jnp.arange(8, dtype=jnp.int32).reshape(2, 4)
    prog = timing.looped(fn, 5)
    # The program's value: the running sum of each call's first output element.
    expect = 5 * (2 * float(x[:, 0].sum()) + float(s[:, 0].sum()) + float(ids[:, 0].sum()))
    assert float(prog({"x": x}, s, ids)) == pytest.approx(expect, rel=1e-5)
    assert runs == {"first": 5, "rest": 5, "ints": 5}
    assert all((v == np.asarray(ids)).all() for v in seen_ints)
    big = jnp.ones((512, 256), jnp.float32)
    text = timing.looped(lambda t, s: jnp.sum(t["x"], 0) * s, 5).lower({"x": big}, 2.0).compile().as_text()
    # Instructions that produce an input-shaped array: only the plumbing of the loop's carry
    # (and at most one copy of the initial carry), never a fusion, scatter or update.
    plumbing = ("parameter(", "get-tuple-element(", "tuple(", "opt-barrier(", "copy(", "bitcast(")
    writes = [
        line.strip()
        for line in text.splitlines()
        if re.match(r"\s*(ROOT )?%\S+ = f32\[512,256\]", line) and not any(p in line for p in plumbing)
    ]
    assert not writes, writes
    copies = [line for line in text.splitlines() if "f32[512,256]" in line and " copy(" in line]
    assert len(copies) <= 1, copies  # the loop's initial carry at most, never one per call


def test_bench_loop_glue_reads_one_element_of_each_output():
    """The timed loop keeps each call whole but reads back one element of each output: a sum of
    every output would read them all once more per call (a grouped matmul's 403 MB weight
    gradient, against a dense matmul's 6 MB). The product below must still be
    computed whole in the loop (the barrier over the outputs keeps XLA from pushing the slice into
    it), and nothing may reduce the whole output."""
    from ejkernel.ops import timing

    big = jnp.arange(512 * 256, dtype=jnp.float32).reshape(512, 256)
    prog = timing.looped(lambda x: (x * 3.0, x[:2] - 1.0), 5)
    assert float(prog(big)) == pytest.approx(5 * (0.0 * 3.0 + (0.0 - 1.0)))
    text = prog.lower(big).compile().as_text()
    whole = [line for line in text.splitlines() if re.match(r"\s*(ROOT )?%\S+ = f32\[512,256\]\S* multiply\(", line)]
    assert whole, "the product is no longer computed whole"
    reads = [line.strip() for line in text.splitlines() if " reduce(" in line and "f32[512,256]" in line]
    assert not reads, reads


def test_bench_timer_falls_back_to_the_average_when_the_slope_is_noise(monkeypatch):
    from ejkernel.ops import timing

    lengths = _fake_loops(monkeypatch, timing)
    times = iter([1.0, 0.9])  # the longer program measured faster: noise, not a negative cost
    monkeypatch.setattr(timing, "time_callable", lambda f, repeats: next(times))
    assert timing.device_ms(lambda x: x, (jnp.ones(3),), 3) == pytest.approx(0.9 / lengths[1])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shape", "1,2,3"], "bad --shape"),
        (["--sq", "0"], "sq, sk must be positive"),
        (["--hk", "3"], "must be a multiple of kv heads"),
        (["--window", "abc"], "bad --window"),
        (["--impl", "nonexistent"], "unknown --impl nonexistent: flash_attention has"),
        (["--repeats", "0"], "expected a positive integer"),
    ],
)
def test_bench_argument_errors_are_usage_errors(capsys, argv, message):
    """Bad arguments end as argparse-style one-liners with exit code 2, never a traceback."""
    with pytest.raises(SystemExit) as e:
        main(["bench", "flash_attention", "--repeats", "1", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["attention", "--varlen", "2"], "bad --varlen 2: attention takes no packed sequences"),
        (["ring_attention", "--varlen", "2"], "bad --varlen 2: ring_attention takes no packed sequences"),
        (["ring_attention", "--devices", "99"], "bad --devices 99: between 1 and the"),
    ],
)
def test_bench_dense_attention_variants_refuse_what_they_cannot_run(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        main(["bench", *argv, "--repeats", "1"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("option", "where", "message"),
    [
        ("--json", "{file}/r.json", "cannot write there"),  # a folder that is a file
        ("--json", "{tmp}", "is a folder"),
        ("--plot", "{file}/sub/r.png", "cannot write there"),
        ("--plot", "{tmp}/r.notaformat", "matplotlib cannot write .notaformat files"),
    ],
)
def test_bench_checks_its_output_paths_before_measuring(tmp_path, capsys, monkeypatch, option, where, message):
    from ejkernel.ops import benchmark

    timed = []  # the timer's errors are caught and reported by bench: record its calls instead

    def timer(*args, **kwargs):
        timed.append(args)
        raise AssertionError("measured before checking the output paths")

    monkeypatch.setattr(benchmark, "device_ms", timer)
    (tmp_path / "file").write_text("a file, not a folder")
    path = where.format(file=tmp_path / "file", tmp=tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["bench", "flash_attention", "--shape", "1,8,8,2,2,16", "--repeats", "1", option, path])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"{option} {path}: {message}" in err and "before measuring" in err and "Traceback" not in err
    assert timed == []


def test_cache_list_and_clear(tmp_path, capsys):
    with policy(cache_dir=tmp_path, autotune=True, autotune_repeats=1):
        q = jnp.asarray(np.random.default_rng(0).standard_normal((1, 19, 2, 8)), jnp.float32)
        ejkernel.flash_attention(q, q, q)
        assert len(PersistentCache()) == 1
        assert main(["cache", "path"]) == 0
        assert str(tmp_path) in capsys.readouterr().out
        assert main(["cache", "list", "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)
        (rec,) = listed.values()
        assert rec["op"] == "flash_attention"
        assert main(["cache", "list"]) == 0
        assert "flash_attention" in capsys.readouterr().out
        assert main(["cache", "clear"]) == 0
        assert "cleared 1" in capsys.readouterr().out
        assert len(PersistentCache()) == 0


@pytest.mark.slow
def test_demo_runs(capsys):
    assert main(["demo"]) == 0
    text = capsys.readouterr().out
    assert "flash_attention causal GQA" in text and "page_attention" in text and "done" in text
