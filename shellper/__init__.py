"""shellper: one long-lived process per terminal session, holding the PTY, its scrollback and its clients."""

__version__ = "0.1.0"

__all__ = ["__version__"]
