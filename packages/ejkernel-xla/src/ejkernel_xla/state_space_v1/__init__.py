from .impl import XlaStateSpaceV1

__all__ = ["XlaStateSpaceV1"]
