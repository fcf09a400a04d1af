"""``flash_mla_decode``: multi-head latent attention decode over a paged latent cache (the absorbed
form, FlashMLA's ``flash_mla_with_kvcache``)."""

from .api import flash_mla_decode
from .op import FlashMLADecode, FlashMLADecodeArgs, FlashMLADecodeConfig

__all__ = ["FlashMLADecode", "FlashMLADecodeArgs", "FlashMLADecodeConfig", "flash_mla_decode"]
