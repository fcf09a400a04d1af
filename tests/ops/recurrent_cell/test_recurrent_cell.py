"""``recurrent_cell`` beyond the shared conformance suite: the convention pinned against
``torch.nn.LSTM``/``GRU``/``RNN`` and a NumPy float64 loop, gradients of every weight, the XLA
scan's memory (no per-step copies of the weights), and bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.ops.recurrent_cell import RecurrentCellConfig
from ejkernel.ops.recurrent_cell.cases import CASES, make_weights
from ejkernel.ops.recurrent_cell.reference import recurrent_cell_numpy, recurrent_cell_reference

OP = "recurrent_cell"
# float64 references differ from the float32 ones by float32 rounding over a short recurrence.
F32_TOL = 2e-5


def _inputs(cell_type, *, batch=3, seq=7, input_dim=5, hidden_dim=6, bias="split", bidirectional=False, seed=0):
    rng = np.random.default_rng(seed)
    dirs = 2 if bidirectional else 1
    w = make_weights(rng, cell_type, input_dim, hidden_dim, bias=bias, dirs=dirs)
    x = rng.standard_normal((batch, seq, input_dim)).astype(np.float32)
    h = (0.5 * rng.standard_normal((dirs, batch, hidden_dim))).astype(np.float32)
    c = (0.5 * rng.standard_normal((dirs, batch, hidden_dim))).astype(np.float32)
    return x, h, c, w


@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
@pytest.mark.parametrize(
    ("cell_type", "nonlinearity"), [("lstm", "tanh"), ("gru", "tanh"), ("rnn", "tanh"), ("rnn", "relu")]
)
def test_matches_torch(cell_type, nonlinearity, bidirectional):
    """PyTorch's modules with our weights (transposed) give our outputs and final states."""
    torch = pytest.importorskip("torch")
    x, h, c, w = _inputs(cell_type, bidirectional=bidirectional)
    input_dim, hidden_dim = x.shape[-1], h.shape[-1]
    kw = dict(input_size=input_dim, hidden_size=hidden_dim, batch_first=True, bidirectional=bidirectional)
    if cell_type == "lstm":
        mod = torch.nn.LSTM(**kw)
    elif cell_type == "gru":
        mod = torch.nn.GRU(**kw)
    else:
        mod = torch.nn.RNN(nonlinearity=nonlinearity, **kw)
    mod = mod.double()
    with torch.no_grad():
        for prefix, suffix in [("", "")] + ([("reverse_", "_reverse")] if bidirectional else []):
            getattr(mod, f"weight_ih_l0{suffix}").copy_(torch.from_numpy(w[prefix + "w_ih"].T.astype(np.float64)))
            getattr(mod, f"weight_hh_l0{suffix}").copy_(torch.from_numpy(w[prefix + "w_hh"].T.astype(np.float64)))
            getattr(mod, f"bias_ih_l0{suffix}").copy_(torch.from_numpy(w[prefix + "b_ih"].astype(np.float64)))
            getattr(mod, f"bias_hh_l0{suffix}").copy_(torch.from_numpy(w[prefix + "b_hh"].astype(np.float64)))
        th = torch.from_numpy(h.astype(np.float64))
        tx = torch.from_numpy(x.astype(np.float64))
        if cell_type == "lstm":
            t_out, (t_h, t_c) = mod(tx, (th, torch.from_numpy(c.astype(np.float64))))
            t_state = (t_h.numpy(), t_c.numpy())
        else:
            t_out, t_h = mod(tx, th)
            t_state = (t_h.numpy(),)
    t_out = t_out.numpy()
    if not bidirectional:
        t_state = tuple(s[0] for s in t_state)
    hidden = (h, c) if cell_type == "lstm" else h
    if not bidirectional:
        hidden = (h[0], c[0]) if cell_type == "lstm" else h[0]
    hidden_j = jax.tree.map(jnp.asarray, hidden)
    w_j = {k: jnp.asarray(v) for k, v in w.items()}
    args = dict(cell_type=cell_type, bidirectional=bidirectional, activation=nonlinearity)

    ref_out, ref_state = recurrent_cell_numpy(x, hidden, w, **args)
    np.testing.assert_allclose(ref_out, t_out, atol=1e-12)
    for ours, theirs in zip(jax.tree.leaves(ref_state), t_state, strict=True):
        np.testing.assert_allclose(ours, theirs, atol=1e-12)

    out, state = ejkernel.recurrent_cell(jnp.asarray(x), hidden_j, w_j, **args)
    np.testing.assert_allclose(np.asarray(out), t_out, atol=F32_TOL)
    for ours, theirs in zip(jax.tree.leaves(state), t_state, strict=True):
        np.testing.assert_allclose(np.asarray(ours), theirs, atol=F32_TOL)


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.dtype == "float32" and isinstance(c.activation, str)], ids=lambda c: c.name
)
def test_jax_reference_matches_numpy_float64(case):
    kw = case.inputs(0)
    np_kw = jax.tree.map(lambda v: np.asarray(v) if isinstance(v, jax.Array) else v, kw)
    out, state = recurrent_cell_reference(**kw)
    ref_out, ref_state = recurrent_cell_numpy(**np_kw)
    np.testing.assert_allclose(np.asarray(out), ref_out, atol=F32_TOL)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(ref_state), strict=True):
        np.testing.assert_allclose(np.asarray(a), b, atol=F32_TOL)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize(
    "case",
    [
        c
        for c in CASES
        if c.dtype == "float32"
        and c.name in ("lstm-hc-odd", "gru-bidirectional-shared-state", "rnn", "lstm-bidirectional")
    ],
    ids=lambda c: c.name,
)
def test_gradients_of_every_weight(case, jit):
    """The conformance suite differentiates the array arguments; the weights dict is checked here."""
    kw = case.inputs(0)
    rng = np.random.default_rng(1)
    ref = recurrent_cell_reference(**kw)
    cots = [jnp.asarray(rng.standard_normal(o.shape), jnp.float32) for o in jax.tree.leaves(ref)]

    def loss(fn):
        def f(w, x, hidden):
            outs = jax.tree.leaves(
                fn(x, hidden, w, kw["cell_type"], bidirectional=kw["bidirectional"], activation=kw["activation"])
            )
            return sum(jnp.sum(o.astype(jnp.float32) * ct) for o, ct in zip(outs, cots, strict=True))

        return jax.grad(f, argnums=(0, 1, 2))

    ours = loss(ejkernel.recurrent_cell)
    if jit:
        ours = jax.jit(ours)
    g = ours(kw["weights"], kw["inputs"], kw["hidden"])
    g_ref = loss(recurrent_cell_reference)(kw["weights"], kw["inputs"], kw["hidden"])
    assert set(g[0]) == set(kw["weights"])
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_ref), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4, rtol=1e-4)


