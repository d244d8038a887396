"""reluexp: config-driven experiments for custom PyTorch autograd Functions."""

# The package's metadata reads it from here (pyproject.toml); CHANGELOG.md says what changed.
__version__ = "0.6.1"
