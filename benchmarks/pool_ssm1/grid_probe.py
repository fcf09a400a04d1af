"""Grid order, cache policy and accumulator of the Triton ``mean_pooling`` forward, probed on a GPU.

    python3 benchmarks/pool_ssm1/grid_probe.py out.jsonl

A copy of ``ejkernel_triton.mean_pooling``'s forward kernel (partial sums only, no combine
pass) with three switches: ``D_FAST`` (a one-axis grid, the column blocks of an item fastest: what
the library's kernel does since this probe; 0 = items fastest, the kernel before), ``EVICT``
(``evict_first`` loads) and ``ACC1D`` (a per-step row reduction instead of a 2-D accumulator);
for several tiles and rows per program, at (262144, 4096) bf16 in 64 packed sequences, against a
device copy and XLA's own ``jnp.sum`` (the read ceiling in practice). Measured on an H100
(2026-11-25, ``results/h200/wave2/barrier-clock/``): items fastest 0.824 of the copy, column blocks
fastest 0.885; ``evict_first`` within 1 % of that, the 1-D accumulator worse (0.69-0.75);
``jnp.sum`` 1.05.
"""

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
import triton
import triton.language as tl

import ejkernel
from ejkernel.ops.mean_pooling.plan import make_plan
from ejkernel.ops.timing import device_ms, measure_copy_gbps
from ejkernel_triton._launch import launch


@triton.jit
def k_var(
    x_ptr,
    item_seq_ptr,
    item_lo_ptr,
    item_hi_ptr,
    num_seqs,
    hidden,
    n_cols,
    part_ptr,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
    D_FAST: tl.constexpr,
    EVICT: tl.constexpr,
    ACC1D: tl.constexpr,
):
    if D_FAST:
        pid = tl.program_id(0)
        i_item = pid // n_cols
        i_d = pid % n_cols
    else:
        i_item = tl.program_id(0)
        i_d = tl.program_id(1)
    seq = tl.load(item_seq_ptr + i_item)
    lo = tl.load(item_lo_ptr + i_item)
    hi = tl.load(item_hi_ptr + i_item)
    hi = tl.where(seq < num_seqs, hi, lo)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < hidden
    if ACC1D:
        acc1 = tl.zeros([BLOCK_D], dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_T, BLOCK_D], dtype=tl.float32)
    for t0 in range(lo, hi, BLOCK_T):
        o_t = t0 + tl.arange(0, BLOCK_T)
        m_t = o_t < hi
        p_x = x_ptr + o_t.to(tl.int64)[:, None] * hidden + o_d[None, :]
        if EVICT:
            b_x = tl.load(p_x, mask=m_t[:, None] & m_d[None, :], other=0.0, eviction_policy="evict_first")
        else:
            b_x = tl.load(p_x, mask=m_t[:, None] & m_d[None, :], other=0.0)
        if ACC1D:
            acc1 += tl.sum(b_x.to(tl.float32), axis=0)
        else:
            acc += b_x.to(tl.float32)
    if ACC1D:
        tl.store(part_ptr + i_item.to(tl.int64) * hidden + o_d, acc1, mask=m_d)
    else:
        tl.store(part_ptr + i_item.to(tl.int64) * hidden + o_d, tl.sum(acc, axis=0), mask=m_d)


def main(out_path):
    tokens, hidden = 262144, 4096
    x = jax.random.normal(jax.random.key(0), (tokens, hidden), jnp.bfloat16)
    rng = np.random.default_rng(0)
    cu = np.concatenate([[0], np.sort(rng.choice(np.arange(1, tokens), 63, replace=False)), [tokens]])
    cu = jnp.asarray(cu, jnp.int32)
    nbytes = x.nbytes
    peak = measure_copy_gbps(min(2**31, 2 * x.nbytes), 5)

    def rec(name, ms):
        r = dict(name=name, ms=ms, gbps=nbytes / ms / 1e6, of_copy=nbytes / ms / 1e6 / peak, copy=peak)
        print(json.dumps(r), flush=True)
        with open(out_path, "a") as f:
            f.write(json.dumps(r) + "\n")

    rec("xla jnp.sum(x,0) f32 acc", device_ms(lambda x: jnp.sum(x, 0, dtype=jnp.float32), (x,), 5))
    rec(
        "xla segment via reshape [64,4096,4096].sum(1)",
        device_ms(lambda x: jnp.sum(x.reshape(64, -1, hidden), 1, dtype=jnp.float32), (x,), 5),
    )
    rec("ejkernel heuristic", device_ms(lambda x, cu: ejkernel.mean_pooling(x, cu, platform="triton"), (x, cu), 5))
    for bt, bd, split, w, st in [
        (32, 256, 1024, 4, 3),
        (32, 256, 512, 4, 3),
        (32, 512, 1024, 8, 3),
        (64, 256, 1024, 8, 3),
        (16, 512, 1024, 4, 4),
        (32, 1024, 1024, 8, 3),
        (32, 256, 256, 4, 3),
    ]:
        plan = make_plan(cu, tokens, split)
        items = plan.item_seq.shape[0]
        cols = hidden // bd
        for d_fast in (0, 1):
            for evict in (0, 1):
                for acc1d in (0, 1):
                    if (bt, bd, split) != (32, 256, 1024) and (acc1d or (not d_fast and evict)):
                        continue

                    def fn(
                        x,
                        plan=plan,
                        items=items,
                        cols=cols,
                        d_fast=d_fast,
                        evict=evict,
                        acc1d=acc1d,
                        bt=bt,
                        bd=bd,
                        w=w,
                        st=st,
                    ):
                        (part,) = launch(
                            k_var,
                            x,
                            plan.item_seq,
                            plan.item_lo,
                            plan.item_hi,
                            64,
                            hidden,
                            cols,
                            out_shape=[jax.ShapeDtypeStruct((items, hidden), jnp.float32)],
                            grid=(items * cols,) if d_fast else (items, cols),
                            num_warps=w,
                            num_stages=st,
                            name="pool_var",
                            BLOCK_T=bt,
                            BLOCK_D=bd,
                            D_FAST=d_fast,
                            EVICT=evict,
                            ACC1D=acc1d,
                        )
                        return part

                    try:
                        rec(
                            f"bt{bt} bd{bd} split{split} w{w} s{st} dfast{d_fast} evict{evict} acc1d{acc1d}",
                            device_ms(fn, (x,), 5),
                        )
                    except Exception as e:
                        print("FAIL", bt, bd, split, d_fast, evict, acc1d, type(e).__name__, str(e)[:200], flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
