"""envsolver: GPU models and a driver in, a consistent conda GPU training stack out."""

__version__ = "0.1.0"
