"""reluexp: config-driven experiments for custom PyTorch autograd Functions."""

__version__ = "0.1.0"
