"""Backends that ship with the core (only the NumPy CPU backend)."""
