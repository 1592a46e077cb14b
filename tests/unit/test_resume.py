"""tower_client.resume.Resume on its own: what a resuming client hands out and when it reconnects or ends.

Resume is fed what happened and says what to do next (``next_step``); these tables play the drivers' part."""

from __future__ import annotations

from typing import Any

import pytest
from support.connection import INSTANCE, welcome

from shellper.protocol import wire
from shellper.protocol.connection import (
    ClientError,
    ConnectionRefused,
    InstanceMismatch,
    ProtocolViolation,
    RemoteError,
    SessionGone,
    SessionNotFound,
    ShellperDead,
    Timeout,
)
from tower_client.resume import (
    RECEIVE,
    Backoff,
    Deliver,
    GiveUp,
    Phase,
    Reconnect,
    Reconnected,
    Reopen,
    Resume,
    Step,
)

PATH = "/run/r.sock"


def drain(r: Resume) -> list[Any]:
    """The items handed out until the stream asks for something else (a step that is not Deliver)."""
    items = []
    while isinstance(step := r.next_step(), Deliver):
        items.append(step.item)
    return items


def attempt(r: Resume) -> Reconnect:
    """The next step, which must be a reconnection attempt."""
    step = r.next_step()
    assert isinstance(step, Reconnect), step
    return step


def given_up(r: Resume) -> ClientError:
    """The error the stream ended with, as its next step says."""
    step = r.next_step()
    assert isinstance(step, GiveUp), step
    return step.error


def connected() -> Resume:
    """Connected once, "hello" handed out (offset 5), at event 3."""
    r = Resume(PATH, None, Backoff())
    r.connected(welcome(), wire.Replay(offset=0, data=b"hello"), 3)
    drain(r)
    return r


@pytest.mark.parametrize(("replay", "offset_before", "items", "offset_after"), [
    (wire.Replay(offset=0, data=b"hello"), 0, [wire.Data(b"hello")], 5),
    (wire.Replay(offset=0), 0, [], 0),
    (wire.Replay(offset=90, data=b"xy", gap=40), 50, [wire.Gap(offset=90, missed=40), wire.Data(b"xy")], 92),
    (wire.Replay(offset=90, gap=40, preamble=b"\x1b[?1049h"), 50, [wire.Gap(offset=90, missed=40)], 90),
])
def test_the_first_replay_is_handed_out_as_stream_items(replay: wire.Replay, offset_before: int,
                                                        items: list[wire.Frame], offset_after: int) -> None:
    r = Resume(PATH, None, Backoff())
    r.connected(welcome(), replay, 4)
    assert r.output.next_offset == offset_before and r.last_event_seq == 4 and r.instance_id == INSTANCE
    assert drain(r) == items
    assert r.output.next_offset == offset_after and r.reconnects == 0


@pytest.mark.parametrize(("replay", "items"), [
    (wire.Replay(offset=5, data=b"more"), [Reconnected(welcome(), 5, 0, 2, b""), wire.Data(b"more")]),
    (wire.Replay(offset=5), [Reconnected(welcome(), 5, 0, 2, b"")]),
    (wire.Replay(offset=25, data=b"z", gap=20, preamble=b"P"),
     [Reconnected(welcome(), 5, 20, 2, b"P"), wire.Gap(offset=25, missed=20), wire.Data(b"z")]),
])
def test_a_reconnection_is_marked_then_resumes(replay: wire.Replay, items: list[Any]) -> None:
    r = connected()
    r.lost(SessionGone(PATH, "gone"), None)
    assert [attempt(r).delay, attempt(r).delay] == [0.05, 0.1]  # the first attempt failed (and was retryable)
    r.connected(welcome(), replay, 99)
    assert r.attempt == 0 and r.reconnects == 1 and r.last_event_seq == 3  # the stream's, not the connection's
    assert drain(r) == items
    assert r.output.next_offset == replay.offset + len(replay.data)


@pytest.mark.parametrize("replay", [wire.Replay(offset=4, data=b"x"), wire.Replay(offset=9, gap=3),
                                    wire.Replay(offset=6)])
def test_a_replay_that_does_not_continue_the_stream_is_refused(replay: wire.Replay) -> None:
    r = connected()
    r.lost(SessionGone(PATH, "gone"), None)
    attempt(r)
    with pytest.raises(ProtocolViolation, match="asked to resume at 5"):
        r.connected(welcome(), replay, None)
    assert r.reconnects == 0 and r.phase is Phase.RECONNECTING and r.session_state == "running"


