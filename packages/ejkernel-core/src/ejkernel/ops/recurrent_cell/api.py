"""The public function ``recurrent_cell``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from jaxtyping import Array, Float

from ..executor import define
from .op import RecurrentCell

__all__ = ["recurrent_cell"]


@define(RecurrentCell)
def recurrent_cell(
    inputs: Float[Array, "batch seq input_dim"],
    hidden: Float[Array, "batch hidden_dim"]
    | Float[Array, "2 batch hidden_dim"]
    | tuple[Float[Array, "batch hidden_dim"], Float[Array, "batch hidden_dim"]]
    | None,
    weights: dict[str, Float[Array, "..."]],
    cell_type: Literal["lstm", "gru", "rnn"] = "lstm",
    *,
    bidirectional: bool = False,
    activation: Literal["tanh", "relu"] | Callable[[Array], Array] = "tanh",
) -> tuple[Float[Array, "batch seq out_dim"], Any]:
    """An LSTM, GRU or vanilla RNN cell run over a sequence (optionally in both directions).

    Not the registry's ``"recurrent"``: in the earlier releases that name (``get_kernel("recurrent")``,
    ``ejkernel.kernels._triton.recurrent``) is :func:`recurrent_attention`, the linear-attention
    recurrence. This op is the kernel documents' "Recurrent Kernels".

    The equations are PyTorch's (``torch.nn.LSTM``, ``GRU``, ``RNN``; the tests pin them against
    torch) with the weights transposed to ``[in, gates]``, so a model multiplies ``x @ w``. With
    ``H = hidden_dim`` and ``σ`` the sigmoid, at each step ``t`` (``act`` is ``activation``, tanh
    by default):

    - ``"lstm"``, gate blocks ``i, f, g, o`` (``4H`` columns in this order):
      ``[i f g o] = x_t @ w_ih + b_ih + h @ w_hh + b_hh``; ``c = σ(f)·c + σ(i)·act(g)``;
      ``h = σ(o)·act(c)``;
    - ``"gru"``, gate blocks ``r, z, n`` (``3H``), PyTorch's placement of ``b_hh``'s n block inside
      the reset gate's product: ``r = σ(x_t W_ir + b_ir + h W_hr + b_hr)``, ``z`` likewise,
      ``n = act(x_t W_in + b_in + r·(h W_hn + b_hn))``, ``h = (1 - z)·n + z·h``;
    - ``"rnn"`` (``H``): ``h = act(x_t @ w_ih + b_ih + h @ w_hh + b_hh)``.

    The weights dict (keys of one direction; a missing bias is zero):

    ============  ==========================  =========================================
    key           shape                       note
    ============  ==========================  =========================================
    ``w_ih``      ``[input_dim, G·H]``        required
    ``w_hh``      ``[H, G·H]``                required; gives ``hidden_dim``
    ``b_ih``      ``[G·H]``                   optional
    ``b_hh``      ``[G·H]``                   optional
    ``b``         ``[G·H]``                   lstm and rnn: one bias, ``b_ih + b_hh`` (not with ``b_ih``)
    ============  ==========================  =========================================

    with ``G`` = 4 (lstm), 3 (gru), 1 (rnn). PyTorch's ``weight_ih_l0`` is ``w_ih.T``. With
    ``bidirectional=True`` the backward direction's weights are the same keys prefixed
    ``"reverse_"`` (``reverse_w_ih``, ``reverse_w_hh``, ...; PyTorch's ``*_l0_reverse``); both
    directions have biases or neither.

    ``activation`` replaces the candidate and output nonlinearity (the lstm's ``g`` and ``c``
    activations, the gru's ``n``, the rnn's); the gates stay sigmoids (Keras' ``activation``).
    A callable runs on the XLA implementation only (feature ``custom_activation``).

    Args:
        inputs: ``[batch, seq, input_dim]`` (``seq`` may be 0).
        hidden: the initial state. ``[batch, hidden_dim]``; when bidirectional, also
            ``[2, batch, hidden_dim]`` (forward, backward; ``[batch, hidden_dim]`` starts both
            directions from the same state). An lstm takes ``h`` alone (its cell state ``c``
            starts at zeros) or a pair ``(h, c)`` of such arrays. ``None``: zeros.
        weights: the dict above, every array of ``inputs``' dtype.
        cell_type: ``"lstm"``, ``"gru"`` or ``"rnn"``.
        bidirectional: run a second cell over the reversed sequence (PyTorch's
            ``bidirectional=True``) and concatenate its outputs after the forward ones.
        activation: ``"tanh"``, ``"relu"`` or a callable (see above).
        platform, cfg: implementation and :class:`RecurrentCellConfig`.
        mesh, in_specs, out_specs: run under ``shard_map``; only the batch axis may be sharded.

    Returns:
        ``(outputs, final_state)``. ``outputs [batch, seq, hidden_dim]`` (bidirectional:
        ``[batch, seq, 2 * hidden_dim]``, the forward direction's ``h`` then the backward one's, at
        each input position), in ``inputs``' dtype. ``final_state``: ``h [batch, hidden_dim]``
        after the last step (bidirectional: ``[2, batch, hidden_dim]``, the backward direction's
        after it reached position 0); an lstm returns ``(h, c)`` of those shapes. With ``seq``
        0 the final state is the initial one.

    States are carried in float32 between steps; matmuls take the state in the weights' dtype
    and accumulate in float32. Differentiable in ``inputs``, ``hidden`` and every weight.

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> b, s, d, h = 2, 7, 5, 8
        >>> ks = jax.random.split(jax.random.key(0), 3)
        >>> w = {"w_ih": 0.3 * jax.random.normal(ks[0], (d, 4 * h)),
        ...      "w_hh": 0.3 * jax.random.normal(ks[1], (h, 4 * h)), "b": jnp.zeros(4 * h)}
        >>> x = jax.random.normal(ks[2], (b, s, d))
        >>> out, (h_n, c_n) = ejkernel.recurrent_cell(x, jnp.zeros((b, h)), w, "lstm")
        >>> out.shape, h_n.shape, c_n.shape
        ((2, 7, 8), (2, 8), (2, 8))
    """
    raise NotImplementedError  # define() supplies the body
