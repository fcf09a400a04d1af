"""Where the cuDNN implementations rank: measured, not guessed.

:data:`TRITON_OVER_CUDNN` holds the Triton flash attention's rate as a fraction of cuDNN's
(``jax.nn.dot_product_attention(implementation="cudnn")``) on one NVIDIA H200, bf16, jax 0.11.2,
forward and forward+backward, on the shapes of the dense attention benchmark, as
``ejkernel bench flash_attention --dtype bfloat16 --causal both`` recorded them in
``benchmarks/results/h200/flash_attention.json`` (the ``ratio_*_tflops`` of the ``triton`` rows;
a test checks the two agree). Only calls cuDNN accepts are listed: the packed (varlen) shape, which
cuDNN declines, is not.

cuDNN is faster on every one of them, both ways, so on an NVIDIA GPU it comes first where it
accepts the call (:data:`PRIORITY` above Triton's); Triton keeps the calls cuDNN declines. With
autotuning on, the executor times every accepting implementation instead, per shape and device.
"""

from __future__ import annotations

import dataclasses

__all__ = ["PRIORITY", "TRITON_OVER_CUDNN", "TRITON_PRIORITY", "Measured"]


@dataclasses.dataclass(frozen=True)
class Measured:
    """One benchmarked shape (bf16, seq_q = seq_k) and Triton's rate over cuDNN's there."""

    batch: int
    seq: int
    heads: int
    kv_heads: int
    head_dim: int
    causal: bool
    fwd: float  # forward
    fwdbwd: float  # forward + backward


TRITON_OVER_CUDNN: tuple[Measured, ...] = (
    Measured(batch=2, seq=8192, heads=16, kv_heads=16, head_dim=128, causal=False, fwd=0.91, fwdbwd=0.73),
    Measured(batch=2, seq=8192, heads=16, kv_heads=16, head_dim=128, causal=True, fwd=0.88, fwdbwd=0.70),
    Measured(batch=4, seq=4096, heads=32, kv_heads=8, head_dim=128, causal=False, fwd=0.94, fwdbwd=0.71),
    Measured(batch=4, seq=4096, heads=32, kv_heads=8, head_dim=128, causal=True, fwd=0.92, fwdbwd=0.63),
    Measured(batch=8, seq=2048, heads=16, kv_heads=16, head_dim=64, causal=False, fwd=0.88, fwdbwd=0.77),
    Measured(batch=8, seq=2048, heads=16, kv_heads=16, head_dim=64, causal=True, fwd=0.86, fwdbwd=0.72),
    Measured(batch=16, seq=1024, heads=16, kv_heads=16, head_dim=128, causal=False, fwd=0.86, fwdbwd=0.72),
    Measured(batch=16, seq=1024, heads=16, kv_heads=16, head_dim=128, causal=True, fwd=0.81, fwdbwd=0.68),
    Measured(batch=1, seq=16384, heads=8, kv_heads=8, head_dim=256, causal=False, fwd=0.42, fwdbwd=0.32),
    Measured(batch=1, seq=16384, heads=8, kv_heads=8, head_dim=256, causal=True, fwd=0.58, fwdbwd=0.36),
)

#: The Triton backend's priority (``ejkernel_triton.PRIORITY``), not imported: this package must not
#: need Triton to register.
TRITON_PRIORITY = 100


def _priority(table: tuple[Measured, ...] = TRITON_OVER_CUDNN) -> int:
    # Above Triton only if cuDNN won everywhere it was measured; below it (still above XLA's 0)
    # otherwise, so that a remeasured table that turns the order round turns the default round too.
    cudnn_wins = all(max(m.fwd, m.fwdbwd) < 1.0 for m in table)
    return TRITON_PRIORITY + 20 if cudnn_wins else TRITON_PRIORITY - 20


PRIORITY = _priority()
