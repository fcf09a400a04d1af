from .impl import TritonDeepSeekAttn

__all__ = ["TritonDeepSeekAttn"]
