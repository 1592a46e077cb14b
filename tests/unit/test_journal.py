"""shellper.daemon.journal: the numbered event log a resuming client reads from, as a table."""

from __future__ import annotations

import pytest

from shellper.core.states import SessionState
from shellper.daemon.journal import EVENT_HISTORY, Journal
from shellper.host.logfile import LogFile
from shellper.host.paths import SessionPaths
from shellper.host.record import SessionRecord
from shellper.protocol import wire


def journal_with(count: int) -> tuple[Journal, list[bytes]]:
    """A journal that has logged ``count`` events, and the frames it published (no lock: no record written)."""
    published: list[bytes] = []
    paths = SessionPaths.for_name("/nonexistent", "j")

    def describe() -> SessionRecord:
        raise AssertionError("a journal without the lock writes no record")

    journal = Journal(paths, LogFile(paths.log), describe=describe, publish=published.append)
    for i in range(count):
        journal.event("resized", {"cols": i, "rows": 1})
    return journal, published


@pytest.mark.parametrize(("logged", "after", "seqs", "missed"), [
    (0, 0, [], None),
    (3, 0, [1, 2, 3], None),
    (3, 2, [3], None),
    (3, 3, [], None),
    (3, 9, [], None),  # a client from the future: nothing, and nothing missed
    (EVENT_HISTORY, 0, list(range(1, EVENT_HISTORY + 1)), None),
    (EVENT_HISTORY + 5, 0, list(range(6, EVENT_HISTORY + 6)), (1, 5)),
    (EVENT_HISTORY + 5, 3, list(range(6, EVENT_HISTORY + 6)), (4, 5)),
    (EVENT_HISTORY + 5, 5, list(range(6, EVENT_HISTORY + 6)), None),
    (EVENT_HISTORY + 5, EVENT_HISTORY + 4, [EVENT_HISTORY + 5], None),
])
def test_events_after_says_what_was_dropped(logged: int, after: int, seqs: list[int],
                                            missed: tuple[int, int] | None) -> None:
    journal, published = journal_with(logged)
    got = journal.events_after(after)
    if missed is not None:
        first, *got = got
        assert (first.seq, first.kind, first.data) == (0, "events_missed", {"from": missed[0], "to": missed[1]})
    assert [e.seq for e in got] == seqs
    assert journal.event_seq == logged and len(published) == logged
    assert [wire.decode_all(f)[0] for f in published[len(published) - len(journal.events):]] == list(journal.events)


def test_a_journal_without_the_lock_writes_nothing_and_keeps_the_state() -> None:
    journal, _ = journal_with(0)
    journal.set_state(journal.state.RUNNING, "")
    assert (journal.state, journal.record_error, journal.lock_is_ours()) == ("running", None, False)


def _published(frames: list[bytes]) -> list[wire.Event]:
    events = [wire.decode_all(f)[0] for f in frames]
    assert all(isinstance(e, wire.Event) for e in events)
    return events  # type: ignore[return-value]


S = SessionState


@pytest.mark.parametrize(("changes", "said"), [
    ([(S.RUNNING, "", True)], [("starting", "running")]),
    ([(S.RUNNING, "", True), (S.RUNNING, "again", True)], [("starting", "running")]),  # no change, no event
    ([(S.RUNNING, "", False)], []),  # announced later by the caller
    ([(S.RUNNING, "", True), (S.BACKOFF, "crash", True), (S.RUNNING, "", True), (S.EXITED, "clean", True)],
     [("starting", "running"), ("running", "backoff"), ("backoff", "running"), ("running", "exited")]),
    ([(S.RUNNING, "", True), (S.STOPPING, "stop requested", True), (S.STOPPING, "stopped on request", True)],
     [("starting", "running"), ("running", "stopping")]),
])
def test_every_change_of_state_is_one_event(changes: list[tuple[SessionState, str, bool]],
                                            said: list[tuple[str, str]]) -> None:
    journal, published = journal_with(0)
    for state, reason, announce in changes:
        journal.set_state(state, reason, announce=announce)
    events = _published(published)
    assert [(e.data["previous"], e.data["state"]) for e in events] == said
    assert all(e.kind == "state" and e.seq > 0 and "reason" in e.data for e in events)
    assert list(journal.events) == events


def test_a_state_event_follows_its_cause_and_carries_the_details() -> None:
    journal, published = journal_with(0)
    journal.set_state(S.BACKOFF, "crash: code 3", announce=False, details={"restart_at": 1767225614.5})
    journal.event("exited", {"code": 3, "signal": None, "core": False, "uptime": 0.5, "class": "crash",
                             "reason": "code 3", "state": "backoff", "time": 1767225613.5, "stderr_tail": ""})
    journal.announce_state()
    journal.announce_state()  # said already
    exited, state = _published(published)
    assert (exited.kind, exited.seq, state.kind, state.seq) == ("exited", 1, "state", 2)
    assert state.data == {"state": "backoff", "previous": "starting", "reason": "crash: code 3",
                          "restart_at": 1767225614.5}


def test_attach_and_detach_are_live_only() -> None:
    """A probe that connects and leaves costs the bounded history nothing: seq 0, not held, not numbered."""
    journal, published = journal_with(2)
    for i in range(EVENT_HISTORY * 2):
        journal.event("client_attached", {"client_id": i, "role": "viewer", "client": "probe"})
        journal.event("client_detached", {"client_id": i, "role": "viewer", "reason": "closed"})
    assert journal.event_seq == 2 and [e.seq for e in journal.events] == [1, 2]
    assert [e.seq for e in journal.events_after(0)] == [1, 2]  # nothing was pushed out
    live = _published(published)[2:]
    assert len(live) == EVENT_HISTORY * 4 and {e.seq for e in live} == {0}
