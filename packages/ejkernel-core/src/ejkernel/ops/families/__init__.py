"""Contracts shared by several ops of one family (arguments, signature, implementation base)."""
