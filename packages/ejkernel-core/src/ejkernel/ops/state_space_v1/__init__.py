"""``state_space_v1``: Mamba-1's selective scan (S6), sequences and single decode steps."""

from .api import state_space_v1
from .op import StateSpaceV1, StateSpaceV1Args, StateSpaceV1Config, gate_activation

__all__ = ["StateSpaceV1", "StateSpaceV1Args", "StateSpaceV1Config", "gate_activation", "state_space_v1"]
