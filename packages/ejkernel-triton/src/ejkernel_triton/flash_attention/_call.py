"""Host side of the Triton flash attention: strides, grids, schedules, custom VJP and VMAP (the
static launch spec is ``_spec.py``).

``flash_attention(args, fwd, bwd)`` is differentiable (``jax.custom_vjp``; the bias gradient is
computed only when the bias is differentiated) and batchable (``jax.custom_batching.custom_vmap``
folds a vmapped axis into the batch, or maps sequentially when it cannot).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ejkernel.ops import BwdParams, FwdParams
from ejkernel.ops.families.attention import AttentionArgs
from ejkernel.ops.families.attention_math import key_bounds, output_rowsum, softmax_aux_grad

from .._grid import folded
from .._launch import launch, launch_compiled
from ._bwd import flash_dkdv_kernel, flash_dq_kernel
from ._fwd import flash_fwd_kernel, flash_fwd_tma_kernel, flash_fwd_tma_ws_kernel
from ._spec import F32, Spec, _cdiv, make_spec


def _dense_strides(shape: tuple[int, ...]) -> list[int]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= int(n)
    return strides[::-1]


def _bias_strides(shape: tuple[int, ...] | None) -> list[int]:
    """Strides of the canonical 4-D bias, 0 along broadcast (size-1) dims."""
    if shape is None:
        return [0, 0, 0, 0]
    return [0 if n == 1 else s for n, s in zip(shape, _dense_strides(shape), strict=True)]


def _strides(spec: Spec, out_name: str) -> dict[str, int]:
    """Compile-time strides (elements) of Q, K, V, the output-like tensor, bias and segment ids."""
    b, sq, sk, h, hk = spec.batch, spec.seq_q, spec.seq_k, spec.num_heads, spec.num_kv_heads
    named = {
        "q": _dense_strides((b, sq, h, spec.head_dim))[:3],
        "k": _dense_strides((b, sk, hk, spec.head_dim))[:3],
        "v": _dense_strides((b, sk, hk, spec.head_dim_v))[:3],
        out_name: _dense_strides((b, sq, h, spec.head_dim_v))[:3],
    }
    out = {f"stride_{n}{axis}": st for n, sts in named.items() for axis, st in zip("bsh", sts, strict=True)}
    out.update(zip(("stride_bb", "stride_bh", "stride_bq", "stride_bk"), _bias_strides(spec.bias_shape), strict=True))
    out.update(stride_qseg=sq, stride_kseg=sk)
    return out


def _dummy(dtype: Any = jnp.int32) -> jax.Array:
    return jnp.zeros((1,), dtype)


def _common_inputs(spec: Spec, q, k, v, bias, q_seg, kv_seg, row_lo, row_hi, seed) -> list[Any]:
    return [
        q,
        k,
        v,
        bias if bias is not None else _dummy(F32),
        q_seg if q_seg is not None else _dummy(),
        kv_seg if kv_seg is not None else _dummy(),
        row_lo if spec.varlen else _dummy(),
        row_hi if spec.varlen else _dummy(),
    ]


def _warp_specialized(spec: Spec) -> bool:
    """The TMA forward's warp-specialized kernel serves non-causal calls whose lengths are
    non-zero multiples of the tiles, with 4 warps and at most 2 stages (Triton 3.6 produced NaNs
    with 3), and a 16-bit output (its descriptor store of a float32 tile would not fit in shared
    memory)."""
    block_m, block_n, warps, stages = spec.fwd
    aligned = spec.seq_k > 0 and spec.seq_q % block_m == 0 and spec.seq_k % block_n == 0
    return not spec.causal and not spec.f32_out and aligned and warps == 4 and stages <= 2


def forward(spec: Spec, q, k, v, bias, aux, q_seg, kv_seg, row_lo, row_hi, seed) -> tuple[jax.Array, jax.Array]:
    """Output ``[b, sq, h, dv]`` and log-sum-exp ``[b, h, sq]`` (float32, -inf for empty rows)."""
    b, sq, sk, h = spec.batch, spec.seq_q, spec.seq_k, spec.num_heads
    block_m, block_n, warps, stages = spec.fwd
    out_shape = [
        jax.ShapeDtypeStruct((b, sq, h, spec.head_dim_v), spec.out_dtype(q)),
        jax.ShapeDtypeStruct((b, h, sq), F32),
    ]
    if spec.tma:
        specialized = _warp_specialized(spec)
        if not specialized and warps == 4 and block_n > 64:
            # 128-key tiles need the specialized kernel's two consumer warpgroups; one warpgroup
            # spills (H200: 271 against 489 TFLOP/s at 64-key tiles), e.g. for the float32 output
            # of the log-sum-exp protocol, which the specialized kernel does not write.
            block_n = 64
        masks = {} if specialized else dict(IS_CAUSAL=spec.causal, MASK_TAIL=spec.causal or sk % block_n != 0)
        out, lse = launch_compiled(
            flash_fwd_tma_ws_kernel if specialized else flash_fwd_tma_kernel,
            q, k, v, np.float32(spec.scale), b, sq, sk, h, spec.num_kv_heads, spec.groups,
            out_shape=out_shape,
            grid=folded(_cdiv(sq, block_m), b * h),
            num_warps=warps,
            num_stages=stages,
            name="ejkernel_flash_fwd_tma_ws" if specialized else "ejkernel_flash_fwd_tma",
            HEAD_DIM=spec.head_dim,
            BLOCK_M=block_m,
            BLOCK_N=block_n,
            **masks,
        )  # fmt: skip
        return out, lse
    args = [
        *_common_inputs(spec, q, k, v, bias, q_seg, kv_seg, row_lo, row_hi, seed),
        aux.astype(F32) if aux is not None else _dummy(F32),
        seed.reshape(1) if seed is not None else _dummy(jnp.uint32),
        *spec.scalars(),
        sq,
        sk,
        h,
        spec.groups,
    ]
    out, lse = launch(
        flash_fwd_kernel,
        *args,
        out_shape=out_shape,
        grid=folded(_cdiv(sq, block_m), b * h),
        num_warps=warps,
        num_stages=stages,
        name="ejkernel_flash_fwd",
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        NUM_SINKS=spec.num_sinks,
        **_strides(spec, "o"),
        **spec.flags(),
    )
    return out, lse


def _q_block_ranges(row_lo: jax.Array, row_hi: jax.Array, seq_k: int, block_n: int) -> jax.Array:
    """Varlen schedule for dK/dV: per key block, the query rows ``[first, last + 1)`` attending it."""
    starts = jnp.arange(0, seq_k, block_n, dtype=jnp.int32)
    ends = jnp.minimum(starts + block_n, seq_k)
    attends = (row_hi[None, :] > starts[:, None]) & (row_lo[None, :] < ends[:, None]) & (row_hi > row_lo)[None, :]
    any_row = attends.any(axis=1)
    first = jnp.argmax(attends, axis=1).astype(jnp.int32)
    last = (row_lo.shape[0] - 1 - jnp.argmax(attends[:, ::-1], axis=1)).astype(jnp.int32)
    return jnp.stack([jnp.where(any_row, first, 0), jnp.where(any_row, last + 1, 0)], axis=1).reshape(-1)


def masked_stages(spec: Spec, block_m: int, block_n: int, keys_resident: bool) -> dict[str, bool]:
    """Whether any program of a backward kernel has masked blocks before (``HEAD_MASKED``) or
    after (``TAIL_MASKED``) its unmasked ones (``_bwd``'s three loops; the bounds of
    ``_bwd._q_range`` for the dK/dV kernel, ``keys_resident``, and of ``_kernel.block_stages``
    for the dQ kernel). Static facts of the shapes and options: a loop no program runs is not
    compiled. A key block that crosses ``seq_k`` (dK/dV) or a query block whose rows stop at
    different keys (dQ) is masked throughout."""
    window, varlen, causal = spec.window is not None, spec.varlen, spec.causal
    if keys_resident:  # block_n keys per program, block_m query rows per step
        ragged = spec.seq_q % block_m != 0 or spec.seq_k % block_n != 0
        return dict(HEAD_MASKED=causal or window or varlen, TAIL_MASKED=window or (not varlen and ragged))
    # dQ: block_m query rows per program, block_n keys per step
    return dict(HEAD_MASKED=window or varlen, TAIL_MASKED=causal or window or varlen or spec.seq_k % block_n != 0)


def backward(
    spec: Spec, q, k, v, bias, q_seg, kv_seg, row_lo, row_hi, seed, out, lse, dout, write_dbias: bool
) -> tuple[Any, ...]:
    """``dq``, ``dk``, ``dv`` and, with ``write_dbias``, ``dS`` ``[b, h, sq, sk]`` (float32)."""
    b, sq, sk, h, hk = spec.batch, spec.seq_q, spec.seq_k, spec.num_heads, spec.num_kv_heads
    block_m, block_n, warps, stages = spec.bwd
    delta = output_rowsum(dout, out)  # [b, h, sq]
    dout = dout.astype(q.dtype)  # the tensor-core products take one input dtype
    lse_b = jnp.where(lse == -jnp.inf, jnp.inf, lse)  # empty rows: exp(s - lse) = 0
    common = _common_inputs(spec, q, k, v, bias, q_seg, kv_seg, row_lo, row_hi, seed)
    seed_arg = seed.reshape(1) if seed is not None else _dummy(jnp.uint32)
    flags = {**spec.flags(), **_strides(spec, "do")}
    q_range = _q_block_ranges(row_lo, row_hi, sk, block_n) if spec.varlen else _dummy()
    dk, dv = launch(
        flash_dkdv_kernel,
        *common,
        q_range,
        seed_arg,
        dout,
        lse_b,
        delta,
        *spec.scalars(),
        sq,
        sk,
        h,
        hk,
        spec.groups,
        out_shape=[
            jax.ShapeDtypeStruct(k.shape, spec.out_dtype(k)),
            jax.ShapeDtypeStruct(v.shape, spec.out_dtype(v)),
        ],
        grid=folded(_cdiv(sk, block_n), b * hk),
        num_warps=warps,
        num_stages=stages,
        name="ejkernel_flash_dkdv",
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        **masked_stages(spec, block_m, block_n, keys_resident=True),
        **flags,
    )
    dbias_shape = (b, h, sq, sk) if write_dbias else (1,)
    dq, ds = launch(
        flash_dq_kernel,
        *common,
        seed_arg,
        dout,
        lse_b,
        delta,
        *spec.scalars(),
        sq,
        sk,
        h,
        spec.groups,
        out_shape=[
            jax.ShapeDtypeStruct(q.shape, spec.out_dtype(q)),
            jax.ShapeDtypeStruct(dbias_shape, F32),
        ],
        grid=folded(_cdiv(sq, block_n), b * h),
        num_warps=warps,
        num_stages=stages,
        zeroed_outputs=(1,) if write_dbias else (),
        name="ejkernel_flash_dq",
        BLOCK_M=block_n,  # dQ swaps the tile roles: many query rows, few keys per step
        BLOCK_N=block_m,
        WRITE_DBIAS=write_dbias,
        **masked_stages(spec, block_n, block_m, keys_resident=False),
        **flags,
    )
    return dq, dk, dv, (ds if write_dbias else None)


# -- differentiation and batching -------------------------------------------------------------
#
# The kernels are wrapped, each in a jax.custom_batching.custom_vmap, as functions of a dict of
# the arrays present; every result they return has the batch axis first. A vmapped axis folds
# into that batch when every mapped argument is per-example (not varlen); otherwise the rule maps
# sequentially. Reductions over examples (bias broadcast, sinks) happen outside, in plain JAX.

_PER_EXAMPLE = frozenset({"q", "k", "v", "bias", "q_seg", "kv_seg", "out", "lse", "dout"})


def _vmap_rule(spec: Spec, make, axis_size: int, in_batched, arrays: dict[str, Any]):
    batched = in_batched[0]
    if spec.varlen or any(bt and n not in _PER_EXAMPLE for n, bt in batched.items()):
        mapped = {n: x if batched[n] else jnp.broadcast_to(x, (axis_size, *x.shape)) for n, x in arrays.items()}
        outs = jax.lax.map(make(spec), mapped)
        return outs, jax.tree.map(lambda _: True, outs)
    folded = {}
    for n, x in arrays.items():
        if n not in _PER_EXAMPLE or (n == "bias" and not batched[n] and x.shape[0] == 1):
            folded[n] = x  # shared by every example (a batch-broadcast bias stays broadcast)
            continue
        if not batched[n]:
            x = jnp.broadcast_to(x, (axis_size, *x.shape))
        if n == "bias" and x.shape[1] == 1 and spec.batch > 1:
            x = jnp.broadcast_to(x, (axis_size, spec.batch, *x.shape[2:]))
        folded[n] = x.reshape(axis_size * x.shape[1], *x.shape[2:])
    inner = dataclasses.replace(
        spec,
        batch=spec.batch * axis_size,
        bias_shape=None if "bias" not in folded else tuple(int(d) for d in folded["bias"].shape),
    )
    outs = make(inner)(folded)
    outs = jax.tree.map(lambda o: o.reshape(axis_size, o.shape[0] // axis_size, *o.shape[1:]), outs)
    return outs, jax.tree.map(lambda _: True, outs)


@functools.lru_cache(maxsize=256)
def _forward_fn(spec: Spec):
    @jax.custom_batching.custom_vmap
    def fwd(arrays: dict[str, Any]):
        get = arrays.get
        return forward(
            spec, get("q"), get("k"), get("v"), get("bias"), get("aux"), get("q_seg"), get("kv_seg"),
            get("row_lo"), get("row_hi"), get("seed"),
        )  # fmt: skip

    fwd.def_vmap(functools.partial(_vmap_rule, spec, _forward_fn))
    return fwd


@functools.lru_cache(maxsize=256)
def _backward_fn(spec: Spec, write_dbias: bool):
    @jax.custom_batching.custom_vmap
    def bwd(arrays: dict[str, Any]):
        get = arrays.get
        return backward(
            spec, get("q"), get("k"), get("v"), get("bias"), get("q_seg"), get("kv_seg"), get("row_lo"),
            get("row_hi"), get("seed"), get("out"), get("lse"), get("dout"), write_dbias,
        )  # fmt: skip

    bwd.def_vmap(functools.partial(_vmap_rule, spec, lambda s: _backward_fn(s, write_dbias)))
    return bwd


def _reduce_dbias(ds: jax.Array, bias: jax.Array) -> jax.Array:
    """``dS [b, h, sq, sk]`` summed over the bias's broadcast (size-1) dims."""
    axes = tuple(i for i, n in enumerate(bias.shape) if n == 1 and ds.shape[i] != 1)
    return ds.sum(axis=axes, keepdims=True) if axes else ds


