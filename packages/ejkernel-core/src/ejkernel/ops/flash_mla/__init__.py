"""``flash_mla`` (earlier name ``mla_attention``): multi-head latent attention over a shared latent
key/value, computed in the absorbed form."""

from .api import flash_mla, mla_attention
from .op import FlashMLA, FlashMLAArgs, FlashMLAConfig

__all__ = ["FlashMLA", "FlashMLAArgs", "FlashMLAConfig", "flash_mla", "mla_attention"]
