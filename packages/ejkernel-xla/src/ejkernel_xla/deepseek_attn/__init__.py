from .impl import XlaDeepSeekAttn

__all__ = ["XlaDeepSeekAttn"]
