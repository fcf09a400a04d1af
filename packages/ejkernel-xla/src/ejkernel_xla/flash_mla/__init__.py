from .impl import XlaFlashMLA

__all__ = ["XlaFlashMLA"]
