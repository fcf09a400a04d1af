"""``deepseek_attn``: DeepSeek sparse attention, a lightning indexer's top-k keys attended with
multi-head latent attention."""

from .api import deepseek_attn
from .op import DeepSeekAttn, DeepSeekAttnArgs, DeepSeekAttnConfig

__all__ = ["DeepSeekAttn", "DeepSeekAttnArgs", "DeepSeekAttnConfig", "deepseek_attn"]
