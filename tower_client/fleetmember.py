"""One session a :class:`~tower_client.fleet.Fleet` runs: its record, pidfd, resuming client and reader."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from shellper.core.exitrecord import ExitRecord
from shellper.host.identity import PidFd
from shellper.host.paths import SessionPaths
from shellper.host.record import SessionRecord
from tower_client.client import AsyncResumingClient, SessionGone
from tower_client.remote_clients import AsyncRemoteResumingClient
from tower_client.resume import Reconnect
from tower_client.stream import FleetState, StateTracker


class _EndsWhenDead(AsyncResumingClient):
    """A resuming client that stops reconnecting the moment its shellper is known dead (its pidfd, or its
    host's watch, said so), instead of trying a stale socket through its whole backoff."""

    died: asyncio.Event

    async def _reconnect(self, step: Reconnect) -> None:
        """The attempt, unless the shellper dies first: then the stream ends, as SessionGone."""
        if not self.died.is_set():
            loop = asyncio.get_running_loop()
            attempt = loop.create_task(super()._reconnect(step))
            died = loop.create_task(self.died.wait())
            try:
                await asyncio.wait({attempt, died}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (attempt, died):
                    if not task.done():
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await task
            if not attempt.cancelled() and attempt.done():
                attempt.result()  # reconnected, or what the stream made of its failure
                return
        self.state.give_up(SessionGone(self.path, "the shellper died"))


class FleetClient(_EndsWhenDead):
    """A local session's client: ends when the shellper's pidfd says it died."""

    def __init__(self, path: str, died: asyncio.Event, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.died = died


class FleetRemoteClient(_EndsWhenDead, AsyncRemoteResumingClient):
    """A session on another host, through ``shellper bridge`` over the host's shared ssh connection: ends when
    the host's watch says the shellper died; while the host cannot be reached it keeps trying (its backoff
    is the Fleet's host backoff, without a last attempt): the session there is left alone, not given up."""

    def __init__(self, host: str, name: str, died: asyncio.Event, **kwargs: Any) -> None:
        AsyncRemoteResumingClient.__init__(self, host, name, **kwargs)
        self.died = died


class Member:
    """One session the Fleet runs: its record, pidfd, resuming client and reader."""

    def __init__(self, name: str, record: SessionRecord, paths: SessionPaths, pidfd: PidFd | None,
                 host: str | None = None) -> None:
        self.name = name
        self.host = host
        """The ssh destination of a session on another host (None: this machine's); its shellper has no
        pidfd here, its host's watch (tower_client.fleethosts) says when it dies."""
        self.record = record
        self.paths = paths
        self.pidfd = pidfd
        self.instance_id = record.instance_id
        self.died = asyncio.Event()
        """The shellper process has exited (its pidfd became readable, or its host's watch said so)."""
        self.stopping = False
        self.client: _EndsWhenDead | None = None
        self.task: asyncio.Task[None] | None = None
        self.tracker = StateTracker(name, record.instance_id)
        self.pending = 0
        self.room = asyncio.Event()
        self.room.set()
        self.spawns: list[asyncio.Future[int]] = []
        self.welcome_state: tuple[FleetState, str, int | None, ExitRecord | None] | None = None
        """The state WELCOME named, said once the held events (up to ``held_until``) have come."""
        self.held_until = 0
        self.own_clients: set[int] = set()
        """client_id of this library's connections attached now (their detach is hidden too)."""

    def close_pidfd(self) -> None:
        if self.pidfd is not None and not self.pidfd.closed:
            with contextlib.suppress(ValueError, RuntimeError):
                asyncio.get_running_loop().remove_reader(self.pidfd.fileno())
            self.pidfd.close()

