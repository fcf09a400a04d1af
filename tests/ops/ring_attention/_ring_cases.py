"""Ring attention cases shared by the single-process tests and the multi-process worker.

Each case runs ``ring_attention`` under ``mesh=`` on global arrays in the natural sequence order
(permuted in and out of the zig-zag layout inside the jitted function) and checks the output and
the gradients of a random linear loss against the float32 reference on the whole sequence. It
works on any mesh, also one spanning several processes (results are gathered to every process).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import ejkernel
from ejkernel.testing import attention_reference
from ejkernel.testing import conformance as C

# float32 against the float32 reference: the ring only reorders the softmax sums.
ATOL_FWD = RTOL_FWD = 2e-5
ATOL_GRAD = RTOL_GRAD = 1e-4


@dataclasses.dataclass(frozen=True)
class RingCase:
    name: str
    causal: bool = False
    layout: str = "contiguous"
    window: tuple[int, int] | None = None
    heads: int = 4
    kv_heads: int = 2
    segments: bool = False
    soft_cap: float | None = None
    scale: float | None = None
    batch: int = 2
    seq_per_device: int = 8
    head_dim: int = 16
    sinks: int = 0  # earlier releases' attention_sink_size: the first keys, exempt from the window

    def options(self) -> dict[str, Any]:
        out = {
            "causal": self.causal,
            "sliding_window": self.window,
            "logits_soft_cap": self.soft_cap,
            "softmax_scale": self.scale,
        }
        if self.sinks:
            out["attention_sink_size"] = self.sinks
        return out


CASES = [
    RingCase("full-mha", heads=4, kv_heads=4),
    RingCase("full-gqa-softcap-scale", soft_cap=3.0, scale=0.3),
    RingCase("causal-contiguous-gqa", causal=True),
    RingCase("causal-zigzag-mqa", causal=True, layout="zigzag", kv_heads=1),
    RingCase("window-contiguous", window=(5, 3)),
    RingCase("causal-window-zigzag", causal=True, layout="zigzag", window=(9, 0)),
    RingCase("segments-causal-zigzag", causal=True, layout="zigzag", segments=True),
    RingCase("segments-full-contiguous", segments=True),
    # Sinks inside the first chunk, exactly one device's keys, and two zig-zag chunks plus part of a third.
    RingCase("window-sinks-causal-contiguous", causal=True, window=(5, 0), sinks=3),
    RingCase("window-sinks-one-shard", window=(4, 2), sinks=8, kv_heads=1),
    RingCase("window-sinks-zigzag-segments", causal=True, layout="zigzag", window=(6, 2), sinks=11, segments=True),
]
CASES_BY_NAME = {c.name: c for c in CASES}


def segment_ids(batch: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Packed sequences of random lengths that cross shard boundaries, then padding (-1)."""
    rows = []
    for _ in range(batch):
        cuts = np.sort(rng.choice(np.arange(1, n - 2), size=3, replace=False))
        row = np.searchsorted(cuts, np.arange(n), side="right").astype(np.int32)
        row[n - 3 :] = -1
        rows.append(row)
    return np.stack(rows)


