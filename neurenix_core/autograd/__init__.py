"""Reverse-mode automatic differentiation on the core's own ops (tape.py, rules.py, engine.py, grad.py)."""
