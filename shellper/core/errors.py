"""The one exception family: every error shellper and tower_client raise on purpose derives from it."""

from __future__ import annotations


class ShellperError(Exception):
    """Catch this to catch any of shellper's own errors. Subclasses keep a standard mixin where callers
    expect one (a bad value is also a ValueError, a failed launch a RuntimeError)."""