def test_scan_unroll_gives_the_same_result():
    """``RecurrentCellConfig.unroll`` (steps per scan iteration, a remainder included) changes
    nothing but the schedule."""
    x, h, _, w = _inputs("lstm", seq=11, bidirectional=True)
    one = ejkernel.recurrent_cell(x, h, w, bidirectional=True, platform="xla", cfg=RecurrentCellConfig(unroll=1))
    three = ejkernel.recurrent_cell(x, h, w, bidirectional=True, platform="xla", cfg=RecurrentCellConfig(unroll=3))
    for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(three), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


def test_single_bias_is_the_sum_of_the_split_ones():
    x, h, _, w = _inputs("lstm")
    split = ejkernel.recurrent_cell(x, h[0], w, "lstm")
    single = {"w_ih": w["w_ih"], "w_hh": w["w_hh"], "b": w["b_ih"] + w["b_hh"]}
    np.testing.assert_allclose(
        np.asarray(ejkernel.recurrent_cell(x, h[0], single, "lstm")[0]), np.asarray(split[0]), atol=1e-6
    )


def test_lstm_cell_state_defaults_to_zeros_and_hidden_none_to_zeros():
    x, h, _, w = _inputs("lstm")
    zeros = np.zeros_like(h[0])
    a = ejkernel.recurrent_cell(x, h[0], w)
    b = ejkernel.recurrent_cell(x, (h[0], zeros), w)
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
    n = ejkernel.recurrent_cell(x, None, w)
    z = ejkernel.recurrent_cell(x, zeros, w)
    np.testing.assert_array_equal(np.asarray(n[0]), np.asarray(z[0]))


def test_backward_direction_reads_the_reversed_sequence():
    """The backward half of a bidirectional output is the forward cell of the reverse_ weights
    run over the flipped sequence, flipped back; its final state is that run's."""
    x, h, _, w = _inputs("gru", bidirectional=True)
    out, state = ejkernel.recurrent_cell(x, h, w, "gru", bidirectional=True)
    rev = {k.removeprefix("reverse_"): v for k, v in w.items() if k.startswith("reverse_")}
    r_out, r_state = ejkernel.recurrent_cell(x[:, ::-1], h[1], rev, "gru")
    hd = h.shape[-1]
    np.testing.assert_allclose(np.asarray(out[..., hd:]), np.asarray(r_out[:, ::-1]), atol=1e-6)
    np.testing.assert_allclose(np.asarray(state[1]), np.asarray(r_state), atol=1e-6)


def test_scan_memory_does_not_grow_with_copies_of_the_weights():
    """Forward temporaries grow with the sequence by the projection and output rows of each
    step, not by a per-step copy of ``w_hh``."""
    hd, d, b = 64, 32, 4

    def temp(seq):
        x = jax.ShapeDtypeStruct((b, seq, d), jnp.float32)
        h = jax.ShapeDtypeStruct((b, hd), jnp.float32)
        w = {
            "w_ih": jax.ShapeDtypeStruct((d, 4 * hd), jnp.float32),
            "w_hh": jax.ShapeDtypeStruct((hd, 4 * hd), jnp.float32),
        }
        f = jax.jit(lambda x, h, w: ejkernel.recurrent_cell(x, h, w, platform="xla"))
        return f.lower(x, h, w).compile().memory_analysis().temp_size_in_bytes

    small, large = temp(64), temp(256)
    # Per step: the float32 projection and output rows and their transposes, far below a copy of
    # w_hh (64 KiB here).
    per_step = (large - small) / (256 - 64)
    assert per_step < hd * 4 * hd * 4 / 4, (small, large)


