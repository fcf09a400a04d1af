"""Ring attention's algorithm: forward and backward rings over a named mesh axis.

Each device keeps its query shard and passes its key/value shard around the ring with
``lax.ppermute`` (Liu et al. 2023, "Ring Attention with Blockwise Transformers"); at step ``t``
device ``r`` holds the keys of device ``src = (r - t) mod P``. Each step runs the inner kernel
(any ``flash_attention`` implementation with the log-sum-exp protocol, see
:meth:`~ejkernel.ops.families.attention.AttentionImpl.forward_lse`) on (local queries, visiting keys) and merges the
normalized partial output into the running one by log-sum-exp. The transfer for step ``t + 1``
is issued before step ``t`` computes, so the two overlap.

The backward (FA2 style, one ``custom_vjp`` around the whole ring) runs the ring again: each
block's gradients come from the inner kernel's :meth:`~ejkernel.ops.families.attention.AttentionImpl.backward_lse`
with the *global* output and log-sum-exp; ``dq`` accumulates in place, ``dk``/``dv`` travel with
their key/value block and take one last hop home. The accumulated ``dk``/``dv`` of the previous
step are sent at the start of a step and added after its block is computed, so that transfer
overlaps compute too. Memory per device is that of its own shards plus one visiting block,
whatever the number of devices.

Which (query chunk, key chunk) pairs a step computes depends only on where the chunks sit in the
sequence (``RingPlan.mode``):

- ``full`` (no causal, no window): the whole local query against the whole visiting block.
- ``causal``: with equal chunks each pair is entirely visible, causal on its diagonal, or
  entirely masked (skipped), so plain ``causal`` kernels suffice. The first step (``src = r``)
  is the causal diagonal. In the zig-zag layout device ``r`` holds chunks ``r`` and
  ``2P - 1 - r`` of ``2P``, and every later step does the same work with no branch: the pair
  (second query chunk, first key chunk) is always fully visible, and so is (first query chunk,
  first key chunk) when ``src < r`` or (second, second) when ``src > r``: one more call whose
  chunks are picked by a traced offset. In the contiguous layout later steps are fully visible
  (``src < r``) or skipped (``lax.cond``).
- ``window``: each pair of (half-)chunks runs with its position offset
  (``AttentionArgs.position_offset``, traced: it depends on ``axis_index``) and is skipped when
  the window leaves it empty. With ``sinks`` (earlier releases' ``attention_sink_size``: the
  first keys of the sequence are exempt from the window, not from the causal mask or the other
  masks) a key chunk holding sinks runs without the window: whole when every key is a sink, else
  split at the last sink (a static column, as chunks start at multiples of their length) into a
  windowless part and a windowed one.

Softmax sinks join the denominator once, after the ring (not per block).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ..families.attention import AttentionArgs
from ..families.attention_math import output_rowsum, softmax_aux_grad, vary_like, varying_axes

F32 = jnp.float32
NEG_INF = -jnp.inf


@dataclasses.dataclass(frozen=True)
class RingPlan:
    """Everything static about one ring call (hashable: a ``nondiff_argnum``)."""

    axis_name: Any
    axis_size: int
    layout: str  # "contiguous" | "zigzag"
    mode: str  # "full" | "causal" | "window"
    seq_q: int  # local lengths
    seq_k: int
    causal: bool
    window: tuple[int, int] | None
    scale: float
    soft_cap: float | None
    impl: Any  # the inner flash_attention implementation (supports_lse)
    cfg: Any  # its complete FlashAttentionConfig
    sinks: int = 0  # the first keys (global positions) that the window does not mask

    @property
    def num_sub(self) -> int:
        """Chunks per device that the window mode pairs one by one."""
        return 2 if self.layout == "zigzag" else 1


@dataclasses.dataclass(frozen=True)
class Task:
    """One inner-kernel call of a step: local query rows ``[q0, q0+nq)`` against the visiting
    block's rows ``[k0, k0+nk)`` (the starts may be traced; the sizes are static)."""

    q0: Any
    nq: int
    k0: Any
    nk: int
    causal: bool
    window: bool = True  # the plan's window applies (when the task has a position offset)


# A branch is the tuple of (task, position offset or None) pairs that one case of a step runs.
Branch = tuple[tuple[Task, Any], ...]