def _present(**arrays: Any) -> dict[str, Any]:
    return {n: x for n, x in arrays.items() if x is not None}


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _attention(spec: Spec, q, k, v, bias, aux, q_seg, kv_seg, row_lo, row_hi, seed):
    arrays = _present(
        q=q, k=k, v=v, bias=bias, aux=aux, q_seg=q_seg, kv_seg=kv_seg, row_lo=row_lo, row_hi=row_hi, seed=seed
    )
    return _forward_fn(spec)(arrays)[0]


def _attention_fwd(spec: Spec, q, k, v, bias, aux, q_seg, kv_seg, row_lo, row_hi, seed):
    names = ("q", "k", "v", "bias", "aux", "q_seg", "kv_seg", "row_lo", "row_hi", "seed")
    primals = (q, k, v, bias, aux, q_seg, kv_seg, row_lo, row_hi, seed)
    # symbolic_zeros: each argument comes wrapped with .value and .perturbed (absent ones are None).
    vals = dict(zip(names, (getattr(x, "value", x) for x in primals), strict=True))
    out, lse = _forward_fn(spec)(_present(**vals))
    bias_grad = vals["bias"] is not None and bool(getattr(bias, "perturbed", True))
    return out, (vals, out, lse, bias_grad)


def _attention_bwd(spec: Spec, res, dout):
    vals, out, lse, bias_grad = res
    arrays = _present(**{n: x for n, x in vals.items() if n != "aux"}, out=out, lse=lse, dout=dout)
    dq, dk, dv, ds = _backward_fn(spec, bias_grad)(arrays)
    dbias = daux = None
    if bias_grad:
        bias = vals["bias"]
        dbias = _reduce_dbias(ds, bias).astype(bias.dtype)
    aux = vals["aux"]
    if aux is not None:
        daux = softmax_aux_grad(aux, lse, output_rowsum(dout, out)).astype(aux.dtype)
    return dq, dk, dv, dbias, daux, None, None, None, None, None


