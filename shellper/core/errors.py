"""The one exception family: every error shellper and tower_client raise on purpose derives from it."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import os


class ShellperError(Exception):
    """Catch this to catch any of shellper's own errors. Subclasses keep a standard mixin where callers
    expect one (a bad value is also a ValueError, a failed launch a RuntimeError)."""


class BadArgument(ShellperError, ValueError):
    """A caller passed a value the library cannot use (out of range, malformed); nothing was done with it."""


class BadArgumentType(ShellperError, TypeError):
    """A caller passed a value of the wrong type; nothing was done with it."""


class InsideEventLoop(ShellperError, RuntimeError):
    """A blocking call made from inside a running asyncio event loop, which it would have to block: await
    its ``_async`` form instead."""


class ClientError(ShellperError):
    """Talking to a session failed; ``path`` is its socket. Here, not with the protocol's other client errors
    (shellper.protocol.connection), so what refuses a socket before any frame is sent needs no codec."""

    def __init__(self, path: str | os.PathLike[str], message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = str(path)
        self.message = message
