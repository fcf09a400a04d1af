"""Puts CUTLASS's C++ headers where CMake can find them (the grouped GEMM's sm_90a kernels).

    python fetch_cutlass.py DEST

prints the folder holding ``include/cutlass/cutlass.h`` and ``util/include/cutlass/util``. In order:
``$EJKERNEL_CUTLASS_DIR`` (a CUTLASS checkout or an earlier DEST), DEST when already filled, or the
``nvidia-cutlass`` wheel (only its headers are used): ``$EJKERNEL_CUTLASS_WHEEL`` (a file, for
offline machines) or ``pip download`` of the pinned version, checked against its sha256.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

VERSION = "4.2.0.0"
WHEEL = f"nvidia_cutlass-{VERSION}-py3-none-any.whl"
SHA256 = "f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6"
PREFIXES = {  # wheel folder -> DEST folder
    "cutlass_library/source/include/": "include/",
    "cutlass_library/source/tools/util/include/": "util/include/",
}


def _complete(root: pathlib.Path) -> bool:
    return (root / "include/cutlass/cutlass.h").is_file() and (root / "util/include/cutlass/util").is_dir()


def _download(tmp: pathlib.Path) -> pathlib.Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(tmp)]
    subprocess.run([*cmd, f"nvidia-cutlass=={VERSION}"], check=True, stdout=sys.stderr)
    return tmp / WHEEL


def _extract(wheel: pathlib.Path, dest: pathlib.Path) -> None:
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != SHA256:
        raise SystemExit(f"fetch_cutlass: {wheel} has sha256 {digest}, expected {SHA256} (nvidia-cutlass {VERSION})")
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            for src, dst in PREFIXES.items():
                if name.startswith(src) and not name.endswith("/"):
                    target = dest / dst / name[len(src) :]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(z.read(name))


def main() -> None:
    dest = pathlib.Path(sys.argv[1]).resolve()
    given = os.environ.get("EJKERNEL_CUTLASS_DIR")
    if given:
        root = pathlib.Path(given)
        if (root / "include/cutlass/cutlass.h").is_file() and (root / "tools/util/include").is_dir():
            print(root)  # a CUTLASS checkout: CMake adds tools/util/include
            return
        if not _complete(root):
            raise SystemExit(f"fetch_cutlass: EJKERNEL_CUTLASS_DIR={given} holds no CUTLASS headers")
        print(root)
        return
    if not _complete(dest):
        wheel_env = os.environ.get("EJKERNEL_CUTLASS_WHEEL")
        with tempfile.TemporaryDirectory() as tmp:
            wheel = pathlib.Path(wheel_env) if wheel_env else _download(pathlib.Path(tmp))
            _extract(wheel, dest)
    print(dest)


if __name__ == "__main__":
    main()
