"""The ``recurrent_cell`` op: LSTM, GRU and vanilla RNN cells run over a sequence.

Not the registry's ``recurrent`` (in earlier releases that name is ``recurrent_attention``, the
linear-attention recurrence); this op is the kernel documents' "Recurrent Kernels".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import jax.numpy as jnp

from ..args import Args, ShardPlan, as_array, shape_str, static
from ..args import array as field
from ..config import OpConfig, tile
from ..op import Op

__all__ = [
    "ACTIVATIONS",
    "CELL_TYPES",
    "GATES",
    "REVERSE_PREFIX",
    "WEIGHT_KEYS",
    "RecurrentCell",
    "RecurrentCellArgs",
    "RecurrentCellConfig",
]

#: Gate blocks per cell, in the order they sit along the weights' last axis (PyTorch's order).
GATES: dict[str, tuple[str, ...]] = {"lstm": ("i", "f", "g", "o"), "gru": ("r", "z", "n"), "rnn": ("h",)}
CELL_TYPES = tuple(GATES)
#: The named activations (a callable is accepted too, by the XLA implementation).
ACTIVATIONS = ("tanh", "relu")
#: The keys of one direction's weights; the backward direction's carry ``REVERSE_PREFIX``.
WEIGHT_KEYS = ("w_ih", "w_hh", "b_ih", "b_hh", "b")
REVERSE_PREFIX = "reverse_"


@dataclasses.dataclass(frozen=True)
class RecurrentCellConfig(OpConfig):
    """Config of ``recurrent_cell``.

    Attributes:
        block_batch: batch rows one program of the Triton kernel owns (it runs them through every
            timestep).
        block_hidden: hidden units per step of the Triton kernel's column and reduction loops
            (``hidden_dim`` at most ``block_hidden``: the recurrent weights are loaded once and kept
            on chip for the whole sequence).
        num_warps: warps per program (Triton).
        unroll: timesteps per iteration of the XLA implementation's ``lax.scan``.
    """

    block_batch: int | None = tile(power_of_two=True)
    block_hidden: int | None = tile(power_of_two=True)
    num_warps: int | None = tile(power_of_two=True, maximum=32)
    unroll: int | None = tile()


def _activation(op: str, name: str, x: Any) -> Any:
    if isinstance(x, str):
        if x not in ACTIVATIONS:
            raise ValueError(f"{op}: {name} must be one of {ACTIVATIONS} or a callable, got {x!r}")
        return x
    if callable(x):
        return x
    raise TypeError(f"{op}: {name} must be one of {ACTIVATIONS} or a callable, got {type(x).__name__}")


def _cell_type(op: str, name: str, x: Any) -> str:
    if not isinstance(x, str) or x.lower() not in GATES:
        raise ValueError(f"{op}: {name} must be one of {CELL_TYPES}, got {x!r}")
    return x.lower()


class RecurrentCellArgs(
    Args,
    shardable=("batch",),
    shard_reasons={
        "seq": "each step reads the previous one's state",
        "hidden_dim": "each step's gates read the whole previous state",
        "input_dim": "shard the batch axis",
        "dirs": "shard the batch axis",
    },
    allow_empty=("seq",),
):
    """Canonical arguments, both directions stacked on a leading ``dirs`` axis (1, or 2 when
    bidirectional: forward, backward).

    ``w_ih [dirs, input_dim, gates]``, ``w_hh [dirs, hidden_dim, gates]``, ``b_ih``/``b_hh``
    ``[dirs, gates]`` with ``gates = len(GATES[cell_type]) * hidden_dim``; ``hidden`` and (LSTM)
    ``cell`` the initial states ``[dirs, batch, hidden_dim]`` (``cell`` ``None``: zeros).
    """

    inputs: Any = field("batch", "seq", "input_dim", differentiable=True)
    hidden: Any = field("dirs", "batch", "hidden_dim", ranks=(2, 3), differentiable=True, same_dtype_as="inputs")
    cell: Any = field(
        "dirs", "batch", "hidden_dim", ranks=(2, 3), optional=True, differentiable=True, same_dtype_as="inputs"
    )
    w_ih: Any = field("dirs", "input_dim", "gates", differentiable=True, same_dtype_as="inputs")
    w_hh: Any = field("dirs", "hidden_dim", "gates", differentiable=True, same_dtype_as="inputs")
    b_ih: Any = field("dirs", "gates", optional=True, differentiable=True, same_dtype_as="inputs")
    b_hh: Any = field("dirs", "gates", optional=True, differentiable=True, same_dtype_as="inputs")
    cell_type: str = static("lstm", parse=_cell_type)
    bidirectional: bool = static(False)
    activation: Any = static("tanh", parse=_activation)

    @property
    def dtype(self) -> Any:
        return self.inputs.dtype

    @property
    def num_gates(self) -> int:
        return len(GATES[self.cell_type])

    @property
    def num_dirs(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.batch, self.seq, self.num_dirs * self.hidden_dim)

    def final_state(self, h: Any, c: Any = None) -> Any:
        """The public final state of ``[dirs, batch, hidden_dim]`` states: ``[batch, hidden_dim]``
        (``[2, batch, hidden_dim]`` when bidirectional); LSTM: ``(h, c)``."""
        if not self.bidirectional:
            h = h[0]
            c = None if c is None else c[0]
        return (h, c) if self.cell_type == "lstm" else h


FEATURES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "custom_activation": ("an activation given as a Python callable", lambda a: callable(a.activation)),
    "bidirectional": ("both directions (forward and backward)", lambda a: a.bidirectional),
}


def _weights(op: str, weights: Any, cell_type: str, bidirectional: bool) -> dict[str, Any]:
    """The user's weights dict, checked key by key (names, then ranks and dtypes) and canonical:
    ``b`` becomes ``b_ih``."""
    if not isinstance(weights, Mapping):
        raise TypeError(f"{op}: weights must be a dict of arrays, got {type(weights).__name__}")
    prefixes = ("", REVERSE_PREFIX) if bidirectional else ("",)
    allowed = {p + k for p in prefixes for k in WEIGHT_KEYS}
    unknown = sorted(str(k) for k in weights if k not in allowed)
    if unknown:
        hint = "" if bidirectional else f" ({REVERSE_PREFIX}* keys need bidirectional=True)"
        raise ValueError(f"{op}: unknown weights keys {unknown}; expected among {sorted(allowed)}{hint}")
    out: dict[str, Any] = {}
    for p in prefixes:
        for k in ("w_ih", "w_hh"):
            if weights.get(p + k) is None:
                raise ValueError(f"{op}: weights[{p + k!r}] is required ({cell_type}, bidirectional={bidirectional})")
        if weights.get(p + "b") is not None:
            if cell_type == "gru":
                raise ValueError(
                    f"{op}: weights[{p + 'b'!r}] (one bias) is for lstm and rnn; a gru takes b_ih and b_hh "
                    "separately (b_hh's n block is multiplied by the reset gate)"
                )
            if weights.get(p + "b_ih") is not None:
                raise ValueError(f"{op}: pass weights[{p + 'b'!r}] or weights[{p + 'b_ih'!r}], not both")
        for k in ("w_ih", "w_hh", "b_ih", "b_hh"):
            src = p + ("b" if k == "b_ih" and weights.get(p + "b") is not None else k)
            x = weights.get(src)
            if x is None:
                continue
            x = as_array(op, f"weights[{src!r}]", x, ndim=2 if k.startswith("w") else 1)
            if not jnp.issubdtype(x.dtype, jnp.floating):
                raise TypeError(f"{op}: weights[{src!r}] must have a floating dtype, got {x.dtype}")
            out[(p, k)] = (src, x)
    return out


class RecurrentCell(Op):
    """The ``recurrent_cell`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "recurrent_cell"
    config_cls = RecurrentCellConfig
    args_cls = RecurrentCellArgs
    trainable = True
    features: ClassVar[dict[str, tuple[str, Callable[[Any], bool]]]] = FEATURES
    # A long recurrence in low precision drifts from the float32 reference step by step.
    conformance_atol: ClassVar[dict[str, float]] = {"bfloat16": 2e-2, "float16": 4e-3}
    conformance_grad_atol: ClassVar[dict[str, float]] = {"bfloat16": 6e-2, "float16": 1e-2}

    def bind(self, params: dict[str, Any]) -> RecurrentCellArgs:
        # The initial LSTM state may be a tuple (h, c): split it before the arrays are checked.
        params = dict(params)
        hidden = params.get("hidden")
        if isinstance(hidden, (tuple, list)):
            if len(hidden) != 2:
                raise ValueError(
                    f"{self.name}: hidden must be an array or, for lstm, a pair (h, c); got {len(hidden)} items"
                )
            params["hidden"], params["cell"] = hidden
            params["_cell_given"] = True
        return super().bind(params)  # type: ignore[return-value]

    def canonicalize(self, p: dict[str, Any]) -> RecurrentCellArgs:
        op = self.name
        cell_type = _cell_type(op, "cell_type", p.get("cell_type", "lstm"))
        bidirectional = p.get("bidirectional", False)
        if not isinstance(bidirectional, bool):
            raise TypeError(f"{op}: bidirectional must be a bool, got {type(bidirectional).__name__}")
        x = p["inputs"]
        batch, _, input_dim = (int(d) for d in x.shape)
        dirs = 2 if bidirectional else 1
        given = _weights(op, p.get("weights"), cell_type, bidirectional)
        n = len(GATES[cell_type])
        w_hh_key, w_hh = given[("", "w_hh")]
        hidden_dim = int(w_hh.shape[0])
        gates = n * hidden_dim
        names = "+".join(GATES[cell_type])
        want = {
            "w_ih": (input_dim, gates),
            "w_hh": (hidden_dim, gates),
            "b_ih": (gates,),
            "b_hh": (gates,),
        }
        layout = {
            "w_ih": f"[input_dim, {n} * hidden_dim] (gates {names})",
            "w_hh": f"[hidden_dim, {n} * hidden_dim] (gates {names})",
            "b_ih": f"[{n} * hidden_dim]",
            "b_hh": f"[{n} * hidden_dim]",
        }
        for (_, k), (src, w) in given.items():
            if tuple(int(d) for d in w.shape) != want[k]:
                raise ValueError(
                    f"{op}: weights[{src!r}] must be {layout[k]} = {want[k]} for a {cell_type} with inputs "
                    f"{shape_str(x)} and hidden_dim {hidden_dim} (from weights[{w_hh_key!r}] {shape_str(w_hh)}); "
                    f"got {shape_str(w)}"
                )
            if w.dtype != x.dtype:
                raise TypeError(f"{op}: weights[{src!r}] ({w.dtype}) must have the dtype of inputs ({x.dtype})")
        if bidirectional:
            for k in ("b_ih", "b_hh"):
                if (("", k) in given) != ((REVERSE_PREFIX, k) in given):
                    raise ValueError(
                        f"{op}: give {k} for both directions or neither: weights has "
                        f"{sorted(s for (_, kk), (s, _) in given.items() if kk == k)}"
                    )

        def stacked(k: str) -> Any:
            if ("", k) not in given:
                return None
            return jnp.stack([given[(pre, k)][1] for pre in ("", REVERSE_PREFIX)[:dirs]])

        h, c = p.get("hidden"), p.get("cell")
        cell_given = p.get("_cell_given", False)
        if c is not None and cell_type != "lstm":
            raise ValueError(f"{op}: hidden is a pair (h, c), which only an lstm takes; a {cell_type} takes h alone")
        if cell_given and c is None:
            raise ValueError(f"{op}: the lstm cell state c of hidden=(h, c) is None; pass an array or h alone")
        state_layout = f"[batch, hidden_dim] = {(batch, hidden_dim)}" + (
            f" or [2, batch, hidden_dim] = {(2, batch, hidden_dim)}" if bidirectional else ""
        )

        def state(name: str, s: Any) -> Any:
            if s is None:
                return None
            if s.ndim == 3 and bidirectional:
                ok = tuple(s.shape) == (2, batch, hidden_dim)
            else:
                ok = tuple(s.shape) == (batch, hidden_dim)
                s = jnp.broadcast_to(s[None], (dirs, batch, hidden_dim)) if ok else s
            if not ok:
                raise ValueError(
                    f"{op}: {name} must be {state_layout} (inputs {shape_str(x)}, hidden_dim {hidden_dim} from "
                    f"weights[{w_hh_key!r}]); got {shape_str(s)}"
                )
            return s

        h = state("hidden" if c is None else "hidden h", h)
        c = state("hidden c", c)
        if h is None:
            h = jnp.zeros((dirs, batch, hidden_dim), x.dtype)
        return RecurrentCellArgs.build(
            op,
            p,
            inputs=x,
            hidden=h,
            cell=c,
            w_ih=stacked("w_ih"),
            w_hh=stacked("w_hh"),
            b_ih=stacked("b_ih"),
            b_hh=stacked("b_hh"),
            cell_type=cell_type,
            bidirectional=bidirectional,
        )

    def output_axes_of(self, a: RecurrentCellArgs) -> Any:
        state = ("dirs", "batch", "hidden_dim") if a.bidirectional else ("batch", "hidden_dim")
        return ("batch", "seq", None), state

    def default_out_spec(self, a: RecurrentCellArgs, plan: ShardPlan) -> Any:
        out_axes, state_axes = self.output_axes_of(a)
        state = plan.spec_of(state_axes)
        return plan.spec_of(out_axes), ((state, state) if a.cell_type == "lstm" else state)

    def autotune_inputs(self, a: RecurrentCellArgs, seed: int = 0) -> RecurrentCellArgs:
        # Weights of the usual 1/sqrt(hidden) scale: unit-normal recurrent weights saturate the gates.
        out = a.random_like(seed)
        scale = 1.0 / max(a.hidden_dim, 1) ** 0.5
        changes = {
            n: (getattr(out, n).astype(jnp.float32) * scale).astype(a.dtype)
            for n in ("w_ih", "w_hh", "b_ih", "b_hh")
            if getattr(out, n) is not None
        }
        return dataclasses.replace(out, **changes)