_attention.defvjp(_attention_fwd, _attention_bwd, symbolic_zeros=True)


def flash_attention(args: AttentionArgs, fwd: FwdParams, bwd: BwdParams) -> jax.Array:
    spec = make_spec(args, fwd, bwd)
    row_lo = row_hi = None
    if spec.varlen:
        row_lo, row_hi = key_bounds(args)
    return _attention(
        spec,
        args.query,
        args.key,
        args.value,
        args.bias,
        args.softmax_aux,
        args.q_segment_ids,
        args.kv_segment_ids,
        row_lo,
        row_hi,
        args.dropout_seed,
    )


# -- the log-sum-exp protocol (ring attention's per-block kernel) --------------------------------


def _protocol_arrays(args: AttentionArgs) -> dict[str, Any]:
    if args.softmax_aux is not None or args.dropout_prob > 0 or args.is_varlen:
        raise ValueError("the log-sum-exp protocol takes no softmax_aux, dropout or cum_seqlens")
    return _present(
        q=args.query, k=args.key, v=args.value, bias=args.bias, q_seg=args.q_segment_ids, kv_seg=args.kv_segment_ids
    )


def forward_lse(args: AttentionArgs, fwd: FwdParams, bwd: BwdParams) -> tuple[jax.Array, jax.Array]:
    """Float32 output ``[b, sq, h, dv]`` and log-sum-exp ``[b, h, sq]`` (-inf for rows that see
    no key), not differentiated (``AttentionImpl.forward_lse``)."""
    spec = dataclasses.replace(make_spec(args, fwd, bwd), f32_out=True)
    return _forward_fn(spec)(_protocol_arrays(args))


def backward_lse(
    args: AttentionArgs, fwd: FwdParams, bwd: BwdParams, out: jax.Array, lse: jax.Array, dout: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array | None]:
    """Float32 ``dq``, ``dk``, ``dv`` (and ``dbias``) of this block given the *global* output and
    log-sum-exp (``AttentionImpl.backward_lse``)."""
    spec = dataclasses.replace(make_spec(args, fwd, bwd), f32_out=True)
    arrays = _protocol_arrays(args)
    arrays.update(out=out, lse=lse.astype(F32), dout=dout)
    dq, dk, dv, ds = _backward_fn(spec, args.bias is not None)(arrays)
    return dq, dk, dv, None if args.bias is None else _reduce_dbias(ds, args.bias)
