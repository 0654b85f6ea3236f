"""The ground truth every lowering is checked against: ``run`` (``run_graph`` in float64,
``run_quantized`` with TFLite's integer arithmetic) and ``interpreter`` (the NumPy graph
interpreter behind them and behind cpu:0's ``numpy`` runtime). Empty on purpose."""