def _chunk_start(plan: RingPlan, device: Any, sub: int, length: int) -> Any:
    """Global position of the first token of chunk ``sub`` (of length ``length``) of ``device``."""
    second = plan.layout == "zigzag" and sub == 1
    index = 2 * plan.axis_size - 1 - device if second else device
    return (index * length).astype(jnp.int32)


def _nonempty(plan: RingPlan, offset: Any, nq: int, nk: int) -> Any:
    """Whether any query row of a block at ``offset`` may attend any of its ``nk`` keys."""
    pos = jnp.arange(nq, dtype=jnp.int32) + offset
    lo = jnp.zeros_like(pos)
    hi = jnp.full_like(pos, nk)
    if plan.causal:
        hi = jnp.minimum(hi, pos + 1)
    if plan.window is not None:
        lo = jnp.maximum(lo, pos - plan.window[0])
        hi = jnp.minimum(hi, pos + plan.window[1] + 1)
    return jnp.any(jnp.clip(hi, 0, nk) > jnp.clip(lo, 0, nk))


def schedule(plan: RingPlan, r: Any, src: Any, first: bool) -> list[tuple[Any, tuple[Branch, ...]]]:
    """The groups of one step: each is ``(case index (traced) or None, branches)``.

    ``first``: the step with the device's own keys (``src == r``).
    """
    L, Lk = plan.seq_q, plan.seq_k
    if plan.mode == "full":
        return [(None, (((Task(0, L, 0, Lk, False), None),),))]
    if plan.mode == "causal":
        if first:
            return [(None, (((Task(0, L, 0, L, True), None),),))]
        if plan.layout == "zigzag":
            h = L // 2
            i = (src > r).astype(jnp.int32) * h  # src < r: first chunks; src > r: second chunks
            both: Branch = ((Task(h, h, 0, h, False), None), (Task(i, h, i, h, False), None))
            return [(None, (both,))]
        visible: Branch = ((Task(0, L, 0, L, False), None),)
        return [((src < r).astype(jnp.int32), ((), visible))]
    # window: each pair of chunks at its own offset, skipped when empty.
    n = plan.num_sub
    h = L // n
    cut = plan.sinks % h  # where the last sink ends inside its chunk (0: at a chunk's end)
    groups = []
    for a in range(n):
        for b in range(n):
            k_start = _chunk_start(plan, src, b, h)
            offset = _chunk_start(plan, r, a, h) - k_start
            task = Task(a * h, h, b * h, h, plan.causal)
            case = _nonempty(plan, offset, h, h).astype(jnp.int32)
            branches: tuple[Branch, ...] = ((), ((task, offset),))
            if plan.sinks:
                all_sinks: Branch = ((dataclasses.replace(task, window=False), offset),)
                branches += (all_sinks,)
                case = jnp.where(k_start + h <= plan.sinks, 2, case)
                if cut:
                    head = Task(a * h, h, b * h, cut, plan.causal, window=False)
                    tail = Task(a * h, h, b * h + cut, h - cut, plan.causal)
                    branches += (((head, offset), (tail, offset - cut)),)
                    case = jnp.where((k_start < plan.sinks) & (plan.sinks < k_start + h), 3, case)
            groups.append((case, branches))
    return groups


@dataclasses.dataclass(frozen=True)
class Local:
    """The query side of the ring (stays on its device)."""

    q: Any
    q_seg: Any
    bias: Any  # [B1, H1, Lq or 1, P·Lk or 1]: rows local, key columns global (in layout order)
    mask: Any  # the same for a pairwise mask


def _rows_cols(x: Any, q0: Any, nq: int, col0: Any, nk: int) -> Any:
    if x is None:
        return None
    if x.shape[2] > 1:
        x = _rows(x, q0, nq, axis=2)
    if x.shape[3] > 1:
        x = lax.dynamic_slice_in_dim(x, col0, nk, 3)
    return x


def _block_args(plan: RingPlan, loc: Local, kv: tuple, task: Task, offset: Any, src: Any) -> AttentionArgs:
    k, v, kv_seg = kv
    col0 = src * plan.seq_k + task.k0
    q0, nq, k0, nk = task.q0, task.nq, task.k0, task.nk
    return AttentionArgs(
        query=_rows(loc.q, q0, nq),
        key=_rows(k, k0, nk),
        value=_rows(v, k0, nk),
        bias=_rows_cols(loc.bias, q0, nq, col0, nk),
        q_segment_ids=None if loc.q_seg is None else _rows(loc.q_seg, q0, nq),
        kv_segment_ids=None if kv_seg is None else _rows(kv_seg, k0, nk),
        attention_mask=_rows_cols(loc.mask, q0, nq, col0, nk),
        position_offset=offset,
        causal=task.causal,
        softmax_scale=plan.scale,
        sliding_window=plan.window if offset is not None and task.window else None,
        logits_soft_cap=plan.soft_cap,
    )


