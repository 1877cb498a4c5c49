"""The kernix version (one place; read by the cache keys and the packaging)."""

__version__ = "0.2.0"
