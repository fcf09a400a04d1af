"""``import ejkernel`` leaves the earlier releases' API (``ejkernel.compat``) unloaded; using one of
its names loads it.

Each check runs in a fresh interpreter: the test session itself has long since loaded the package.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ejkernel import _compat_loader


def run_python(code: str, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run(
        [sys.executable, *flags, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def compat_modules_after(code: str) -> list[str]:
    """The ``ejkernel.compat*`` modules loaded after running ``code`` (which imports ejkernel)."""
    probe = (
        textwrap.dedent(code)
        + "\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith('ejkernel.compat'))))\n"
    )
    proc = run_python(probe)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_and_a_plain_call_leave_compat_unloaded():
    code = """
    import numpy as np
    import jax, jax.numpy as jnp
    import ejkernel
    from ejkernel.testing import attention_reference

    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((2, 24, 2, 16)), jnp.float32) for _ in range(3))
    out = ejkernel.flash_attention(q, k, v, causal=True)
    ref = jax.nn.dot_product_attention(q, k, v, is_causal=True)
    assert float(jnp.abs(out - ref).max()) < 1e-4, float(jnp.abs(out - ref).max())
    seg = jnp.asarray(rng.integers(0, 2, (2, 24)), jnp.int32)
    mi = ejkernel.MaskInfo.from_segments(seg).with_causal()
    out = ejkernel.flash_attention(q, k, v, mask_info=mi)
    assert out.shape == q.shape and bool(jnp.isfinite(out).all())
    lens = jnp.array([24, 17], jnp.int32)  # per-example lengths: padding segments built into the MaskInfo
    out = ejkernel.scaled_dot_product_attention(q, k, v, None, lens, lens, causal=True)
    ref = jax.nn.dot_product_attention(q, k, v, query_seq_lengths=lens, key_value_seq_lengths=lens, is_causal=True)
    assert float(jnp.abs(out - ref).max()) < 1e-4, float(jnp.abs(out - ref).max())
    """
    assert compat_modules_after(code) == []


def test_importtime_lists_no_compat_module():
    proc = run_python("import ejkernel", "-X", "importtime")
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "ejkernel" in imported and "ejkernel.ops" in imported
    assert [m for m in imported if m.startswith("ejkernel.compat")] == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "code",
    [
        "import ejkernel\nejkernel.ops.Kernel",
        "from ejkernel.ops import Tuner",
        "import ejkernel\nassert ejkernel.MaskInfo.from_segments([[0, 0, 1]]).q_len == 3",
        "import ejkernel\nejkernel.MaskInfo.create_chunked_attention_mask(2, 4)",
        "import ejkernel\nassert ejkernel.GLAttentionConfig(block_q=64) == ejkernel.GLAttentionConfig()",
        "import ejkernel.kernels._xla.page_attention",
        "import ejkernel.ops.compat",
        "import ejkernel.ops.utils.datacarrier",
        "import ejkernel.modules.operations",
    ],
    ids=[
        "ops-attr",
        "ops-import",
        "maskinfo-attr",
        "maskinfo-static",
        "config-field",
        "kernels",
        "ops-compat",
        "utils",
        "operations",
    ],
)
def test_an_earlier_name_loads_compat(code):
    assert "ejkernel.compat" in compat_modules_after(code)


def test_the_core_lists_the_names_compat_defines():
    import ejkernel.compat
    from ejkernel.compat import mask_info, ops

    assert ops._MAPPED | ops.REFUSED.keys() == _compat_loader.OPS_NAMES
    assert set(ejkernel.ops.__all__) >= ops._MAPPED
    earlier = {n for n in vars(mask_info.EarlierMaskInfo) if not n.startswith("_")}
    assert earlier == _compat_loader.MASK_INFO_NAMES
    for name in earlier:  # installed: the placeholders are gone
        assert not isinstance(vars(ejkernel.MaskInfo)[name], _compat_loader.Deferred), name
