"""``gated_delta_rule``: the delta rule with a scalar decay per head (Gated DeltaNet, Qwen3-Next)."""

from .api import gated_delta_rule
from .op import GatedDeltaRule, GatedDeltaRuleArgs, GatedDeltaRuleConfig

__all__ = ["GatedDeltaRule", "GatedDeltaRuleArgs", "GatedDeltaRuleConfig", "gated_delta_rule"]