def make_inputs(case: RingCase, num_devices: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = case.seq_per_device * num_devices
    b, h, hk, d = case.batch, case.heads, case.kv_heads, case.head_dim
    out = {
        "q": rng.standard_normal((b, n, h, d)).astype(np.float32),
        "k": rng.standard_normal((b, n, hk, d)).astype(np.float32),
        "v": rng.standard_normal((b, n, hk, d)).astype(np.float32),
        "w": rng.standard_normal((b, n, h, d)).astype(np.float32),
    }
    if case.segments:
        out["seg"] = segment_ids(b, n, rng)
    return out


def global_array(x: np.ndarray, mesh: Any, spec: Any) -> jax.Array:
    """``x`` (the same on every process) as an array sharded over ``mesh``."""
    return jax.make_array_from_callback(x.shape, NamedSharding(mesh, spec), lambda idx: x[idx])


def to_host(x: jax.Array) -> np.ndarray:
    if x.is_fully_addressable:
        return np.asarray(x)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def ring_value_and_grads(
    case: RingCase, inputs: dict[str, np.ndarray], mesh: Any, axis: str = "sp", batch_axis: str | None = None
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Output and (dq, dk, dv) of ``sum(ring_attention(...) * w)``, in the natural order."""
    num = int(mesh.shape[axis])
    spec = P(batch_axis, axis, None, None)
    zig = case.layout == "zigzag"

    def to_layout(x: Any, ax: int = 1) -> Any:
        return ejkernel.zigzag_permute(x, num, axis=ax) if zig else x

    def from_layout(x: Any) -> Any:
        return ejkernel.zigzag_unpermute(x, num, axis=1) if zig else x

    def loss(q: Any, k: Any, v: Any, w: Any, seg: Any) -> Any:
        mask_info = None if seg is None else ejkernel.MaskInfo.from_segments(to_layout(seg))
        out = ejkernel.ring_attention(
            to_layout(q),
            to_layout(k),
            to_layout(v),
            axis_name=axis,
            mask_info=mask_info,
            layout=case.layout,
            mesh=mesh,
            in_specs=(spec, spec, spec),
            **case.options(),
        )
        out = from_layout(out)
        return jnp.sum(out * w), out

    arrays = [global_array(inputs[n], mesh, spec) for n in ("q", "k", "v", "w")]
    seg = inputs.get("seg")
    seg_arr = None if seg is None else global_array(seg, mesh, P(batch_axis, axis))
    fn = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))
    (_, out), grads = fn(*arrays, seg_arr)
    return to_host(out), tuple(to_host(g) for g in grads)


def reference_value_and_grads(
    case: RingCase, inputs: dict[str, np.ndarray], precision: Any = jax.lax.Precision.HIGHEST
) -> tuple[Any, tuple[Any, ...]]:
    seg = inputs.get("seg")
    mask_info = None if seg is None else ejkernel.MaskInfo.from_segments(jnp.asarray(seg))
    w = jnp.asarray(inputs["w"])
    options = case.options()
    if options.pop("attention_sink_size", 0):
        # Sinks: key j is in the window of query i, or one of the first `sinks` keys (a pairwise mask).
        n, (left, right) = inputs["q"].shape[1], options.pop("sliding_window")
        i, j = np.arange(n)[:, None], np.arange(n)[None, :]
        pair = ((j >= i - left) & (j <= i + right)) | (j < case.sinks)
        if mask_info is not None:
            pair = pair & np.asarray(mask_info.attention_mask)
        mask_info = ejkernel.MaskInfo.from_attention_mask(np.broadcast_to(pair, (case.batch, 1, n, n)))

    def loss(q: Any, k: Any, v: Any) -> Any:
        out = attention_reference(q, k, v, mask_info=mask_info, precision=precision, **options)
        return jnp.sum(out * w), out

    (_, out), grads = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(
        *(jnp.asarray(inputs[n]) for n in ("q", "k", "v"))
    )
    return np.asarray(out), tuple(np.asarray(g) for g in grads)


def check_case(case: RingCase, mesh: Any, axis: str = "sp", batch_axis: str | None = None, seed: int = 0) -> None:
    """Raise ``AssertionError`` unless the ring equals the reference, forward and gradients."""
    inputs = make_inputs(case, int(mesh.shape[axis]), seed)
    out, grads = ring_value_and_grads(case, inputs, mesh, axis, batch_axis)
    ref_out, ref_grads = reference_value_and_grads(case, inputs)
    # FlashAttention's rule, as in the conformance suite: at most 2x the error of the reference
    # at the default matmul precision (TF32 on GPUs; the same as HIGHEST on CPU) plus a floor.
    low_out, low_grads = reference_value_and_grads(case, inputs, C.LOW_PRECISION)
    C.assert_close(f"{case.name}: output", out, ref_out, low_out, "float32", C.ATOL)
    for name, g, r, lo in zip(("dq", "dk", "dv"), grads, ref_grads, low_grads, strict=True):
        C.assert_close(f"{case.name}: {name}", g, r, lo, "float32", C.GRAD_ATOL)
    if case.segments:
        padding = inputs["seg"] < 0
        assert np.all(out[padding] == 0), f"{case.name}: padding tokens must give zeros"
