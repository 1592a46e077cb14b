"""One session of a Fleet as an object: every request, its state, its screen and its offsets in one place.

``fleet.session(name)`` returns a :class:`SessionHandle` (as asyncssh's ``SSHClientProcess`` is one remote
process): what was spread over ``Fleet`` (launch, stop, spawn, relaunch) and ``fleet.client(name)`` (write,
resize, signal, status) is here, with docstrings. The handle names the session, not one shellper instance:
after a relaunch or a respawn it reaches the new one. Its output and events stay in the Fleet's one merged
stream (``async for item in fleet``) unless the handle's own :meth:`~SessionHandle.stream` is open: then they
go there, and the Tower acknowledges them the same way.
"""

from __future__ import annotations

from typing import Protocol

from shellper.client.launch import LaunchInfo
from shellper.protocol import wire
from tower_client.client import AsyncClient, AsyncResumingClient, OutputPosition, SessionGone
from tower_client.fleetmember import Member
from tower_client.fleetstream import SessionStream
from tower_client.progress import JournalPosition, ProgressJournal
from tower_client.registry_file import RegistryFile
from tower_client.stream import FleetState

__all__ = ["SessionHandle"]


class Fleet(Protocol):
    """What a handle uses of :class:`tower_client.fleet.Fleet` (which imports this module)."""

    dir: str
    journal: ProgressJournal
    registry: RegistryFile

    def _member(self, name: str) -> Member: ...
    def _open_stream(self, name: str) -> SessionStream: ...
    def state(self, name: str) -> FleetState | None: ...
    def client(self, name: str) -> AsyncResumingClient: ...
    async def spawn(self, name: str, argv: list[str] | None = None, *, cwd: str | None = None,
                    env: dict[str, str] | None = None, timeout: float = 10.0) -> int: ...
    async def stop(self, name: str, grace: float | None = None, *, forget: bool = True) -> None: ...
    async def relaunch(self, name: str) -> LaunchInfo: ...


class SessionHandle:
    """A session of a :class:`~tower_client.fleet.Fleet`, by name. Every request raises UnknownSession once
    the session has left the Fleet, FleetClosed once the Fleet is closed, and the session's own errors
    (SessionGone while its connection is down, Forbidden, SessionStopping...) as the clients do."""

    def __init__(self, fleet: Fleet, name: str) -> None:
        self.fleet = fleet
        self.name = name

    def __repr__(self) -> str:
        return f"<SessionHandle {self.name!r} of {self.fleet.dir!r}>"

    # ----------------------------------------------------------------------------------- what it is now

    @property
    def instance_id(self) -> str:
        """The shellper instance the Fleet follows now (a relaunch or respawn makes a new one)."""
        return self.fleet._member(self.name).instance_id

    @property
    def state(self) -> FleetState | None:
        """The state the merged stream last reported for it (None before its first StateChange)."""
        return self.fleet.state(self.name)

    @property
    def shellper_pid(self) -> int:
        return self.fleet._member(self.name).record.shellper_pid

    @property
    def client(self) -> AsyncResumingClient:
        """Its resuming client, connected as its tower (requests not wrapped here go through it)."""
        return self.fleet.client(self.name)

    @property
    def received(self) -> OutputPosition:
        """How far its output has been read from the shellper (``next_offset``) and the gaps met."""
        return self.client.output

    @property
    def acknowledged(self) -> JournalPosition | None:
        """How far the Tower has acknowledged its stream (output offset, event number): where the next
        start resumes it. None if nothing of it is journalled."""
        self.fleet._member(self.name)  # the same refusals as every other view
        return self.fleet.journal.get(self.name)

    @property
    def columns(self) -> dict[str, object]:
        """Its registry row: the Tower's own columns, and the Fleet's ``launch`` (and ``agent``)."""
        self.fleet._member(self.name)
        return dict(self.fleet.registry.get(self.name) or {})

    def stream(self) -> SessionStream:
        """Its own stream of items (output, states, events, the Fleet's notices about it), as asyncssh's
        process has its own output: ``async with handle.stream() as items: async for item in items: ...``.
        While it is open the session's items go there and not to the merged stream; closed (leaving the
        ``async with``), what it had not handed out and everything later goes to the merged stream again, in
        order. Acknowledge as for the merged stream (``fleet.ack(item)`` or ``items.ack(item)``). One open
        stream per session (FleetError for a second). It ends when the session leaves the Fleet, after its
        last item, and when the Fleet closes."""
        return self.fleet._open_stream(self.name)

    # ----------------------------------------------------------------------------------- the terminal

    async def write(self, data: bytes, timeout: float | None = None) -> None:
        """Input for the child (no default timeout: a slow child legitimately holds input back)."""
        await self.client.write(data, timeout)

    async def resize(self, cols: int, rows: int, timeout: float | None = None) -> None:
        """Set the terminal's size; BadRequest out of range, SessionStopping while it stops."""
        await self.client.resize(cols, rows, timeout)

    async def signal(self, name: str, timeout: float | None = None) -> int | None:
        """Signal the child's process group (``name`` one of wire.SIGNALS, "TERM", "INT"...); the pid
        signalled, or None from a version-2 shellper. NotRunning if no child runs."""
        return await self.client.signal(name, timeout)

    async def status(self, timeout: float | None = None) -> wire.StatusReply:
        """The shellper's STATUS: state, child pid, offsets, restarts, size, clients..."""
        return await self.client.status(timeout)

    async def screen(self, *, ansi: bool = False, scrollback: int = 0,
                     timeout: float | None = None) -> wire.ScreenReply:
        """The rendered screen now (what a terminal attached now would show), as plain rows or with SGR
        sequences (``ansi``), with up to ``scrollback`` lines above it; ``offset`` says where in the output
        it stands. Needs a version-3 shellper (InvalidRequest from an older one)."""
        live = self._live()
        request = wire.ScreenRequest(format="ansi" if ansi else "text", scrollback=scrollback)
        reply = await live._request(live.conn.checked(request), timeout)
        assert isinstance(reply, wire.ScreenReply)
        return reply

    # ----------------------------------------------------------------------------------- its life

    async def spawn(self, argv: list[str] | None = None, *, cwd: str | None = None,
                    env: dict[str, str] | None = None, timeout: float = 10.0) -> int:
        """Start its child again (the old child's tree is ended first); the new child's pid. See
        :meth:`Fleet.spawn <tower_client.fleet.Fleet.spawn>`."""
        return await self.fleet.spawn(self.name, argv, cwd=cwd, env=env, timeout=timeout)

    async def stop(self, grace: float | None = None, *, forget: bool = True) -> None:
        """End the session (and, with ``forget``, drop its registry row: the handle is then unknown). See
        :meth:`Fleet.stop <tower_client.fleet.Fleet.stop>`."""
        await self.fleet.stop(self.name, grace, forget=forget)

    async def relaunch(self) -> LaunchInfo:
        """A fresh shellper from its registry row (the old one is stopped first); the handle follows it."""
        return await self.fleet.relaunch(self.name)

    def _live(self) -> AsyncClient:
        resuming = self.client
        if resuming.client is None:
            raise SessionGone(resuming.path, "not connected (reconnecting or ended)")
        return resuming.client
