"""What a Fleet hands its Tower: typed records of everything that happens across sessions (pure).

Every item names its session and the shellper instance it comes from. Output comes as
:class:`OutputChunk` (absolute offsets), bytes the ring no longer held as :class:`Missed`, state changes
as :class:`StateChange` (running, backoff with its restart time, exited, fatal, stopping, gone, with a
reason), other numbered session events as :class:`SessionEvent`, and what the Fleet decided or noticed
on its own as :class:`Notice`. :class:`StateTracker` turns one session's EVENT frames into these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from shellper.core.exitrecord import ExitRecord, ExitRecordError
from shellper.core.states import SessionState
from shellper.protocol import wire

__all__ = ["FleetItem", "FleetState", "Missed", "Notice", "OutputChunk", "SessionEvent",
           "StateChange", "StateTracker"]

class FleetState(StrEnum):
    """A session's state as the Tower sees it: the shellper's states, and ``gone`` (no shellper any more)."""

    STARTING = "starting"
    RUNNING = "running"
    BACKOFF = "backoff"
    EXITED = "exited"
    FATAL = "fatal"
    STOPPING = "stopping"
    GONE = "gone"

    @classmethod
    def of(cls, state: str) -> FleetState:
        """A shellper's state; one this library does not know counts as exited (no child running)."""
        try:
            return cls(SessionState(state).value)
        except ValueError:
            return cls.EXITED


@dataclass(frozen=True)
class OutputChunk:
    """Output of ``session`` (shellper ``instance_id``): ``data`` starts at absolute ``offset`` of its stream."""

    session: str
    instance_id: str
    offset: int
    data: bytes = field(repr=False)

    @property
    def end(self) -> int:
        return self.offset + len(self.data)


@dataclass(frozen=True)
class Missed:
    """``missed`` bytes before ``offset`` were no longer in the ring: the stream resumes at ``offset``."""

    session: str
    instance_id: str
    offset: int
    missed: int


@dataclass(frozen=True)
class StateChange:
    """The session's state is now ``state``, because of ``reason`` (at ``time``, epoch seconds).

    ``seq`` is the event it came from (None: the Fleet's own finding, e.g. ``gone``); ``restart_at``
    when a restart is scheduled (backoff); ``exit`` the child's exit when one caused it; ``child_pid``
    the new child's pid when it is running."""

    session: str
    instance_id: str
    state: FleetState
    reason: str
    time: float
    seq: int | None = None
    restart_at: float | None = None
    exit: ExitRecord | None = None
    child_pid: int | None = None


@dataclass(frozen=True)
class SessionEvent:
    """A numbered session event that is not a state change (resized, client_attached, ...)."""

    session: str
    instance_id: str
    seq: int
    kind: str
    time: float
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Notice:
    """What the Fleet decided or noticed itself: ``what`` is a reconcile action (adopt, respawn, terminate,
    clean, leave), or launched, relaunched, reaped, died, appeared, files_removed, failed."""

    session: str
    what: str
    reason: str
    detail: str = ""


FleetItem = OutputChunk | Missed | StateChange | SessionEvent | Notice


class StateTracker:
    """One session's state from its EVENTs: each numbered event becomes exactly one item (a StateChange,
    or a SessionEvent), so acknowledging items acknowledges every event once."""

    def __init__(self, session: str, instance_id: str, state: FleetState | None = None, *,
                 state_events: bool = False) -> None:
        self.session = session
        self.instance_id = instance_id
        self.state = state
        self.state_events = state_events
        """The shellper announces every change of state with a ``state`` event: only those change the
        state; ``spawned`` and ``exited`` lend it the child's pid and exit record. Set by the first
        ``state`` event seen (a shellper without them gets its state derived from the other events)."""
        self._exit: ExitRecord | None = None
        self._child_pid: int | None = None

    def change(self, state: FleetState, reason: str, time: float, **more: Any) -> StateChange:
        self.state = state
        return StateChange(self.session, self.instance_id, state, reason, time, **more)

    def take(self, event: wire.Event) -> StateChange | SessionEvent:
        data = event.data if isinstance(event.data, Mapping) else {}
        if self.state_events:
            return self._take_announced(event, data)
        if event.kind == "state" and isinstance(data.get("state"), str):
            # The first `state` event: this shellper announces its states; from now on only they count. The
            # one it announces now was derived already from the event before it.
            self.state_events = True
            if FleetState.of(data["state"]) is self.state:
                return SessionEvent(self.session, self.instance_id, event.seq, event.kind, event.time, dict(data))
            return self._take_announced(event, data)
        seq = event.seq
        if event.kind == "spawned":
            pid = data.get("child_pid")
            return self.change(FleetState.RUNNING, "spawned", event.time, seq=seq,
                               child_pid=pid if isinstance(pid, int) else None)
        if event.kind == "exited":
            try:
                record: ExitRecord | None = ExitRecord.from_wire(dict(data))
            except ExitRecordError:
                record = None
            state = FleetState.of(str(data.get("state", "")))
            restart_in = data.get("restart_in")
            restart_at = event.time + restart_in if isinstance(restart_in, int | float) else None
            reason = str(data.get("reason") or data.get("class") or "exited")
            return self.change(state, reason, event.time, seq=seq, restart_at=restart_at, exit=record)
        if event.kind == "restart_scheduled" and self.state is not FleetState.BACKOFF:
            at = data.get("at")
            return self.change(FleetState.BACKOFF, "restart scheduled", event.time, seq=seq,
                               restart_at=float(at) if isinstance(at, int | float) else None)
        if event.kind == "gave_up" and self.state is not FleetState.FATAL:
            return self.change(FleetState.FATAL, str(data.get("reason", "gave up")), event.time, seq=seq)
        return SessionEvent(self.session, self.instance_id, seq, event.kind, event.time, dict(data))

    def _take_announced(self, event: wire.Event, data: Mapping[str, Any]) -> StateChange | SessionEvent:
        if event.kind == "state" and isinstance(data.get("state"), str):
            state = FleetState.of(data["state"])
            at = data.get("restart_at")
            ex = self._exit if state in (FleetState.BACKOFF, FleetState.EXITED, FleetState.FATAL,
                                         FleetState.STARTING, FleetState.STOPPING) else None
            pid = self._child_pid if state is FleetState.RUNNING else None
            self._exit = self._child_pid = None
            return self.change(state, str(data.get("reason", "")), event.time, seq=event.seq,
                               restart_at=float(at) if isinstance(at, int | float) else None, exit=ex, child_pid=pid)
        if event.kind == "spawned" and isinstance(data.get("child_pid"), int):
            self._child_pid = data["child_pid"]
        elif event.kind == "exited":
            try:
                self._exit = ExitRecord.from_wire(dict(data))
            except ExitRecordError:
                self._exit = None
        return SessionEvent(self.session, self.instance_id, event.seq, event.kind, event.time, dict(data))