def test_the_instance_is_adopted_once_and_then_kept() -> None:
    r = Resume(PATH, None, Backoff())
    r.connected(welcome(instance_id="b" * 32), wire.Replay(offset=0), None)
    r.connected(welcome(instance_id="c" * 32), wire.Replay(offset=0), None)  # the connection checks it
    assert r.instance_id == "b" * 32
    assert Resume(PATH, "d" * 32, Backoff()).instance_id == "d" * 32


def test_frames_taken_from_the_live_connection_move_the_position() -> None:
    r = connected()
    exit_frame = wire.Exit(code=None, signal="SIGTERM", state="backoff")
    for frame in (wire.Data(b"abc"), wire.Event(seq=9, kind="exited"), exit_frame):
        assert r.received(frame) is frame
    assert (r.output.next_offset, r.last_event_seq, r.exit) == (8, 9, exit_frame)


FATAL_REPLACED = wire.Error(code="replaced", message="x", fatal=True)
FATAL_TOO_SLOW = wire.Error(code="too_slow", message="x", fatal=True)


@pytest.mark.parametrize(("exit_state", "fatal", "resumes"), [
    (None, None, True),
    ("backoff", None, True),
    ("exited", None, True),
    ("stopping", None, False),
    (None, FATAL_TOO_SLOW, True),
    (None, FATAL_REPLACED, False),
    (None, wire.Error(code="forbidden", message="x", fatal=True), False),
    ("stopping", FATAL_TOO_SLOW, False),
])
def test_when_a_lost_connection_is_resumed(exit_state: str | None, fatal: wire.Error | None,
                                           resumes: bool) -> None:
    r = connected()
    if exit_state is not None:
        r.received(wire.Exit(code=0, signal=None, state=exit_state))
    error = SessionGone(PATH, "gone")
    r.lost(error, fatal)
    if resumes:
        assert r.ended is None and attempt(r) == Reconnect(0.05, Reopen(5, None, 3, INSTANCE))
        return
    assert r.ended is error and r.phase is Phase.ENDED
    assert given_up(r) is error and given_up(r) is error  # and again on every later call


@pytest.mark.parametrize(("error", "attempts", "final"), [
    (SessionNotFound(PATH, "x"), 1, False),
    (ConnectionRefused(PATH, "x"), 3, False),
    (Timeout(PATH, "x"), 7, False),
    (SessionGone(PATH, "x"), 7, False),
    (SessionGone(PATH, "x"), 8, True),  # the last attempt
    (InstanceMismatch(PATH, INSTANCE, "b" * 32), 1, True),
    (ProtocolViolation(PATH, "x"), 1, True),
    (RemoteError(PATH, FATAL_REPLACED), 1, True),
    (ClientError(PATH, "permission denied"), 1, True),
])
def test_which_failed_reconnection_is_final(error: ClientError, attempts: int, final: bool) -> None:
    r = connected()
    r.lost(SessionGone(PATH, "lost"), None)
    for _ in range(attempts):
        attempt(r)
    r.failed(error)
    if not final:
        assert r.ended is None and attempt(r).delay > 0
        return
    assert r.ended is error and given_up(r) is error


