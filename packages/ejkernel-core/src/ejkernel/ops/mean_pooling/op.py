"""The ``mean_pooling`` op: the mean of each sequence's valid tokens."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np

from ..args import Args, ShardPlan, concrete, shape_str, static, static_int
from ..args import array as field
from ..checks import ValueRule
from ..config import OpConfig, tile
from ..families.attention import cu_seqlens_rule
from ..op import Op

__all__ = ["MeanPooling", "MeanPoolingArgs", "MeanPoolingConfig"]


@dataclasses.dataclass(frozen=True)
class MeanPoolingConfig(OpConfig):
    """Config of ``mean_pooling``.

    Attributes:
        block_size: tokens one step of a program reads (Triton: the rows of a ``[block_size,
            block_dim]`` tile).
        block_dim: hidden columns one program owns (Triton).
        split_size: tokens one program reduces (a multiple of ``block_size``): a long sequence is
            cut into parts reduced by separate programs, whose float32 partial sums are added in
            a second, small pass (deterministic: no atomics).
        num_warps: warps per program (GPU kernels).
        num_stages: software-pipelining depth of the token loop (GPU kernels).

    The XLA implementation uses ``split_size`` only, for packed rows: ``None`` (its choice on a
    CPU) sums the rows into their sequences with a segment sum; a number (on accelerators, where
    that segment sum is a scatter with atomics) sums items of at most that many rows of one
    sequence, then each sequence's items.
    """

    block_size: int | None = tile(power_of_two=True)
    block_dim: int | None = tile(power_of_two=True)
    split_size: int | None = tile()
    num_warps: int | None = tile(power_of_two=True, maximum=32)
    num_stages: int | None = tile()


class MeanPoolingArgs(
    Args,
    shardable=("hidden",),
    shard_reasons={
        "tokens": "a sequence's mean reads all its tokens",
        "batch": "shard the hidden axis (a sequence's mean reads all its tokens)",
        "seq": "a sequence's mean reads all its tokens",
        "cu_len": "cu_seqlens is read whole",
    },
    allow_empty=("tokens",),
):
    """Canonical arguments: the tokens of every sequence as rows of ``x [tokens, hidden]``.

    Sequence ``i`` is rows ``cu_seqlens[i] .. cu_seqlens[i + 1] - 1`` (packed form); without
    ``cu_seqlens`` the sequences are consecutive runs of ``seq_len`` rows (the dense
    ``[batch, seq, hidden]`` input, reshaped). A row counts when ``attention_mask`` (``[tokens]``
    bool) is true there (every row without a mask). ``batch_shape`` is the output's leading shape.
    """

    x: Any = field("tokens", "hidden", differentiable=True, ranks=(2, 3))
    cu_seqlens: Any = field("cu_len", kind="int", optional=True)
    attention_mask: Any = field("tokens", kind="any", optional=True, ranks=(1, 2))
    seq_len: int | None = static(None)
    batch_shape: tuple[int, ...] = static(())

    @property
    def dtype(self) -> Any:
        return self.x.dtype

    @property
    def num_seqs(self) -> int:
        if self.cu_seqlens is not None:
            return int(self.cu_seqlens.shape[0]) - 1
        return int(np.prod(self.batch_shape, dtype=np.int64))

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (*self.batch_shape, self.hidden)


FEATURES: dict[str, tuple[str, Any]] = {
    "varlen": ("packed sequences (cu_seqlens)", lambda a: a.cu_seqlens is not None),
    "attention_mask": ("a mask of the tokens that count", lambda a: a.attention_mask is not None),
}


class MeanPooling(Op):
    """The ``mean_pooling`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "mean_pooling"
    config_cls = MeanPoolingConfig
    args_cls = MeanPoolingArgs
    trainable = True
    features: ClassVar[dict[str, tuple[str, Any]]] = FEATURES

    def config_hints(self, p: dict[str, Any]) -> dict[str, Any]:
        chunk = static_int(self.name, "chunk_size", p.pop("chunk_size", None), minimum=1)
        if chunk is None:
            return {}
        if chunk & (chunk - 1):
            raise ValueError(f"{self.name}: chunk_size must be a power of two, got {chunk}")
        return {"block_size": chunk}

    def bind(self, params: dict[str, Any]) -> MeanPoolingArgs:
        # The documented positional mask form, mean_pooling(hidden_states, attention_mask): a
        # second array that is 2-D or bool is a token mask, not cumulative lengths.
        params = dict(params)
        cu = params.get("cu_seqlens")
        if cu is not None and hasattr(cu, "ndim") and (cu.ndim > 1 or cu.dtype == np.bool_):
            if params.get("attention_mask") is not None:
                raise ValueError(
                    f"{self.name}: the second argument {shape_str(cu)} is a token mask and attention_mask is "
                    "passed too; pass one mask"
                )
            x = params.get("x")
            if hasattr(x, "shape") and tuple(cu.shape) != tuple(x.shape[:-1]):
                raise ValueError(
                    f"{self.name}: cu_seqlens must be [num_seqs + 1] int cumulative lengths, or (the positional "
                    f"mask form) a mask of x's shape without its hidden axis {tuple(x.shape[:-1])}; got "
                    f"{shape_str(cu)} {cu.dtype} with x {shape_str(x)}"
                )
            params["attention_mask"], params["cu_seqlens"] = cu, None
        return super().bind(params)  # type: ignore[return-value]

    def canonicalize(self, p: dict[str, Any]) -> MeanPoolingArgs:
        op = self.name
        x, cu, mask = p["x"], p.get("cu_seqlens"), p.get("attention_mask")
        if cu is not None and x.ndim != 2:
            raise ValueError(
                f"{op}: cu_seqlens needs packed x [tokens, hidden_dim], got x {shape_str(x)}; a dense "
                "[batch, seq, hidden_dim] input takes an attention_mask [batch, seq] instead"
            )
        if cu is not None and (cu.ndim != 1 or cu.shape[0] < 2):
            raise ValueError(f"{op}: cu_seqlens must be [num_seqs + 1] with num_seqs >= 1, got {shape_str(cu)}")
        if mask is not None:
            if tuple(mask.shape) != tuple(x.shape[:-1]):
                raise ValueError(
                    f"{op}: attention_mask must have x's shape without its hidden axis, {tuple(x.shape[:-1])}: "
                    f"attention_mask {shape_str(mask)}, x {shape_str(x)}"
                )
            if jnp.issubdtype(mask.dtype, jnp.floating):
                raise TypeError(
                    f"{op}: attention_mask must be bool or int (nonzero: the token counts), got {mask.dtype}"
                )
            mask = mask.reshape(-1) != 0
        hidden = int(x.shape[-1])
        if cu is not None:
            batch_shape: tuple[int, ...] = (int(cu.shape[0]) - 1,)
            seq_len = None
        elif x.ndim == 3:
            batch_shape, seq_len = (int(x.shape[0]),), int(x.shape[1])
        else:  # [seq, hidden]: one sequence
            batch_shape, seq_len = (), int(x.shape[0])
        return MeanPoolingArgs.build(
            op,
            p,
            x=x.reshape(-1, hidden),
            cu_seqlens=cu,
            attention_mask=mask,
            seq_len=seq_len,
            batch_shape=batch_shape,
        )

    def value_rules(self, a: MeanPoolingArgs) -> list[ValueRule]:
        return [cu_seqlens_rule("cu_seqlens", a.tokens)] if a.cu_seqlens is not None else []

    def autotune_inputs(self, a: MeanPoolingArgs, seed: int = 0) -> MeanPoolingArgs:
        out = a.random_like(seed)
        rng = np.random.default_rng(seed)
        changes: dict[str, Any] = {}
        if a.cu_seqlens is not None and concrete(a.cu_seqlens) is None:  # traced: equal lengths
            n = a.num_seqs
            changes["cu_seqlens"] = jnp.asarray(np.arange(n + 1) * (a.tokens // n), jnp.int32)
        if a.attention_mask is not None and concrete(a.attention_mask) is None:
            changes["attention_mask"] = jnp.asarray(rng.random(a.tokens) < 0.9)
        return dataclasses.replace(out, **changes)

    def shard_plan(self, a: MeanPoolingArgs, in_specs: Any, mesh: Any) -> ShardPlan:
        # The user's x: packed [tokens, hidden] as canonical, or dense [batch, seq, hidden] / [seq, hidden].
        user: dict[str, tuple[str, ...]] = {}
        if a.seq_len is not None:
            user = {"x": ("batch", "seq", "hidden") if a.batch_shape else ("seq", "hidden")}
        return a.shard_plan(self.name, in_specs, mesh, self.positional_arrays(), user, required=1)

    def default_out_spec(self, a: MeanPoolingArgs, plan: ShardPlan) -> Any:
        return plan.spec_of((*([None] * len(a.batch_shape)), "hidden"))
