"""rnnlab's version, in one place: ``pyproject.toml`` reads it when the package is built, and the
pages and results record it, also when rnnlab runs from a checkout that was never installed."""

__version__ = "0.1.0"
