"""What a resuming client decides, free of I/O: the blocking and asyncio resuming clients both drive it.

A resuming client hands its caller one stream across connections. :class:`Resume` keeps where that
stream is (the output offset and last event its caller got), presents each connection's REPLAY as
ordinary stream items, and decides, when a connection ends or a reconnection fails, whether to try
again (after how long) or to end with that error. As h11 does for HTTP, it is fed what happened
(``connected``, ``received``, ``lost``, ``failed``) and says what to do next (``next_step``: deliver
an item, receive a frame, reconnect, give up); the drivers in :mod:`tower_client.client` only
connect, read and sleep.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum

from shellper.core.states import SessionState
from shellper.protocol import wire
from shellper.protocol.connection import (
    ClientError,
    ConnectionRefused,
    OutputPosition,
    ProtocolViolation,
    SessionGone,
    SessionNotFound,
    ShellperDead,
    StreamPosition,
    Timeout,
)

ENDED_STATES = (SessionState.STOPPING,)
"""EXIT states after which the shellper goes away on purpose: a resuming client does not reconnect."""
RESUMABLE_ERRORS = ("too_slow", "busy", "frame_timeout")
"""Fatal ERROR codes after which reconnecting makes sense (``busy``: other clients' unfinished frames filled the
shellper's bound; ``frame_timeout``: a frame of ours stalled on its way). Any other (``replaced`` by another tower,
``forbidden``, a protocol error) would only repeat, or fight another tower, so resuming stops."""
RETRYABLE = (SessionNotFound, ConnectionRefused, Timeout, SessionGone)
"""Failures of a reconnection attempt worth another attempt; any other (a different instance, a
refusal, a REPLAY that does not continue the stream) is final."""


@dataclass(frozen=True)
class Backoff:
    """Delays between reconnect attempts: initial * factor**n, capped; give up after max_attempts."""

    initial: float = 0.05
    factor: float = 2.0
    max_delay: float = 2.0
    max_attempts: int = 8

    def delay(self, attempt: int) -> float:
        return float(min(self.max_delay, self.initial * self.factor ** max(0, attempt - 1)))


@dataclass(frozen=True)
class Reconnected:
    """Yielded by a resuming client right after it reconnected, before the resumed output."""

    welcome: wire.Welcome
    resumed_from: int
    gap: int
    attempts: int
    preamble: bytes = b""
    """Terminal modes to re-establish (a full reset first when ``gap``): for a terminal, not output."""


ResumeItem = wire.Frame | Reconnected


@dataclass(frozen=True)
class Reopen:
    """What a resuming client's next connection asks for: its HELLO's position and the instance it insists on.
    The drivers pass these to their client's ``connect()`` as they are."""

    resume_from: int | None
    replay_bytes: int | None
    events_after: int | None
    expect_instance_id: str | None


# --------------------------------------------------------------------------------------------- what to do next


@dataclass(frozen=True, slots=True)
class Deliver:
    """Hand ``item`` to the caller: the stream's position has moved past it."""

    item: ResumeItem


@dataclass(frozen=True, slots=True)
class Receive:
    """Read the live connection's next frame and pass it to :meth:`Resume.received` (its end to
    :meth:`Resume.lost`)."""


RECEIVE = Receive()


@dataclass(frozen=True, slots=True)
class Reconnect:
    """One reconnection attempt: wait ``delay`` seconds (the backoff), then open a connection asking for
    ``ask``; then :meth:`Resume.connected`, or :meth:`Resume.failed` with the attempt's ClientError."""

    delay: float
    ask: Reopen


@dataclass(frozen=True, slots=True)
class GiveUp:
    """The stream has ended with ``error``: raise it (again on every later call)."""

    error: ClientError


Step = Deliver | Receive | Reconnect | GiveUp
"""What :meth:`Resume.next_step` tells a driver to do next."""


class Phase(Enum):
    """Where a resumed stream is."""

    IDLE = "idle"
    """No connection yet: the driver opens the first one with what :meth:`Resume.first` says."""
    LIVE = "live"
    """A connection streams: its frames are read and handed out."""
    RECONNECTING = "reconnecting"
    """The connection was lost and may be resumed: attempts follow, with backoff."""
    ENDED = "ended"
    """The stream is over (``Resume.ended`` says why); nothing is opened again."""


_LIVE = Phase.LIVE
"""For next_step, once a frame: reading an Enum member off its class costs Python 3.11 a descriptor call."""


