from .impl import TritonFlashMLADecode

__all__ = ["TritonFlashMLADecode"]
