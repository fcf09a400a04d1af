"""``attention``: plain multi-head attention returning ``(output, attention_weights)``."""

from .api import attention
from .op import Attention, AttentionConfig

__all__ = ["Attention", "AttentionConfig", "attention"]