BAD = [
    (
        lambda x, h, w: ejkernel.recurrent_cell(x, h, {**w, "w_hh": w["w_hh"][:, :-1]}),
        ValueError,
        r"weights\['w_hh'\] must be \[hidden_dim, 4 \* hidden_dim\]",
    ),
    (
        lambda x, h, w: ejkernel.recurrent_cell(x, h, {**w, "w_ih": w["w_ih"][:-1]}),
        ValueError,
        r"weights\['w_ih'\] must be .* = \(5, 24\).*got \(4, 24\)",
    ),
    (
        lambda x, h, w: ejkernel.recurrent_cell(x, h, {k: v for k, v in w.items() if k != "w_ih"}),
        ValueError,
        r"weights\['w_ih'\] is required",
    ),
    (
        lambda x, h, w: ejkernel.recurrent_cell(x, h, {**w, "w_xx": w["w_ih"]}),
        ValueError,
        r"unknown weights keys \['w_xx'\]",
    ),
    (
        lambda x, h, w: ejkernel.recurrent_cell(x, h, {**w, "reverse_w_ih": w["w_ih"]}),
        ValueError,
        r"need bidirectional=True",
    ),
    (
        lambda x, h, w: ejkernel.recurrent_cell(x, h, w, bidirectional=True),
        ValueError,
        r"weights\['reverse_w_ih'\] is required",
    ),
    (
        lambda x, h, w: ejkernel.recurrent_cell(x, h, {**w, "b": w["b_ih"]}),
        ValueError,
        r"weights\['b'\] or weights\['b_ih'\], not both",
    ),
    (
        lambda x, h, w: ejkernel.recurrent_cell(x, h, w, "gru"),
        ValueError,
        r"weights\['w_ih'\] must be \[input_dim, 3 \* hidden_dim\]",
    ),
    (
        lambda x, h, w: ejkernel.recurrent_cell(x, h[:, :-1], w),
        ValueError,
        r"hidden must be \[batch, hidden_dim\] = \(3, 6\).*got \(3, 5\)",
    ),
    (
        lambda x, h, w: ejkernel.recurrent_cell(x, (h, h[:2]), w),
        ValueError,
        r"hidden c must be \[batch, hidden_dim\] = \(3, 6\)",
    ),
    (
        lambda x, h, w: ejkernel.recurrent_cell(x, h, w, "lstmm"),
        ValueError,
        r"cell_type must be one of \('lstm', 'gru', 'rnn'\)",
    ),
    (lambda x, h, w: ejkernel.recurrent_cell(x, h, w, activation="gelu"), ValueError, r"activation must be one of"),
    (lambda x, h, w: ejkernel.recurrent_cell(x, h, [w["w_ih"]]), TypeError, r"weights must be a dict"),
    (lambda x, h, w: ejkernel.recurrent_cell(x[0], h, w), ValueError, r"inputs must be 3-D"),
    (
        lambda x, h, w: ejkernel.recurrent_cell(x, h, {**w, "w_hh": w["w_hh"].astype(jnp.bfloat16)}),
        TypeError,
        r"weights\['w_hh'\] \(bfloat16\) must have the dtype of inputs",
    ),
    (
        lambda x, h, w: ejkernel.recurrent_cell(x, h, {**w, "b_hh": w["b_hh"].astype(jnp.int32)}),
        TypeError,
        r"weights\['b_hh'\] must have a floating dtype",
    ),
]


@pytest.mark.parametrize(("call", "error", "match"), BAD, ids=[m[:40] for *_, m in BAD])
def test_bad_input(call, error, match):
    x, h, _, w = _inputs("lstm")
    with pytest.raises(error, match=match):
        call(jnp.asarray(x), jnp.asarray(h[0]), {k: jnp.asarray(v) for k, v in w.items()})


def test_gru_rejects_the_single_bias_and_an_hc_pair():
    x, h, _, w = _inputs("gru")
    with pytest.raises(ValueError, match=r"a gru takes b_ih and b_hh separately"):
        ejkernel.recurrent_cell(x, h[0], {"w_ih": w["w_ih"], "w_hh": w["w_hh"], "b": w["b_ih"]}, "gru")
    with pytest.raises(ValueError, match=r"only an lstm takes"):
        ejkernel.recurrent_cell(x, (h[0], h[0]), w, "gru")


def test_bidirectional_biases_for_both_directions_or_neither():
    x, h, _, w = _inputs("rnn", bidirectional=True)
    del w["reverse_b_hh"]
    with pytest.raises(ValueError, match=r"give b_hh for both directions or neither"):
        ejkernel.recurrent_cell(x, h, w, "rnn", bidirectional=True)
