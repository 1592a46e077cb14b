"""shellper.daemon.journal: the numbered event log a resuming client reads from, as a table."""

from __future__ import annotations

import pytest

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
