from .impl import XlaMeanPooling

__all__ = ["XlaMeanPooling"]
