"""The Triton ``recurrent_cell`` on the GPU beyond the shared conformance cases: the tiles the
heuristic picks at realistic sizes (weights resident and streamed, ragged hidden sizes, several
batch tiles, both directions) against the op's float32 reference, and bit-identical reruns."""

from __future__ import annotations

import pytest

from ejkernel.ops.recurrent_cell.cases import RecurrentCellCase
from ejkernel.testing import conformance as C

from .._triton_gpu_checks import assert_deterministic, public_op

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "case",
    [
        RecurrentCellCase("lstm-streamed-bf16", batch=64, seq=128, input_dim=256, hidden_dim=256, dtype="bfloat16"),
        RecurrentCellCase(
            "gru-bidirectional-resident", "gru", batch=33, seq=100, input_dim=96, hidden_dim=48, bidirectional=True
        ),
        RecurrentCellCase(
            "rnn-relu-ragged-fp16",
            "rnn",
            batch=20,
            seq=160,
            input_dim=64,
            hidden_dim=130,
            activation="relu",
            dtype="float16",
        ),
        RecurrentCellCase("lstm-hc-f32", batch=8, seq=96, input_dim=40, hidden_dim=200, state="hc"),
    ],
    ids=lambda c: c.name,
)
def test_recurrent_cell_heuristic_tiles(case):
    C.check(public_op("recurrent_cell", platform="triton"), case, op="recurrent_cell")


def test_deterministic():
    assert_deterministic("recurrent_cell", RecurrentCellCase("lstm", batch=40, seq=64, input_dim=32, hidden_dim=96))