class Resume(StreamPosition):
    """One resumed stream's position and decisions, fed what happened and asked what to do next, h11-style:
    no socket, no clock, no asyncio. A driver (blocking or asyncio) loops on :meth:`next_step` and does
    what it says:

    * :class:`Deliver`: return its item to the caller (queued: a REPLAY's, a Reconnected marker);
    * :class:`Receive`: read a frame from the live connection and return ``received(frame)``; if the
      connection ended, ``lost(error, fatal_error)``;
    * :class:`Reconnect`: sleep, connect as asked, then ``connected(...)``, or ``failed(error, gone)``;
    * :class:`GiveUp`: raise its error.

    Before that loop the driver opens the first connection with what :meth:`first` says, then calls
    ``connected(welcome, replay, last_event_seq)``; a failure of that first one is its caller's, not retried.
    """

    def __init__(self, path: str, expect_instance_id: str | None, backoff: Backoff) -> None:
        super().__init__()
        self.path = path
        self.instance_id = expect_instance_id
        self.backoff = backoff
        self.phase = Phase.IDLE
        self.reconnects = 0
        self.attempt = 0
        """Reconnection attempts since the connection was lost (0 while connected)."""
        self.ended: ClientError | None = None
        self.items: deque[ResumeItem] = deque()
        self.stopping = False
        """This client asked the session to stop: when its connection ends, the stream ends with it."""

    # ----------------------------------------------------------------------------------- what to do

    def next_step(self) -> Step:
        """What the driver does next: queued items first (handed out, so delivered, as they leave), then
        what the phase asks for. Each Reconnect is one more attempt."""
        if self.items:
            item = self.items.popleft()
            self.deliver(item)
            return Deliver(item)
        phase = self.phase
        if phase is _LIVE:
            return RECEIVE
        if phase is Phase.RECONNECTING:
            self.attempt += 1
            return Reconnect(self.backoff.delay(self.attempt), self.reopen())
        if phase is Phase.ENDED and self.ended is not None:
            return GiveUp(self.ended)
        return GiveUp(SessionGone(self.path, "not connected"))

    def first(self, resume_from: int | None, replay_bytes: int | None, events_after: int | None) -> Reopen:
        """The first connection: where its caller asks to start (a resumed stream's later ones: :meth:`reopen`)."""
        return Reopen(resume_from, replay_bytes, events_after, self.instance_id)

    def reopen(self) -> Reopen:
        """A reconnection: at the next byte and event the caller has not had, from the same instance (another
        instance has other offsets). No replay size: everything since then that the ring still holds."""
        return Reopen(self.output.next_offset, None, self.last_event_seq, self.instance_id)

    # ----------------------------------------------------------------------------------- what happened

    def connected(self, welcome: wire.Welcome, replay: wire.Replay, last_event_seq: int | None) -> None:
        """A (re)connection's handshake is done: queue its REPLAY as items (GAP if the ring had dropped
        bytes, then DATA), after a Reconnected marker when it resumes. ``last_event_seq``: the first
        connection's (what its HELLO asked for, or WELCOME's). Raises, and the driver drops that
        connection, when it does not continue the stream or the stream has ended meanwhile (closed)."""
        if self.phase is Phase.ENDED and self.ended is not None:
            raise self.ended
        first = self.phase is Phase.IDLE
        asked_events = last_event_seq if first else self.last_event_seq
        if asked_events is not None and asked_events > welcome.event_seq:
            # What a current shellper refuses as bad_offset, and an older one accepted silently.
            raise ProtocolViolation(self.path, f"asked for the events after {asked_events}, the session's last "
                                    f"event is {welcome.event_seq}: another stream's position")
        if not first and replay.offset - replay.gap != self.output.next_offset:
            raise ProtocolViolation(self.path, f"asked to resume at {self.output.next_offset}, REPLAY starts at "
                                    f"{replay.offset} with a gap of {replay.gap}")
        if self.instance_id is None:
            self.instance_id = welcome.instance_id
        self.session_state = welcome.state
        if first:
            self.output.next_offset = replay.offset - replay.gap
            self.last_event_seq = last_event_seq
        else:
            self.reconnects += 1
            self.items.append(Reconnected(welcome, self.output.next_offset, replay.gap, self.attempt, replay.preamble))
        self.phase = Phase.LIVE
        self.attempt = 0
        if replay.gap:
            self.items.append(wire.Gap(offset=replay.offset, missed=replay.gap))
        if replay.data:
            self.items.append(wire.Data(replay.data))

    def received(self, frame: wire.Frame) -> wire.Frame:
        """A frame from the live connection, handed out now: the position moves past it."""
        self.deliver(frame)
        return frame

    def lost(self, error: ClientError, fatal: wire.Error | None) -> None:
        """The live connection ended with ``error`` (after the fatal ERROR ``fatal``, if one came). The stream
        ends with it unless reconnecting makes sense: not when the session was stopping (this client asked,
        or an EXIT or ``state`` event said so), nor after a fatal ERROR that would only repeat."""
        stopped = (self.stopping or self.session_state in ENDED_STATES
                   or (self.exit is not None and self.exit.state in ENDED_STATES))
        if stopped or (fatal is not None and fatal.code not in RESUMABLE_ERRORS):
            self.give_up(error)
        elif self.phase is Phase.LIVE:
            self.phase = Phase.RECONNECTING

    def failed(self, error: ClientError, gone: bool = False) -> None:
        """A reconnection attempt failed with ``error``. The stream ends with it if it is final, it was the
        last attempt, or (``gone``: the driver found the process that served the socket no longer running)
        nothing will ever answer there: then at once, as ShellperDead, instead of waiting out the backoff.
        (A new shellper under the name answers instead, and is refused as InstanceMismatch.)"""
        if gone and isinstance(error, SessionNotFound | ConnectionRefused):  # nothing there, and never will be
            error = ShellperDead(self.path, f"the shellper is gone ({error.message})")
        if isinstance(error, ShellperDead) or not isinstance(error, RETRYABLE) \
                or self.attempt >= self.backoff.max_attempts:
            self.give_up(error)

    def give_up(self, error: ClientError) -> None:
        """End the stream with ``error`` (the first reason stays): after what is queued, every step is GiveUp.
        Also the driver's, when it knows better (the shellper's pidfd said it died)."""
        if self.ended is None:
            self.ended = error
        self.phase = Phase.ENDED

    def close(self) -> None:
        """This client closed the stream."""
        self.give_up(SessionGone(self.path, "closed by this client"))


class ResumeView:
    """What a resuming client (its :class:`Resume` in ``state``) shows of the stream."""

    state: Resume

    @property
    def output(self) -> OutputPosition:
        return self.state.output

    @property
    def reconnects(self) -> int:
        return self.state.reconnects

    @property
    def exit(self) -> wire.Exit | None:
        return self.state.exit

    @property
    def session_state(self) -> str | None:
        """The session's state as the stream handed out so far says (WELCOME, EXIT, ``state`` events)."""
        return self.state.session_state
