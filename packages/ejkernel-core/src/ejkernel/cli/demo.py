"""``ejkernel demo``: a tour of the API on the best available backend (CPU by default)."""

from __future__ import annotations

import time
from typing import Any


def run() -> int:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from rich.console import Console
    from rich.table import Table

    import ejkernel
    from ejkernel.ops import record_dispatches, time_callable
    from ejkernel.testing import attention_reference, page_attention_reference

    console = Console()
    dev = jax.devices()[0]
    console.rule(f"ejkernel {ejkernel.__version__} on {dev.device_kind} ({jax.default_backend()})")
    for b in ejkernel.backends():
        console.print(f"backend [bold]{b.name}[/bold] ({b.distribution} {b.version}): {b.status} {b.error or ''}")
    rng = np.random.default_rng(0)

    def normal(*shape: int, dtype: Any = jnp.float32) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape), dtype)

    rows = []

    def report(what: str, out: Any, ref: Any, log: list[Any]) -> None:
        err = float(jnp.max(jnp.abs(out.astype(jnp.float32) - ref)))
        d = log[-1] if log else None
        rows.append((what, d.impl if d else "?", d.tier.value if d else "?", f"{err:.2e}"))

    # 1. Causal GQA attention, forward and gradient.
    q, k, v = normal(2, 256, 8, 64), normal(2, 256, 2, 64), normal(2, 256, 2, 64)
    with record_dispatches() as log:
        out = ejkernel.flash_attention(q, k, v, causal=True)
        dq = jax.grad(lambda q: jnp.sum(ejkernel.flash_attention(q, k, v, causal=True) ** 2))(q)
    report("flash_attention causal GQA 8/2 heads", out, attention_reference(q, k, v, causal=True), log)
    dq_ref = jax.grad(lambda q: jnp.sum(attention_reference(q, k, v, causal=True) ** 2))(q)
    report("  its gradient wrt query", dq, dq_ref, log)

    # 2. Packed sequences with segment ids (-1 = padding) and a sliding window.
    seg = np.repeat(np.array([[0, 1, 2, -1]]), [100, 60, 80, 16], axis=1)
    mi = ejkernel.MaskInfo.from_segments(seg).with_causal()
    with record_dispatches() as log:
        out = ejkernel.flash_attention(q[:1], k[:1], v[:1], mask_info=mi, sliding_window=(32, 0))
    report(
        "segments + causal + window (32, 0)",
        out,
        attention_reference(q[:1], k[:1], v[:1], mask_info=mi, sliding_window=(32, 0)),
        log,
    )

    # 3. Varlen: sequences packed along one row, with soft cap and attention sinks.
    cu = jnp.asarray([0, 30, 130, 256], jnp.int32)
    sinks = normal(8)
    with record_dispatches() as log:
        out = ejkernel.flash_attention(
            q[:1], k[:1], v[:1], cum_seqlens_q=cu, causal=True, logits_soft_cap=20.0, softmax_aux=sinks
        )
    ref = attention_reference(
        q[:1], k[:1], v[:1], cum_seqlens_q=cu, causal=True, logits_soft_cap=20.0, softmax_aux=sinks
    )
    report("varlen + soft cap + sinks", out, ref, log)

    # 4. Paged decode.
    kc, vc = normal(96, 16, 2, 64), normal(96, 16, 2, 64)
    tables = jnp.asarray(rng.permutation(96).reshape(4, 24), jnp.int32)
    lens = jnp.asarray([1, 17, 200, 384], jnp.int32)
    qd = normal(4, 8, 64)
    with record_dispatches() as log:
        out = ejkernel.page_attention(qd, kc, vc, lens, tables)
    report("page_attention (ragged contexts)", out, page_attention_reference(qd, kc, vc, lens, tables), log)

    table = Table(title="calls (error = max |ejkernel - float32 reference|)")
    for col in ("call", "implementation", "config from", "error"):
        table.add_column(col)
    for r in rows:
        table.add_row(*r)
    console.print(table)

    # 5. Speed: flash attention against jax.nn.dot_product_attention on the same inputs.
    s = 2048 if jax.default_backend() == "cpu" else 8192
    q, k, v = normal(1, s, 8, 64), normal(1, s, 8, 64), normal(1, s, 8, 64)
    ours = jax.jit(lambda q, k, v: ejkernel.flash_attention(q, k, v))
    peer = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, implementation="xla"))
    t0 = time.perf_counter()
    ms_ours = time_callable(lambda: ours(q, k, v), 5)
    ms_peer = time_callable(lambda: peer(q, k, v), 5)
    console.print(
        f"b=1 h=8 s={s} d=64 float32 forward: ejkernel.flash_attention {ms_ours:.1f} ms, "
        f"jax.nn.dot_product_attention(xla) {ms_peer:.1f} ms ({ms_peer / ms_ours:.2f}x) "
        f"[{time.perf_counter() - t0:.0f}s incl. compile]"
    )

    # 6. Sharded over heads when several devices are present.
    if len(jax.devices()) > 1:
        from jax.sharding import Mesh
        from jax.sharding import PartitionSpec as P

        n = len(jax.devices())
        mesh = Mesh(np.array(jax.devices()), ("tp",))
        qs, ks, vs = normal(1, 128, 2 * n, 32), normal(1, 128, n, 32), normal(1, 128, n, 32)
        spec = P(None, None, "tp", None)
        out = ejkernel.flash_attention(qs, ks, vs, causal=True, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec)
        err = float(jnp.max(jnp.abs(out - attention_reference(qs, ks, vs, causal=True))))
        console.print(f"heads sharded over {n} devices with shard_map: max error {err:.2e}")
    console.rule("done")
    return 0
