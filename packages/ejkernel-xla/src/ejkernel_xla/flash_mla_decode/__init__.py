from .impl import XlaFlashMLADecode

__all__ = ["XlaFlashMLADecode"]
