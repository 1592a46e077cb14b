"""The shipped sink: trimmed to the journal on first sight, written at offsets, counting what the stream did."""

from __future__ import annotations

from pathlib import Path

from tower_client import FileSink, Missed, OutputChunk, Sink, StateChange
from tower_client.progress import ProgressJournal
from tower_client.stream import FleetState


def test_a_new_instance_starts_at_zero_and_is_written_at_offsets(tmp_path: Path) -> None:
    journal = ProgressJournal(tmp_path / "j.json")
    with FileSink(tmp_path / "out", journal) as sink:
        sink.store(OutputChunk("a", "i1", 0, b"hello "))
        sink.store(StateChange("a", "i1", FleetState.RUNNING, "", 0.0))  # not output: not stored
        sink.store(OutputChunk("a", "i1", 6, b"world"))
        path = Path(sink.path("a", "i1"))
    assert path.read_bytes() == b"hello world"
    assert (sink.stored, sink.redelivered, sink.skipped) == (11, 0, 0)


def test_after_a_crash_the_file_is_trimmed_to_what_the_journal_acknowledged(tmp_path: Path) -> None:
    journal = ProgressJournal(tmp_path / "j.json")
    journal.start("a", "i1")
    with FileSink(tmp_path / "out", journal) as sink:
        sink.store(OutputChunk("a", "i1", 0, b"0123456789"))
    journal.ack_output("a", "i1", 4)  # the Tower died having acknowledged 4 of the 10 bytes it wrote
    with FileSink(tmp_path / "out", journal) as again:
        again.store(OutputChunk("a", "i1", 4, b"45"))  # the Fleet resumes at the acknowledged offset
        path = Path(again.path("a", "i1"))
        assert path.read_bytes() == b"012345"
    assert (again.redelivered, again.skipped) == (0, 0)


def test_redelivered_skipped_and_missed_bytes_are_counted(tmp_path: Path) -> None:
    journal = ProgressJournal(tmp_path / "j.json")
    with FileSink(tmp_path / "out", journal) as sink:
        sink.store(OutputChunk("a", "i1", 0, b"abcd"))
        sink.store(OutputChunk("a", "i1", 2, b"cdef"))  # 2 bytes again
        sink.store(OutputChunk("a", "i1", 9, b"j"))  # 3 bytes never came
        sink.store(Missed("a", "i1", 20, 10))  # the ring no longer held 10
        sink.store(OutputChunk("a", "i1", 20, b"u"))
        data = Path(sink.path("a", "i1")).read_bytes()
    assert (sink.redelivered, sink.skipped, sink.missed) == (2, 3, 10)
    assert data == b"abcdef\0\0\0j" + b"\0" * 10 + b"u"


def test_a_newer_instance_gets_its_own_file_and_the_old_one_is_closed(tmp_path: Path) -> None:
    journal = ProgressJournal(tmp_path / "j.json")
    closed: list[tuple[str, str]] = []

    class Recording(Sink):
        def trim(self, session: str, instance_id: str, offset: int) -> None:
            self.trims.append((session, instance_id, offset))

        def write(self, session: str, instance_id: str, offset: int, data: bytes) -> None:
            self.rows[session, instance_id, offset] = data

        def closed(self, session: str, instance_id: str) -> None:
            closed.append((session, instance_id))

    sink = Recording(journal)
    sink.trims, sink.rows = [], {}  # type: ignore[attr-defined]
    sink.store(OutputChunk("a", "i1", 0, b"x"))
    sink.store(OutputChunk("a", "i2", 0, b"y"))
    assert sink.trims == [("a", "i1", 0), ("a", "i2", 0)]  # type: ignore[attr-defined]
    assert sink.rows == {("a", "i1", 0): b"x", ("a", "i2", 0): b"y"}  # type: ignore[attr-defined]
    assert closed == [("a", "i1")]
