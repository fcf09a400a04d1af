"""``state_space_v2``: Mamba-2's selective state space (SSD), chunked, memory linear in the length."""

from .api import state_space_v2
from .op import StateSpaceV2, StateSpaceV2Args, StateSpaceV2Config

__all__ = ["StateSpaceV2", "StateSpaceV2Args", "StateSpaceV2Config", "state_space_v2"]
