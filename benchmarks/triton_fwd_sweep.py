"""Forward config sweep of the Triton flash attention on one shape, next to cuDNN in the same run:
tile configs (BLOCK_M x BLOCK_N x warps x stages). Device time per call
(``ejkernel.ops.timing.device_ms``, the clock of ``ejkernel bench``).

    python benchmarks/triton_fwd_sweep.py --shape 2,8192,16,128 --configs 128x64x8x3,128x128x8x2 --out sweep.json
"""

from __future__ import annotations

import argparse
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

import ejkernel
from ejkernel.ops.timing import device_ms


def _timed(fn, args, repeats: int) -> float | None:
    """Device ms per call of ``fn(*args)``, or None (reported) when it fails to compile or run."""
    try:
        return device_ms(fn, args, repeats)
    except Exception as e:
        print(f"  timing failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}", file=sys.stderr)
        return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="2,8192,16,128", help="B,S,H,D")
    ap.add_argument("--configs", default="128x64x8x3,128x128x8x2,128x128x8x3,128x64x8x4,128x64x8x2")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out")
    a = ap.parse_args()
    b, s, h, d = (int(x) for x in a.shape.split(","))
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((b, s, h, d)), jnp.bfloat16) for _ in range(3))
    records = []
    for causal in (False, True):
        flops = 4.0 * b * h * s * s * d / (2 if causal else 1)

        def peer(q, k, v, causal=causal):
            return jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation="cudnn")

        ms_peer = _timed(peer, (q, k, v), a.repeats)
        print(f"causal={causal} cudnn: {ms_peer:.4f} ms {flops / ms_peer / 1e9:.0f} TFLOP/s", flush=True)
        records.append({"causal": causal, "impl": "cudnn", "ms": ms_peer})
        for text in a.configs.split(","):
            bm, bn, warps, stages = (int(x) for x in text.split("x"))
            cfg = ejkernel.FlashAttentionConfig(fwd_params=ejkernel.FwdParams(bm, bn, warps, stages))

            def fn(q, k, v, cfg=cfg, causal=causal):
                return ejkernel.flash_attention(q, k, v, causal=causal, platform="triton", cfg=cfg)

            ms = _timed(fn, (q, k, v), a.repeats)
            rec = {"causal": causal, "impl": "triton", "config": text, "ms": ms}
            if ms:
                rec.update(tflops=flops / ms / 1e9, x_cudnn=ms_peer / ms)
                print(f"  {text:>12}: {ms:.4f} ms {rec['tflops']:.0f} TFLOP/s {rec['x_cudnn']:.3f}x cudnn", flush=True)
            records.append(rec)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"args": vars(a), "records": records}, fh, indent=1)


if __name__ == "__main__":
    main()
