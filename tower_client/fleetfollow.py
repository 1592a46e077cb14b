"""Following the Fleet's sessions: attaching to each (adopted or launched), reading its stream into the
merged one, and noticing what happens to it (its shellper's death through a pidfd, its files through
inotify). The second of the Fleet's parts (see :mod:`tower_client.fleetstream`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping

from shellper.core.exitrecord import ExitRecordError
from shellper.host.identity import ProcessIdentity, open_verified
from shellper.host.paths import SessionPaths
from shellper.host.record import RecordError, SessionRecord, read_record
from shellper.protocol import wire
from tower_client.apply import VERIFY_CLIENT_NAME, apply_async
from tower_client.client import AsyncResumingClient, ClientError, SessionGone, socket_path
from tower_client.discover import PROBE_CLIENT_NAME, observe_async
from tower_client.fleetmember import FleetClient, FleetRemoteClient, Member
from tower_client.fleetstream import MAX_PENDING_BYTES, MergedStream
from tower_client.inotify import Change
from tower_client.options import OnDeath
from tower_client.reconcile import ReconcileAction, reconcile
from tower_client.stream import (
    FleetItem,
    FleetState,
    Missed,
    Notice,
    OutputChunk,
    SessionEvent,
    StateChange,
)

STOP_MARGIN = 5.0
"""Seconds past the grace period a STOP gets before the Fleet ends the shellper with signals."""
FLEET_CLIENT_NAME = "tower-fleet"
OWN_CLIENTS = frozenset({FLEET_CLIENT_NAME, PROBE_CLIENT_NAME, VERIFY_CLIENT_NAME})
"""HELLO client names of this library's own connections: the Fleet's, and the probes of discover and apply
(another Tower's start, ``tower-client ls``). Their attach and detach events are not the Tower's news."""
ATTACH_EVENTS = ("client_attached", "client_detached")
STATE_EVENTS_VERSION = 3
"""The protocol version from which a shellper announces every state with a ``state`` event."""
EXIT_STATES = frozenset({FleetState.BACKOFF, FleetState.EXITED, FleetState.FATAL})
"""States a WELCOME's exit record explains (the child's last exit put the session there)."""


class Following(MergedStream):
    """Attach, read, notice: one reader task per session, a pidfd per shellper, one inotify watch."""

    async def _relaunch(self, name: str, why: str) -> None:
        """Start ``name`` again from its registry row, saying how it went (the Fleet's launching part)."""
        raise NotImplementedError

    def _id_in_use(self, m: Member, change: StateChange) -> None:
        """An agent gave up because its conversation id is in use: the Fleet's launching part decides."""
        raise NotImplementedError

    def _remote_client(self, m: Member) -> FleetRemoteClient:
        """A session on another host: its client (the Fleet's host part says how)."""
        raise NotImplementedError

    async def _attach(self, record: SessionRecord, *, adopted: bool, host: str | None = None) -> None:
        name = record.name
        paths = SessionPaths.for_name(self.dir, name)
        client: FleetClient | FleetRemoteClient
        if host is None:
            pidfd = open_verified(ProcessIdentity(record.boot_id, record.shellper_pid, record.shellper_start_time))
            m = Member(name, record, paths, pidfd)
            asyncio.get_running_loop().add_reader(pidfd.fileno(), self._died, m)
            client = FleetClient(str(socket_path(self.dir, name)), m.died, backoff=self.policy.backoff,
                                 expect_instance_id=record.instance_id, client_name=FLEET_CLIENT_NAME)
        else:
            m = Member(name, record, paths, None, host)
            client = self._remote_client(m)
        pos = self.journal.get(name)
        if pos is None or pos.instance_id != record.instance_id:
            self.journal.start(name, record.instance_id)
            pos = self.journal.get(name)
        assert pos is not None
        try:
            welcome = await client.connect(resume_from=pos.offset, events_after=pos.event_seq)
        except BaseException:
            m.close_pidfd()
            await client.close()
            raise
        m.client = client
        self.members[name] = m
        # A shellper that announces its states is followed by those alone from the first event: deriving the
        # first state from `spawned` as well would hand the Tower that state twice.
        m.tracker.state_events = welcome.version >= STATE_EVENTS_VERSION
        state = FleetState.of(welcome.state)
        try:  # the child's last exit says why a husk is one (and how a backing-off child ended)
            last_exit = welcome.exit_record() if state in EXIT_STATES else None
        except ExitRecordError:
            last_exit = None
        # The shellper's own reason (a fatal's "permanent failure: ..."), as WELCOME and STATUS say it.
        reason = welcome.state_reason or ("adopted" if adopted else "launched")
        m.welcome_state = (state, reason, welcome.child_pid if state is FleetState.RUNNING else None, last_exit)
        m.held_until = welcome.event_seq
        if welcome.event_seq <= pos.event_seq:  # no held event comes: say the state now
            self._announce(m)
        m.task = asyncio.get_running_loop().create_task(self._read(m), name=f"fleet {name}")
        client.take_frames_with(lambda: self._take_ready(m))

    def _announce(self, m: Member) -> None:
        """The state WELCOME named, unless the events handed out already ended on it: a Tower adopting a
        session learns its state even when the held events are only attaches and detaches."""
        if m.welcome_state is None:
            return
        state, reason, child_pid, last_exit = m.welcome_state
        m.welcome_state = None
        if m.tracker.state is not state:
            self._emit(m.tracker.change(state, reason, time.time(), child_pid=child_pid, exit=last_exit))

    async def _detach(self, m: Member) -> None:
        task, m.task = m.task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if m.client is not None:
            await m.client.close()
        m.close_pidfd()

    def _died(self, m: Member) -> None:
        """The shellper's pidfd is readable: it has exited (the reader finishes what it had sent)."""
        m.close_pidfd()
        m.died.set()

    async def _read(self, m: Member) -> None:
        """The session's stream into the merged one. Frames are mostly taken in the client's read callback
        (``_take_ready``: no task step per read); this task takes the rest, waits for room, and sees the
        connection's end and its reconnections through recv()."""
        client = m.client
        assert client is not None
        end: BaseException | None = None
        try:
            while True:
                self._take_ready(m)
                if not m.room.is_set() and not m.stopping:  # a stop must not wait for the Tower to read
                    await m.room.wait()
                    continue
                frame = await client.recv()
                if frame is not None:
                    self._follow(m, client, frame)
        except ClientError as exc:
            end = exc
        except asyncio.CancelledError:
            raise
        with contextlib.suppress(asyncio.CancelledError):
            await self._ended(m, end)

    def _take_ready(self, m: Member) -> None:
        """Follow every frame at hand while the Tower has room for this session's output."""
        client = m.client
        if client is None or m.task is None:
            return
        while m.room.is_set() or m.stopping:
            frame = client.take_ready()
            if frame is None:
                return
            self._follow(m, client, frame)

    def _follow(self, m: Member, client: AsyncResumingClient, frame: object) -> None:
        item = self._item(m, client, frame)
        if item is None:
            return
        if isinstance(item, OutputChunk):
            m.pending += len(item.data)
            if m.pending >= MAX_PENDING_BYTES:
                m.room.clear()
        self._emit(item)
        if isinstance(item, StateChange) and item.state is FleetState.FATAL:
            self._id_in_use(m, item)

    def _item(self, m: Member, client: AsyncResumingClient, frame: object) -> FleetItem | None:
        if type(frame) is wire.Data:
            return OutputChunk(m.name, m.instance_id, client.output.next_offset - len(frame.data), frame.data)
        if isinstance(frame, wire.Gap):
            return Missed(m.name, m.instance_id, frame.offset, frame.missed)
        if isinstance(frame, wire.Event):
            if frame.kind in ATTACH_EVENTS and self._own_client(m, frame):
                if frame.seq >= m.held_until and m.welcome_state is not None:  # version 2 numbered it: held
                    self._announce(m)
                return None
            if frame.seq == 0:  # events_missed: made for this connection, not part of the sequence
                return SessionEvent(m.name, m.instance_id, 0, frame.kind, frame.time, dict(frame.data))
            item = m.tracker.take(frame)
            if frame.seq >= m.held_until and m.welcome_state is not None:
                self._emit(item)  # the last held event, then the state now if the history did not end on it
                self._announce(m)
                return None
            if isinstance(item, StateChange) and item.child_pid is not None and m.spawns:
                fut = m.spawns.pop(0)
                if not fut.done():
                    fut.set_result(item.child_pid)
            return item
        return None  # EXIT (its event carries it), Reconnected, replies

    @staticmethod
    def _own_client(m: Member, event: wire.Event) -> bool:
        """An attach or detach of this library's own connections (the Fleet's, a probe's): not news. Matched
        by the HELLO's client name (a foreign client naming itself so only hides its own attach)."""
        data = event.data if isinstance(event.data, Mapping) else {}
        client_id = data.get("client_id")
        if event.kind == "client_attached" and data.get("client") in OWN_CLIENTS:
            if isinstance(client_id, int):
                m.own_clients.add(client_id)
            return True
        if event.kind == "client_detached" and client_id in m.own_clients:
            m.own_clients.discard(client_id)
            return True
        return False

    async def _ended(self, m: Member, error: BaseException | None) -> None:
        """The session's stream ended: stopped, died, or the connection was refused for good."""
        if m.client is not None:
            await m.client.close()
        if self.members.get(m.name) is m:
            del self.members[m.name]
        for fut in m.spawns:
            if not fut.done():
                fut.set_exception(SessionGone(m.paths.socket, "the session ended"))
        stopped_state = m.client is not None and m.client.exit is not None and m.client.exit.state == "stopping"
        if m.stopping or stopped_state:
            if not m.died.is_set():  # give the exiting shellper its moment: its pidfd says when
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(STOP_MARGIN):
                        await m.died.wait()
            m.close_pidfd()
            self._emit(m.tracker.change(FleetState.GONE, "stopped", time.time()))
            if not m.stopping:  # stopped from outside the Fleet (shellper stop, husk TTL): drop its row too
                self.registry.remove(m.name)
                self.journal.forget(m.name)
                self._end_stream_of(m.name)
                await self._save_registry()
            return
        if not m.died.is_set():
            m.close_pidfd()
            self._emit(m.tracker.change(FleetState.GONE, f"connection ended: {error}", time.time()))
            self._emit(Notice(m.name, "failed", "stream", str(error)))
            return
        self._emit(m.tracker.change(FleetState.GONE, f"shellper {m.record.shellper_pid} died", time.time()))
        self._emit(Notice(m.name, "died", str(self.policy.on_death), f"pid {m.record.shellper_pid}"))
        if self.policy.on_death is OnDeath.REPORT:
            return
        await self._clean_dead(m.name, m.host)
        if self.policy.on_death is OnDeath.RESPAWN:
            await self._relaunch(m.name, "died")
        else:
            self.registry.remove(m.name)
            self.journal.forget(m.name)
            self._end_stream_of(m.name)
            await self._save_registry()

    async def _clean_remote(self, host: str, name: str) -> None:
        """_clean_dead on another host (the Fleet's host part)."""
        raise NotImplementedError

    async def _clean_dead(self, name: str, host: str | None = None) -> None:
        """What reconcile would do for a dead shellper (end its tree's leftovers, remove its files), now."""
        if host is not None:
            await self._clean_remote(host, name)
            return
        observed = await observe_async(self.dir, name)
        decisions = [d for d in reconcile(self.registry.registry(), [observed], now=time.time(), owner=self.owner)
                     if d.action is ReconcileAction.CLEAN and d.name == name]
        report = await apply_async(decisions, grace=self.policy.grace, owner=self.owner)
        for o in report.outcomes:
            self._emit(Notice(name, "reaped" if o.ok else "failed", o.decision.reason, o.error or o.detail))

    def _changed(self, changes: list[Change]) -> None:
        for change in changes:
            if change.overflow:
                self._emit(Notice("", "overflow", "inotify", "the kernel dropped directory events"))
            elif change.directory_gone:
                self._emit(Notice("", "files_removed", "directory", f"{self.dir} was removed or moved"))
            elif change.name.endswith(".sock") and change.removed:
                m = self.members.get(change.name[:-5])
                if m is not None and m.host is None and not m.stopping and not m.died.is_set():
                    self._later(self._socket_removed(m))
            elif change.name.endswith(".json") and change.written and not change.name.startswith("."):
                name = change.name[:-5]
                if name not in self.members and name not in self.registry.rows and name not in self._launching:
                    self._later(self._appeared(name))

    async def _socket_removed(self, m: Member) -> None:
        await asyncio.sleep(0)  # a dying shellper removes its socket first: let its pidfd speak before
        if not m.died.is_set() and not m.stopping:
            self._emit(Notice(m.name, "files_removed", "socket", f"{m.paths.socket} was removed while shellper "
                              f"{m.record.shellper_pid} runs (kill -USR1 it to recreate its files)"))

    async def _appeared(self, name: str) -> None:
        try:
            record = await asyncio.to_thread(read_record, SessionPaths.for_name(self.dir, name).record)
        except (OSError, RecordError, ValueError):
            return
        if record.owner == self.owner and name not in self.members and name not in self._launching \
                and name not in self.registry.rows:
            self._emit(Notice(name, "appeared", "unregistered", f"shellper {record.shellper_pid} of this owner, not "
                              "launched by this Tower: the next start terminates it unless it is registered"))
