from .impl import XlaRecurrentCell

__all__ = ["XlaRecurrentCell"]
