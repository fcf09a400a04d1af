"""Comments say why and point at a lasting record, never at the run that found it.

Every git-tracked text file outside ``benchmarks/results/`` (the records themselves, which may
name their runs) and ``docs/`` is scanned for citations of a past run: the word "call" or "wave"
followed by a number (see :data:`CITATION`). Such a pointer means nothing to a reader once the
run is gone; a comment names the record file and its key instead. Only prose is read:
comments and docstrings of Python (``tokenize``), ``//`` and ``/* */`` comments of C++/CUDA,
``#`` comments of shell, CMake, TOML and YAML, and the whole text of Markdown and other text
files, so code such as ``call(1)`` is never taken for a citation.
"""

from __future__ import annotations

import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXCLUDED = ("benchmarks/results/", "docs/")
# "call"/"wave" and a number, not inside a word ("recall 3") nor a command-line flag ("--calls 3").
CITATION = re.compile(r"(?i)(?<![a-z-])(?:calls?[-_ ]?\d+|wave[-_ ]?\d+)")
C_LIKE = {".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp"}
HASH = {".sh", ".cmake", ".toml", ".yml", ".yaml", ".cfg", ".ini", ".gitignore"}
HASH_NAMES = {"CMakeLists.txt", "Makefile", ".gitignore"}
SKIPPED_BINARY = {".png", ".jpg", ".jpeg", ".gif", ".whl", ".gz", ".zip", ".so", ".pdf"}


def _python_prose(text: str) -> Iterator[tuple[int, str]]:
    """Comments, and strings that are a statement of their own (docstrings), with their lines."""
    starts = {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING}
    prev = None
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
        elif tok.type == tokenize.STRING and (prev is None or prev in starts):
            for i, line in enumerate(tok.string.splitlines()):
                yield tok.start[0] + i, line
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            prev = tok.type


def _c_prose(text: str) -> Iterator[tuple[int, str]]:
    """``//`` and ``/* */`` comments, skipping string and character literals."""
    in_block = False
    for n, line in enumerate(text.splitlines(), 1):
        i, quote, out = 0, None, []
        while i < len(line):
            if in_block:
                end = line.find("*/", i)
                out.append(line[i : len(line) if end < 0 else end])
                if end < 0:
                    break
                in_block, i = False, end + 2
            elif quote:
                if line[i] == "\\":
                    i += 2
                    continue
                if line[i] == quote:
                    quote = None
                i += 1
            elif line[i] in "\"'":
                quote, i = line[i], i + 1
            elif line.startswith("//", i):
                out.append(line[i:])
                break
            elif line.startswith("/*", i):
                in_block, i = True, i + 2
            else:
                i += 1
        if out:
            yield n, " ".join(out)


def _hash_prose(text: str) -> Iterator[tuple[int, str]]:
    """``#`` comments: a ``#`` at the start of a line or after whitespace (not ``$#``, ``${#x}``)."""
    for n, line in enumerate(text.splitlines(), 1):
        m = re.search(r"(?:^|\s)#(.*)", line)
        if m:
            yield n, m.group(1)


def prose(path: str, text: str) -> Iterator[tuple[int, str]]:
    """The lines of ``text`` (the file ``path``) that are prose for a reader, with their numbers."""
    p = Path(path)
    first = text.split("\n", 1)[0]
    if p.suffix in (".py", ".pyi") or (first.startswith("#!") and "python" in first):
        return _python_prose(text)
    if p.suffix in C_LIKE:
        return _c_prose(text)
    if p.suffix in HASH or p.name in HASH_NAMES or first.startswith("#!"):
        return _hash_prose(text)
    return enumerate(text.splitlines(), 1)


def citations(path: str, text: str) -> list[str]:
    """``path:line: text`` for each prose line of ``text`` that cites a call number or a wave."""
    return [f"{path}:{n}: {line.strip()}" for n, line in prose(path, text) if CITATION.search(line)]


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, text=True).stdout
    return [f for f in out.split("\0") if f and not f.startswith(EXCLUDED) and Path(f).suffix not in SKIPPED_BINARY]


def test_no_source_line_cites_a_call_number_or_a_wave():
    found = []
    for path in tracked_files():
        try:
            text = (ROOT / path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary, or deleted in the working tree
        found += citations(path, text)
    assert not found, "comments cite a run instead of a record (name the record file and key):\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("a.py", "x = 1  # tiles from call " + "36\n"),
        ("a.py", 'def f():\n    """Faster (results/h200/wave' + '2/gmm-cuda)."""\n'),
        ("a.cuh", "int x;  // calls " + "15-16 of the sweep\n"),
        ("a.cu", "/* measured in\n   wave " + "2 */\nint y;\n"),
        ("CMakeLists.txt", "set(X 1)  # see env_call" + "20.txt\n"),
        ("a.sh", "#!/usr/bin/env bash\n# wave" + "2 sweep\necho hi\n"),
        ("README.md", "Faster (Call " + "10).\n"),
    ],
)
def test_a_citation_in_prose_is_found(path, text):
    assert citations(path, text), text


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("a.py", "y = call(1)\nz = calls[2]\nmsg = f'call {n}'\n"),
        ("a.py", 'err = "call 3 failed"  # a message, not a comment\n'),
        ("a.cu", 'const char* s = "call 3 // wave 2";\nint n = call(2);\n'),
        ("a.sh", 'n=$#\necho "${#calls}"\n'),
        ("a.py", "# 0.97 waves: a nearly full last wave\n"),
        ("README.md", "Run `trace.py --calls 3`; a recall 2 points higher.\n"),
    ],
)
def test_code_and_other_prose_are_not_citations(path, text):
    assert not citations(path, text), text
