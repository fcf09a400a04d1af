"""``recurrent_cell``: LSTM, GRU and vanilla RNN cells over a sequence, optionally bidirectional
(not the registry's ``recurrent``, which is ``recurrent_attention``)."""

from .api import recurrent_cell
from .op import RecurrentCell, RecurrentCellArgs, RecurrentCellConfig

__all__ = ["RecurrentCell", "RecurrentCellArgs", "RecurrentCellConfig", "recurrent_cell"]