# Row blocks are read and written with static slices and dynamic_update_slice, never with
# `.at[].add` (a scatter): XLA:CPU of jaxlib 0.11 crashes compiling scatters next to collectives
# inside loops.


def _rows(x: Any, start: Any, size: int, axis: int = 1) -> Any:
    if size == x.shape[axis]:
        return x
    if isinstance(start, int):
        return lax.slice_in_dim(x, start, start + size, axis=axis)
    return lax.dynamic_slice_in_dim(x, start, size, axis)


def _set_rows(x: Any, part: Any, start: Any, axis: int = 1) -> Any:
    if part.shape == x.shape:
        return part
    return lax.dynamic_update_slice_in_dim(x, part.astype(x.dtype), start, axis)


def _merge(o_acc: Any, l_acc: Any, o: Any, lse: Any) -> tuple[Any, Any]:
    """Merge normalized partial outputs by their log-sum-exps (``l``: ``[b, s, h]``)."""
    l_new = jnp.logaddexp(l_acc, lse)
    l_safe = jnp.where(l_new == NEG_INF, 0.0, l_new)
    w_acc = jnp.exp(l_acc - l_safe)[..., None]
    w = jnp.exp(lse - l_safe)[..., None]
    return o_acc * w_acc + o.astype(F32) * w, l_new


def _run_groups(groups: list, fn: Any, state: Any, *operands: Any) -> Any:
    for case, branches in groups:
        fns = [functools.partial(fn, branch) for branch in branches]
        state = fns[0](state, *operands) if len(fns) == 1 else lax.switch(case, fns, state, *operands)
    return state


def _ring_perm(n: int) -> list[tuple[int, int]]:
    return [(i, (i + 1) % n) for i in range(n)]


def _send_next(tree: Any, axis: Any, n: int) -> Any:
    """Every array of ``tree`` from each device to the next one on the ring, in one transfer.

    The arrays are bit-cast into one flat buffer and sent by a single ``ppermute``: XLA's GPU
    scheduler keeps at most one collective-permute in flight beside compute, so separate ones
    (K, V, dK, dV) run one after another and the compute stream waits for all but one
    (``benchmarks/results/h200/ring_attention.json``, 4 devices, 16k tokens per device: separate
    against packed transfers). Packing costs one copy of the arrays, which XLA fuses with their
    producers where it can.
    """
    leaves, treedef = jax.tree.flatten(tree)
    if len(leaves) <= 1:
        return lax.ppermute(tree, axis, _ring_perm(n))
    word = jnp.uint32 if all(x.size * x.dtype.itemsize % 4 == 0 for x in leaves) else jnp.uint8
    buf = lax.ppermute(jnp.concatenate([_to_words(x, word) for x in leaves]), axis, _ring_perm(n))
    out, at = [], 0
    for x in leaves:
        size = x.size * x.dtype.itemsize // jnp.dtype(word).itemsize
        out.append(_from_words(buf[at : at + size], x.shape, x.dtype))
        at += size
    return jax.tree.unflatten(treedef, out)


def _to_words(x: Any, word: Any) -> Any:
    """``x`` as a flat vector of ``word`` (uint8 or uint32), bit for bit."""
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    ratio = jnp.dtype(word).itemsize // x.dtype.itemsize  # x's items per word (0: several words each)
    flat = x.reshape(-1) if ratio <= 1 else x.reshape(-1, ratio)
    return lax.bitcast_convert_type(flat, word).reshape(-1)


