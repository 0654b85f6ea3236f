"""The core's version, in a module that imports nothing: modules below the package ``__init__``
(model files, compiled artifacts) record it without importing the package's lazy namespace."""

__version__ = "0.1.0"
