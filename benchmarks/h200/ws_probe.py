"""Probe: a FlashAttention forward in Triton 3.6 with device-side TMA descriptors and Hopper warp
specialization (``tl.range(..., warp_specialize=True)``), launched by Triton's own launcher from
PyTorch (which allocates the global scratch that device-side descriptors need), timed next to
PyTorch's cuDNN attention. It asks whether that kernel shape is worth bringing to JAX, where
jax-triton 0.3.1 passes no scratch buffer. Non-causal, BSHD, bf16.

    python benchmarks/h200/ws_probe.py --configs 128x64x4x2,128x64x4x3 --out ws_probe.json
"""

from __future__ import annotations

import argparse
import json

import triton
import triton.language as tl


@triton.jit
def _fwd_ws(Q, K, V, Out, sm_scale, seq, rows, H: tl.constexpr, D: tl.constexpr, BM: tl.constexpr,
            BN: tl.constexpr, WS: tl.constexpr):  # fmt: skip
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    # [b * s, h * d] views of BSHD tensors: one (row block, head) tile per descriptor load.
    dq = tl.make_tensor_descriptor(Q, shape=[rows, H * D], strides=[H * D, 1], block_shape=[BM, D])
    dk = tl.make_tensor_descriptor(K, shape=[rows, H * D], strides=[H * D, 1], block_shape=[BN, D])
    dv = tl.make_tensor_descriptor(V, shape=[rows, H * D], strides=[H * D, 1], block_shape=[BN, D])
    do = tl.make_tensor_descriptor(Out, shape=[rows, H * D], strides=[H * D, 1], block_shape=[BM, D])
    row0 = (bh // H) * seq
    col = (bh % H) * D
    q = dq.load([row0 + pid_m * BM, col])
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    for start_n in tl.range(0, seq, BN, warp_specialize=WS):
        k = dk.load([row0 + start_n, col])
        qk = tl.dot(q, k.T)
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = dv.load([row0 + start_n, col])
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
    do.store([row0 + pid_m * BM, col], (acc / l_i[:, None]).to(Out.dtype.element_ty))


@triton.jit
def _fwd_ws_out_last(Q, K, V, sm_scale, seq, rows, Out, H: tl.constexpr, D: tl.constexpr, BM: tl.constexpr,
                     BN: tl.constexpr, WS: tl.constexpr):  # fmt: skip
    """``_fwd_ws`` with the output last, as ``ejkernel_triton._launch`` passes outputs
    (``ws_launch_probe.py``)."""
    _fwd_ws(Q, K, V, Out, sm_scale, seq, rows, H, D, BM, BN, WS)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="2,8192,16,128", help="B,S,H,D")
    ap.add_argument("--configs", default="128x64x4x2,128x64x4x3,128x128x4x2")
    ap.add_argument("--out")
    a = ap.parse_args()
    import torch

    b, s, h, d = (int(x) for x in a.shape.split(","))
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    flops = 4.0 * b * h * s * s * d
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            ).transpose(1, 2)

    ref = cudnn().float()
    ms_ref = triton.testing.do_bench(cudnn, warmup=100, rep=500, return_mode="median")
    records = [{"impl": "torch sdpa cudnn", "ms": ms_ref, "tflops": flops / ms_ref / 1e9}]
    print(f"cudnn (torch): {ms_ref:.4f} ms {flops / ms_ref / 1e9:.0f} TFLOP/s", flush=True)
    for text in a.configs.split(","):
        bm, bn, warps, stages = (int(x) for x in text.split("x"))
        for ws in (True, False):
            out = torch.empty_like(q)

            def run(bm=bm, bn=bn, warps=warps, stages=stages, ws=ws, out=out):
                _fwd_ws[(s // bm, b * h)](q, k, v, out, d**-0.5, s, b * s, H=h, D=d, BM=bm, BN=bn, WS=ws,
                                          num_warps=warps, num_stages=stages)  # fmt: skip
                return out

            rec = {"impl": "triton-tma", "config": text, "warp_specialize": ws}
            try:
                err = float((run().float() - ref).abs().max())
                ms = triton.testing.do_bench(run, warmup=100, rep=500, return_mode="median")
                rec.update(ms=ms, tflops=flops / ms / 1e9, x_cudnn=ms_ref / ms, max_abs_diff=err)
                print(f"  {text} ws={ws}: {ms:.4f} ms {rec['tflops']:.0f} TFLOP/s {ms_ref / ms:.3f}x cudnn "
                      f"(max |diff| {err:.2e})", flush=True)  # fmt: skip
            except Exception as e:  # a config that does not compile or launch is recorded
                rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                print(f"  {text} ws={ws}: {rec['error']}", flush=True)
            records.append(rec)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"args": vars(a), "device": torch.cuda.get_device_name(), "records": records}, fh, indent=1)


if __name__ == "__main__":
    main()