def _from_words(words: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    """The inverse of :func:`_to_words`."""
    item = jnp.uint8 if dtype == jnp.bool_ else dtype
    per = jnp.dtype(item).itemsize // words.dtype.itemsize  # words per item (0: several items each)
    x = lax.bitcast_convert_type(words if per <= 1 else words.reshape(-1, per), item).reshape(shape)
    return x.astype(dtype) if dtype == jnp.bool_ else x


# -- forward -----------------------------------------------------------------------------------


def _forward_ring(plan: RingPlan, loc: Local, k: Any, v: Any, kv_seg: Any, dv: int) -> tuple[Any, Any]:
    """Merged output ``[b, Lq, h, dv]`` (float32) and log-sum-exp ``[b, Lq, h]`` of the ring."""
    n, axis = plan.axis_size, plan.axis_name
    r = lax.axis_index(axis) if axis is not None else jnp.int32(0)  # None: a ring of one
    b, L, h = loc.q.shape[0], loc.q.shape[1], loc.q.shape[2]

    def run(branch: Branch, acc: Any, kv: tuple, src: Any) -> Any:
        o_acc, l_acc = acc
        for task, offset in branch:
            args = _block_args(plan, loc, kv, task, offset, src)
            o, lse = plan.impl.forward_lse(args, plan.cfg)  # [b, nq, h, dv], [b, h, nq]
            o_t, l_t = _merge(_rows(o_acc, task.q0, task.nq), _rows(l_acc, task.q0, task.nq), o, lse.transpose(0, 2, 1))
            o_acc = _set_rows(o_acc, o_t, task.q0)
            l_acc = _set_rows(l_acc, l_t, task.q0)
        return o_acc, l_acc

    def step(t: Any, kv: tuple, acc: Any, first: bool = False) -> Any:
        src = r if first else (r - t) % n
        return _run_groups(schedule(plan, r, src, first), run, acc, kv, src)

    def body(t: Any, carry: Any) -> Any:
        kv, acc = carry
        nxt = _send_next(kv, axis, n)  # issued before this step computes
        return nxt, step(t, kv, acc)

    acc = (jnp.zeros((b, L, h, dv), F32), jnp.full((b, L, h), NEG_INF, F32))
    # Under shard_map(check_vma=True) loop carries must vary over the mesh axes like the data.
    acc = vary_like(acc, r, loc.q, loc.q_seg, loc.bias, loc.mask, k, v, kv_seg)
    kv = (k, v, kv_seg)
    if n == 1:
        return step(0, kv, acc, first=True)
    nxt = _send_next(kv, axis, n)
    acc = step(0, kv, acc, first=True)
    kv, acc = lax.fori_loop(1, n - 1, body, (nxt, acc))
    return step(n - 1, kv, acc)


def _with_sinks(o: Any, lse: Any, aux: Any) -> tuple[Any, Any]:
    """Add the sinks ``[h, n]`` to each row's denominator once."""
    if aux is None:
        return o, lse
    sink = jax.nn.logsumexp(aux.astype(F32), axis=-1)  # [h]
    l_new = jnp.logaddexp(lse, sink)
    return o * jnp.exp(lse - l_new)[..., None], l_new


def _forward(plan: RingPlan, q, k, v, bias, aux, q_seg, kv_seg, mask) -> tuple[Any, Any]:
    loc = Local(q=q, q_seg=q_seg, bias=bias, mask=mask)
    o, lse = _forward_ring(plan, loc, k, v, kv_seg, v.shape[-1])
    o, lse = _with_sinks(o, lse, aux)
    return o.astype(q.dtype), lse.transpose(0, 2, 1)  # lse: [b, h, Lq]


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def ring(plan: RingPlan, q, k, v, bias, aux, q_seg, kv_seg, mask):
    """Ring attention of the local shards (inside ``shard_map`` over ``plan.axis_name``)."""
    return _forward(plan, q, k, v, bias, aux, q_seg, kv_seg, mask)[0]


def _ring_fwd(plan: RingPlan, q, k, v, bias, aux, q_seg, kv_seg, mask):
    out, lse = _forward(plan, q, k, v, bias, aux, q_seg, kv_seg, mask)
    return out, (q, k, v, bias, aux, q_seg, kv_seg, mask, out, lse)


# -- backward ----------------------------------------------------------------------------------


def _add_rows_cols(acc: Any, part: Any, q0: int, nq: int, col0: Any, nk: int) -> Any:
    starts = (0, 0, q0 if acc.shape[2] > 1 else 0, col0 if acc.shape[3] > 1 else 0)
    old = lax.dynamic_slice(acc, starts, part.shape)
    return lax.dynamic_update_slice(acc, old + part.astype(F32), starts)


def _ring_bwd(plan: RingPlan, res: tuple, dout: Any):
    q, k, v, bias, aux, q_seg, kv_seg, mask, out, lse = res
    n, axis = plan.axis_size, plan.axis_name
    r = lax.axis_index(axis) if axis is not None else jnp.int32(0)  # None: a ring of one
    loc = Local(q=q, q_seg=q_seg, bias=bias, mask=mask)

    def run(branch: Branch, state: Any, kv: tuple, src: Any) -> Any:
        dq_acc, db_acc, (dk_acc, dv_acc) = state
        for task, offset in branch:
            args = _block_args(plan, loc, kv, task, offset, src)
            q0, nq = task.q0, task.nq
            dq, dk, dv, db = plan.impl.backward_lse(
                args, plan.cfg, _rows(out, q0, nq), _rows(lse, q0, nq, axis=2), _rows(dout, q0, nq)
            )
            dq_acc = _set_rows(dq_acc, _rows(dq_acc, task.q0, task.nq) + dq.astype(F32), task.q0)
            dk_acc = _set_rows(dk_acc, _rows(dk_acc, task.k0, task.nk) + dk.astype(F32), task.k0)
            dv_acc = _set_rows(dv_acc, _rows(dv_acc, task.k0, task.nk) + dv.astype(F32), task.k0)
            if db_acc is not None:
                db_acc = _add_rows_cols(db_acc, db, task.q0, task.nq, src * plan.seq_k + task.k0, task.nk)
        return dq_acc, db_acc, (dk_acc, dv_acc)

    # Zero dK/dV buffers that each step fills with its block's gradients (outside the branches,
    # so that no branch waits for a transfer).
    zeros = vary_like((jnp.zeros(k.shape, F32), jnp.zeros(v.shape, F32)), r, res, dout)

    def step(t: Any, kv: tuple, dq_db: Any, first: bool = False) -> Any:
        src = r if first else (r - t) % n
        dq_acc, db_acc, part = _run_groups(schedule(plan, r, src, first), run, (*dq_db, zeros), kv, src)
        return (dq_acc, db_acc), part

    def add(a: tuple, b: tuple) -> tuple:
        return tuple(x + y for x, y in zip(a, b, strict=True))

    def body(t: Any, carry: Any) -> Any:
        kv, dq_db, dkv = carry
        # Issued before this step computes: the next block, and the previous block's dK/dV to
        # the device that now holds that block; this device receives those of its current
        # block, and adds them only after computing its part.
        nxt, recv = _send_next((kv, dkv), axis, n)
        dq_db, part = step(t, kv, dq_db)
        return nxt, dq_db, add(recv, part)

    dq_db = vary_like((jnp.zeros(q.shape, F32), None if bias is None else jnp.zeros(bias.shape, F32)), r, res, dout)
    kv = (k, v, kv_seg)
    if n == 1:
        (dq, dbias), (dk, dv) = step(0, kv, dq_db, first=True)
    else:
        nxt = _send_next(kv, axis, n)
        dq_db, dkv = step(0, kv, dq_db, first=True)
        kv, dq_db, dkv = lax.fori_loop(1, n - 1, body, (nxt, dq_db, dkv))
        recv = _send_next(dkv, axis, n)
        (dq, dbias), part = step(n - 1, kv, dq_db)
        # The last hop carries finished sums: in the dtype they are returned in (no extra
        # rounding; half the bytes of float32 for 16-bit inputs). Nothing is left to overlap it.
        dk, dv = add(recv, part)
        dk, dv = _send_next((dk.astype(k.dtype), dv.astype(v.dtype)), axis, n)
    daux = None
    if aux is not None:
        daux = softmax_aux_grad(aux, lse, output_rowsum(dout, out))
    grads = (dq, dk, dv, dbias, daux)
    primals = (q, k, v, bias, aux)
    return (*(None if g is None else _typed_like(g, x) for g, x in zip(grads, primals, strict=True)), None, None, None)


def _typed_like(g: Any, x: Any) -> Any:
    """The cotangent ``g`` in the dtype and manual-axis type of its primal ``x``.

    Under ``shard_map(check_vma=True)`` an input that is the same on every device of an axis
    (a bias or sinks replicated over the ring) gets the sum of the devices' contributions; with
    ``check_vma=False`` ``shard_map`` itself sums them when it transposes.
    """
    extra = tuple(sorted(varying_axes(g) - varying_axes(x), key=str))
    if extra:
        g = lax.psum(g, extra)
    return vary_like(g.astype(x.dtype), x)


ring.defvjp(_ring_fwd, _ring_bwd)
