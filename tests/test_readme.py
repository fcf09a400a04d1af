"""Every ``python`` block of README.md, of the package READMEs and of the migration page runs, so a snippet cannot rot.

The blocks of one README run in order in one fresh interpreter (later blocks may use what earlier
ones defined, as a reader would), on 8 simulated CPU devices for the ones that need a mesh.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
READMES = [ROOT / "README.md", *sorted((ROOT / "packages").glob("*/README.md")), ROOT / "docs/pages/migrating.md"]
FENCE = re.compile(r"^( *)```python\n(.*?)^\1```", re.S | re.M)


def blocks(path: Path) -> list[str]:
    return [textwrap.dedent(m.group(2)) for m in FENCE.finditer(path.read_text())]


def test_the_fence_pattern_finds_the_blocks():
    assert len(blocks(ROOT / "README.md")) >= 4
    assert blocks(ROOT / "packages/ejkernel-core/README.md"), "the indented 'Adding an op' block"


@pytest.mark.slow
@pytest.mark.parametrize("readme", [p for p in READMES if blocks(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_readme_python_blocks_run(readme, tmp_path):
    if "pallas" in readme.parent.name:
        pytest.importorskip("ejkernel_pallas")
    script = "\n\n".join(f"# --- block {i}\n{b}" for i, b in enumerate(blocks(readme)))
    (tmp_path / "readme.py").write_text(script)
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
        "JAX_PLATFORMS": "cpu",
        "EJKERNEL_PERSISTENT_CACHE": "0",
    }
    r = subprocess.run(
        [sys.executable, str(tmp_path / "readme.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, f"{readme.name} blocks failed:\n{r.stderr[-4000:]}"
