"""The plugin system: the contract (hookspecs, manifest, Backend base), discovery (entry points,
probing, registry), the process state built from it (default device) and the doctor report.

Depends on ``neurenix_core.errors``, ``config`` and ``device`` only; nothing here imports the tensor
layer or the model stack. Empty on purpose: import the module you need.
"""
