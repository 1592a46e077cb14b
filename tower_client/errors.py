"""The Fleet's own errors, apart from the Fleet so ``tower_client`` can export them without importing it
(the CLI does not pay for the Fleet). Every one is a :class:`~shellper.core.errors.ShellperError`."""

from __future__ import annotations

from shellper.core.errors import ShellperError

__all__ = ["FleetClosed", "FleetError", "FleetNotStarted", "UnknownSession"]


class FleetError(ShellperError):
    """A Fleet operation that cannot be done; ``session`` names the session when there is one."""

    def __init__(self, session: str | None, message: str) -> None:
        self.session = session
        super().__init__(message)


class UnknownSession(FleetError, KeyError):
    """No session of that name is in the Fleet."""

    def __str__(self) -> str:
        return str(self.args[0])


class FleetNotStarted(FleetError):
    """The Fleet has not been started (``await fleet.start()`` or ``async with fleet``): it has not adopted
    what runs yet, so launching or stopping now would race its own start."""


class FleetClosed(FleetError):
    """The Fleet was closed: it no longer watches, reads or launches (its sessions run on). Make a new one."""
