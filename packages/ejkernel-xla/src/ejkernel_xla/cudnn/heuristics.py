"""Where the cuDNN implementations rank: measured, not guessed.

:data:`TRITON_OVER_CUDNN` is the Triton flash attention's rate as a fraction of cuDNN's
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

__all__ = ["PRIORITY", "TRITON_OVER_CUDNN", "TRITON_PRIORITY"]

#: ``(batch, seq, heads, kv_heads, head_dim, causal)`` → ``(forward, forward+backward)`` rate of
#: Triton over cuDNN.
TRITON_OVER_CUDNN: dict[tuple[int, int, int, int, int, bool], tuple[float, float]] = {
    (2, 8192, 16, 16, 128, False): (0.94, 0.70),
    (2, 8192, 16, 16, 128, True): (0.89, 0.71),
    (8, 2048, 16, 16, 128, False): (0.86, 0.70),
    (8, 2048, 16, 16, 128, True): (0.82, 0.68),
    (16, 1024, 16, 16, 64, False): (0.69, 0.74),
    (16, 1024, 16, 16, 64, True): (0.69, 0.72),
    (4, 4096, 32, 8, 128, False): (0.90, 0.71),
    (4, 4096, 32, 8, 128, True): (0.88, 0.63),
}

#: The Triton backend's priority (``ejkernel_triton.PRIORITY``), not imported: this package must not
#: need Triton to register.
TRITON_PRIORITY = 100


def _priority() -> int:
    # Above Triton only if cuDNN won everywhere it was measured; below it (still above XLA's 0)
    # otherwise, so that a remeasured table that turns the order round turns the default round too.
    cudnn_wins = all(max(rates) < 1.0 for rates in TRITON_OVER_CUDNN.values())
    return TRITON_PRIORITY + 20 if cudnn_wins else TRITON_PRIORITY - 20


PRIORITY = _priority()
