"""Why a launch failed, in a word a program can act on: LaunchError.reason, and the ``reason`` of
``shellper run --json``'s failure line (protocol/RUNTIME.md, "The launch contract")."""

from __future__ import annotations

from enum import StrEnum

from shellper.core.errors import ShellperError


class LaunchFailure(StrEnum):
    """Why a launch failed, for a program to act on (LaunchError.reason; ``shellper run --json`` prints it)."""

    ALREADY_RUNNING = "already_running"
    """A live shellper holds the session's lock: adopt it, or stop it first."""
    BAD_COMMAND = "bad_command"
    """The command cannot be started: empty, not found, not executable."""
    BAD_DIRECTORY = "bad_directory"
    """The child's working directory does not exist or is not a directory."""
    BAD_CONFIG = "bad_config"
    """Another option that cannot work (its message names it)."""
    CONTAINMENT = "containment"
    """The session's cgroup could not be made or joined."""
    FILES = "files"
    """A session file (log, record, socket, lock) could not be made."""
    DIED = "died"
    """The process meant to become the shellper died before it was ready."""
    TIMEOUT = "timeout"
    """The shellper did not report ready in time."""
    OTHER_OWNER = "other_owner"
    """The name's previous session, another owner's, was killed and left processes that its record is how
    that owner's reconcile finds: that owner reconciles (or reaps the name) first."""
    OTHER = "other"


class LaunchError(ShellperError, RuntimeError):
    """The session did not start; ``reason`` says why for a program, ``name`` and, when known, the log path
    say where to look."""

    def __init__(self, name: str, message: str, log: str | None = None,
                 reason: LaunchFailure = LaunchFailure.OTHER) -> None:
        super().__init__(message)
        self.name = name
        self.log = log
        self.reason = reason