def test_backoff_delays() -> None:
    r = connected()
    r.lost(SessionGone(PATH, "lost"), None)
    assert [attempt(r).delay for _ in range(8)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    custom = Backoff(initial=1.0, factor=3.0, max_delay=5.0, max_attempts=2)
    assert [custom.delay(n) for n in (1, 2, 3)] == [1.0, 3.0, 5.0]


def test_closing_ends_the_stream_after_what_is_queued() -> None:
    r = Resume(PATH, None, Backoff())
    r.connected(welcome(), wire.Replay(offset=0, data=b"q"), None)
    r.close()
    r.close()
    assert r.next_step() == Deliver(wire.Data(b"q"))
    assert "closed by this client" in given_up(r).message
    first = SessionGone(PATH, "first")
    ended = Resume(PATH, None, Backoff())
    ended.give_up(first)
    ended.close()  # the first reason stays
    assert ended.ended is first and given_up(ended) is first


@pytest.mark.parametrize(("stopping", "state_event", "resumed"), [
    (False, None, True),
    (True, None, False),  # this client sent STOP: a husk's stop has no EXIT to say so
    (False, "stopping", False),  # another client's STOP, as the state event says
    (False, "backoff", True),
])
def test_a_stop_ends_the_stream_instead_of_reconnecting(stopping: bool, state_event: str | None,
                                                        resumed: bool) -> None:
    r = connected()
    r.stopping = stopping
    if state_event is not None:
        r.received(wire.Event(seq=4, kind="state", data={"state": state_event, "previous": "running", "reason": ""}))
    assert r.session_state == (state_event or "running")
    lost = SessionGone(PATH, "the shellper closed the connection")
    r.lost(lost, None)
    if resumed:
        assert isinstance(r.next_step(), Reconnect)
    else:
        assert r.ended is lost and given_up(r) is lost


@pytest.mark.parametrize(("error", "gone", "ends_as"), [
    (ConnectionRefused(PATH, "stale socket"), True, ShellperDead),
    (SessionNotFound(PATH, "no socket"), True, ShellperDead),
    (ConnectionRefused(PATH, "stale socket"), False, None),
    (Timeout(PATH, "slow"), True, None),  # something answered slowly: not a dead shellper's socket
    (InstanceMismatch(PATH, INSTANCE, "b" * 32), True, InstanceMismatch),  # a new shellper under the name
])
def test_a_dead_shellper_ends_the_stream_at_once(error: ClientError, gone: bool, ends_as: type[Any] | None) -> None:
    r = connected()
    r.lost(SessionGone(PATH, "lost"), None)
    attempt(r)
    r.failed(error, gone)
    if ends_as is None:
        assert r.ended is None and isinstance(r.next_step(), Reconnect)
    else:
        assert isinstance(r.ended, ends_as) and given_up(r) is r.ended


@pytest.mark.parametrize("first", [True, False])
def test_events_after_past_the_sessions_last_event_is_refused(first: bool) -> None:
    """What a current shellper refuses as bad_offset, and an older one accepted silently."""
    if first:
        r = Resume(PATH, None, Backoff())
        with pytest.raises(ProtocolViolation, match="events after 8"):
            r.connected(welcome(event_seq=7), wire.Replay(offset=0), 8)
        r.connected(welcome(event_seq=8), wire.Replay(offset=0), 8)  # up to the last event: fine
        assert r.last_event_seq == 8
    else:
        r = connected()  # at event 3
        r.lost(SessionGone(PATH, "lost"), None)
        attempt(r)
        with pytest.raises(ProtocolViolation, match="events after 3"):
            r.connected(welcome(event_seq=2), wire.Replay(offset=5), None)
        r.connected(welcome(event_seq=3), wire.Replay(offset=5), None)
        assert r.reconnects == 1


def test_what_each_connection_asks_for() -> None:
    """The first connection asks for what its caller said; every later one for the next byte and event the
    caller has not had, from the instance the first one met, with no replay size (the drivers, blocking and
    asyncio, pass these on as they are)."""
    r = Resume(PATH, None, Backoff())
    assert r.first(7, 100, 2) == Reopen(7, 100, 2, None)
    r.connected(welcome(), wire.Replay(offset=0, data=b"hello"), 3)
    drain(r)
    r.received(wire.Data(b"abc"))
    r.received(wire.Event(seq=6, kind="resized", time=1.0, data={}))
    r.lost(SessionGone(PATH, "gone"), None)
    assert r.reopen() == Reopen(8, None, 6, INSTANCE) == attempt(r).ask
    pinned = Resume(PATH, "b" * 32, Backoff())
    assert pinned.first(None, 0, None) == Reopen(None, 0, None, "b" * 32)


# --------------------------------------------------------------------------------------------- scripts
# A driver's whole conversation with the stream as one table: what happened (fed in) and what the stream
# says to do next. ("step", X): next_step() must give X; the rest feed an event.

LOST = SessionGone(PATH, "the shellper closed the connection")
REFUSED = ConnectionRefused(PATH, "stale socket")
MISMATCH = InstanceMismatch(PATH, INSTANCE, "b" * 32)
HELLO = wire.Data(b"hello")


def same(step: Step, expected: Step) -> bool:
    """Steps compare as values; a GiveUp's error (an exception, equal only to itself) by its type and text."""
    if isinstance(step, GiveUp) and isinstance(expected, GiveUp):
        return type(step.error) is type(expected.error) and str(step.error) == str(expected.error)
    return step == expected


def play(script: list[tuple[Any, ...]]) -> Resume:
    r = Resume(PATH, None, Backoff(max_attempts=3))
    for line in script:
        what, *args = line
        if what == "step":
            assert same(r.next_step(), args[0]), line
        elif what == "gives_up":
            assert given_up(r) is args[0], line
        else:
            getattr(r, what)(*args)
    return r


SCRIPTS: dict[str, list[tuple[Any, ...]]] = {
    "not connected yet": [
        ("step", GiveUp(SessionGone(PATH, "not connected"))),
    ],
    "the first replay, then live frames": [
        ("connected", welcome(), wire.Replay(offset=0, data=b"hello"), None),
        ("step", Deliver(HELLO)),
        ("step", RECEIVE),
        ("received", wire.Data(b"!")),
        ("step", RECEIVE),
    ],
    "lost, two failed attempts, resumed": [
        ("connected", welcome(), wire.Replay(offset=0, data=b"hello"), 3),
        ("step", Deliver(HELLO)),
        ("lost", LOST, None),
        ("step", Reconnect(0.05, Reopen(5, None, 3, INSTANCE))),
        ("failed", REFUSED, False),
        ("step", Reconnect(0.1, Reopen(5, None, 3, INSTANCE))),
        ("failed", Timeout(PATH, "slow"), False),
        ("step", Reconnect(0.2, Reopen(5, None, 3, INSTANCE))),
        ("connected", welcome(), wire.Replay(offset=5, data=b"more"), None),
        ("step", Deliver(Reconnected(welcome(), 5, 0, 3, b""))),
        ("step", Deliver(wire.Data(b"more"))),
        ("step", RECEIVE),
        ("lost", LOST, None),  # the attempts are counted afresh
        ("step", Reconnect(0.05, Reopen(9, None, 3, INSTANCE))),
    ],
    "lost, every attempt fails": [
        ("connected", welcome(), wire.Replay(offset=0), None),
        ("lost", LOST, None),
        ("step", Reconnect(0.05, Reopen(0, None, None, INSTANCE))),
        ("failed", REFUSED, False),
        ("step", Reconnect(0.1, Reopen(0, None, None, INSTANCE))),
        ("failed", REFUSED, False),
        ("step", Reconnect(0.2, Reopen(0, None, None, INSTANCE))),
        ("failed", REFUSED, False),
        ("gives_up", REFUSED),
    ],
    "a new shellper under the name": [
        ("connected", welcome(), wire.Replay(offset=0), None),
        ("lost", LOST, wire.Error(code="too_slow", message="x", fatal=True)),
        ("step", Reconnect(0.05, Reopen(0, None, None, INSTANCE))),
        ("failed", MISMATCH, True),
        ("gives_up", MISMATCH),
    ],
    "replaced by another tower": [
        ("connected", welcome(), wire.Replay(offset=0, data=b"hello"), None),
        ("lost", LOST, wire.Error(code="replaced", message="x", fatal=True)),
        ("step", Deliver(HELLO)),  # what was queued still comes
        ("gives_up", LOST),
    ],
    "this client stopped the session": [
        ("connected", welcome(), wire.Replay(offset=0), None),
        ("received", wire.Exit(code=0, signal=None, state="exited")),
        ("step", RECEIVE),
        ("lost", LOST, None),
        ("step", Reconnect(0.05, Reopen(0, None, None, INSTANCE))),
        ("connected", welcome(), wire.Replay(offset=0), None),
        ("step", Deliver(Reconnected(welcome(), 0, 0, 1, b""))),
        ("step", RECEIVE),
    ],
    "the driver knows the shellper died": [
        ("connected", welcome(), wire.Replay(offset=0), None),
        ("lost", LOST, None),
        ("step", Reconnect(0.05, Reopen(0, None, None, INSTANCE))),
        ("give_up", MISMATCH),
        ("gives_up", MISMATCH),
    ],
}


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_drivers_conversation(name: str) -> None:
    play(SCRIPTS[name])


@pytest.mark.parametrize(("phase", "step"), [
    (Phase.IDLE, GiveUp(SessionGone(PATH, "not connected"))),
    (Phase.LIVE, RECEIVE),
    (Phase.RECONNECTING, Reconnect(0.05, Reopen(0, None, None, INSTANCE))),
    (Phase.ENDED, GiveUp(LOST)),
])
def test_what_each_phase_asks_for_once_nothing_is_queued(phase: Phase, step: Step) -> None:
    r = Resume(PATH, INSTANCE, Backoff())
    r.phase, r.output.next_offset = phase, 0
    r.ended = LOST if phase is Phase.ENDED else None
    assert same(r.next_step(), step)
    assert r.phase is phase


def test_a_reconnection_that_completes_after_close_is_refused() -> None:
    """The asyncio client's close() may come while an attempt is connecting: that connection must not
    revive the stream (its driver closes it)."""
    r = connected()
    r.lost(LOST, None)
    attempt(r)
    r.close()
    with pytest.raises(SessionGone, match="closed by this client"):
        r.connected(welcome(), wire.Replay(offset=5), None)
    assert r.phase is Phase.ENDED and r.reconnects == 0 and drain(r) == []
