"""Training helpers beyond the tape: mixed precision (amp.py) and compiled training steps (step.py)."""
