"""What the session says about itself: its state, its numbered events, and its record file.

Events are kept (the last EVENT_HISTORY) for clients that resume after a given one. Every change of state
is an event of its own (``state``), so a client never derives the state from other events. A client's
attach and detach are live only (``seq`` 0, never held): connections that come and go (a reconcile probe,
``shellper ls``) would otherwise push the session's own history out of the bounded log. The record is written
on every change a supervisor must see, and only while this shellper holds the session's lock: a shellper
whose files were removed (and whose name another may have taken since) leaves the record at the path alone.
"""

from __future__ import annotations

import os
import time
from collections import deque

from shellper.core.states import SessionState
from shellper.host.record import RecordError, SessionLock, sync_record, write_record
from shellper.protocol import wire

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from shellper.host.logfile import LogFile
    from shellper.host.paths import SessionPaths
    from shellper.host.record import SessionRecord

EVENT_HISTORY = 1000
LIVE_ONLY_KINDS = frozenset({"client_attached", "client_detached"})
"""Event kinds sent to the clients connected at the time, with ``seq`` 0, and neither held nor numbered."""


class Journal:
    """The session's state, event log and record file (with the lock that makes the record this shellper's)."""

    def __init__(self, paths: SessionPaths, log: LogFile, *, describe: Callable[[], SessionRecord],
                 publish: Callable[[bytes], None]) -> None:
        self.paths = paths
        self.log = log
        self.state: SessionState = SessionState.STARTING
        self.state_reason = ""
        self._announced = self.state
        """The state the last ``state`` event said."""
        self.events: deque[wire.Event] = deque(maxlen=EVENT_HISTORY)
        self.event_seq = 0
        self.record_error: str | None = None
        """Why the last record write failed (disk full, directory gone); None once one succeeds."""
        self.lock: SessionLock | None = None
        self._details: dict[str, Any] = {}
        self._describe = describe
        """The record as it should read now (the session gathers it)."""
        self._publish = publish
        """Sends an encoded EVENT to the clients that want events."""
        self.unsynced = False
        """Until the session has reported ready (:meth:`sync`), records are written without their fsyncs: they
        are waits for the disk on the launch path, and only a crash of the machine, which ends the session too,
        could tell the difference. True from :meth:`defer_sync` until :meth:`sync`."""

    # ----------------------------------------------------------------------------------- events

    def event(self, kind: str, data: dict[str, Any]) -> None:
        if kind in LIVE_ONLY_KINDS:
            self._publish(wire.encode(wire.Event(seq=0, kind=kind, time=time.time(), data=data)))
            return
        self.event_seq += 1
        event = wire.Event(seq=self.event_seq, kind=kind, time=time.time(), data=data)
        self.events.append(event)
        self._publish(wire.encode(event))

    def events_after(self, seq: int) -> list[wire.Event]:
        held = [e for e in self.events if e.seq > seq]
        first_held = self.events[0].seq if self.events else self.event_seq + 1
        if seq + 1 < first_held and seq < self.event_seq:
            missed = wire.Event(seq=0, kind="events_missed", time=time.time(),
                                data={"from": seq + 1, "to": first_held - 1})
            return [missed, *held]
        return held

    # ----------------------------------------------------------------------------------- state and record

    def set_state(self, state: SessionState, reason: str, *, announce: bool = True,
                  details: dict[str, Any] | None = None) -> None:
        """The session is now in ``state``: the record first, then (unless the caller announces it later,
        after the event that caused it) the ``state`` event."""
        self.state, self.state_reason = state, reason
        self._details = details or {}
        self.write_record()
        if announce:
            self.announce_state()

    def announce_state(self) -> None:
        """The ``state`` event for the current state, unless the last one said it already (one event per
        change of state; a new reason alone is not a change)."""
        previous = self._announced
        if self.state is previous:
            return
        self._announced = self.state
        self.event("state", {"state": self.state.value, "previous": previous.value, "reason": self.state_reason,
                             **self._details})

    def write_record(self) -> None:
        if self.lock is None:  # stopped: the files are gone for good
            return
        if not self.lock_is_ours():
            # Displaced (our files were removed; another shellper may own the name now): this identity must
            # not replace whatever record is at the path.
            problem = (f"not writing {self.paths.record}: {self.paths.lock} is not the lock this shellper "
                       "holds (removed, or another shellper has the name); its files are left alone")
            if self.record_error != problem:
                self.log.write(problem)
            self.record_error = problem
            return
        record = self._describe()
        try:
            write_record(self.paths.record, record, sync=not self.unsynced)
        except (OSError, RecordError) as exc:  # disk full, directory removed: keep serving, say so
            if self.record_error is None:
                self.log.write(f"could not write record {self.paths.record}: {exc}")
            self.record_error = str(exc)
        else:
            if self.record_error is not None:
                self.log.write(f"record written again after: {self.record_error}")
            self.record_error = None

    def defer_sync(self) -> None:
        """Write records without fsyncs until :meth:`sync` (the start, before the session reports ready)."""
        self.unsynced = True

    def sync(self) -> None:
        """Make the records written since :meth:`defer_sync` durable (the record file and its directory), and
        write the next ones with their fsyncs again."""
        if not self.unsynced:
            return
        self.unsynced = False
        if self.lock is None or not self.lock_is_ours() or self.record_error is not None:
            return  # stopped, displaced or not written: nothing of ours to make durable
        try:
            sync_record(self.paths.record)
        except OSError as exc:
            self.log.write(f"could not fsync record {self.paths.record}: {exc}")

    # ----------------------------------------------------------------------------------- the lock

    def take_lock(self, name: str) -> None:
        """Hold the session's lock (raises AlreadyRunning if a live shellper does)."""
        self.lock = SessionLock.acquire(self.paths.lock, name)

    def retake_lock(self, name: str) -> None:
        """Hold the lock again after its file was removed (without a lock file the name would look free)."""
        if not self.lock_is_ours():
            old, self.lock = self.lock, SessionLock.acquire(self.paths.lock, name)
            if old is not None:
                old.release()  # its file is gone: this only closes it

    def release_lock(self) -> None:
        if self.lock is not None:
            self.lock.release()  # unlinks the lock file only if it is still ours
            self.lock = None

    def lock_is_ours(self) -> bool:
        if self.lock is None or not self.lock.held:
            return False
        try:
            now = os.stat(self.paths.lock, follow_symlinks=False)
            mine = os.fstat(self.lock.fileno())
        except OSError:
            return False
        return (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)
