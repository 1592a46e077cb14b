"""What execve(2) can carry: strings without NUL bytes, and variable names without '='.

Shared by the launcher's config check (shellper.core.config) and the child's environment (shellper.host.child),
so a bad variable is refused the same way before a process starts and when a SPAWN brings it.
"""

from __future__ import annotations


def env_problem(key: object, value: object) -> str | None:
    """Why ``key=value`` cannot be in a child's environment, or None."""
    if not isinstance(key, str) or not isinstance(value, str):
        # The value is not quoted, nor the key when the value is a string: either may be a secret.
        return (f"expected strings, got a {type(key).__name__} name" if not isinstance(key, str) else
                f"expected strings, got a {type(value).__name__} for {key!r:.40}")
    if not key or "=" in key or "\0" in key:
        return f"invalid variable name {key!r:.80} (environment variable names are non-empty, without '=' or NUL)"
    if "\0" in value:
        return f"environment variable {key} contains a NUL byte"
    return None


def has_nul(texts: list[str] | tuple[str, ...]) -> bool:
    """Whether any of ``texts`` (an argv, a cwd) holds a NUL byte, which would end it early in execve."""
    return any("\0" in text for text in texts)
