"""PROTOCOL.md 8.5: the shellper's own notes in the output stream count in offsets, are replayed, and each one
is marked by a `note` EVENT giving its exact bytes, so a client tells them from the child's (even from a child
that prints the very same bytes)."""

from __future__ import annotations

import time

from support.frames import collect_output
from support.paths import PY
from support.sessions import Sessions

from shellper.core.exits import RestartPolicy
from shellper.daemon.output import notice_bytes
from shellper.protocol import wire

FAKE = notice_bytes("child exit 3; not restarted").strip(b"\r\n")
"""A forgery of the note that the child prints (its CRLFs left out: the PTY would turn LF into CRLF)."""
PROGRAM = (f"import sys, os; sys.stdout.buffer.write(b'before' + {FAKE!r} + b'after'); sys.stdout.flush(); "
           "os._exit(3)")


def _notes(events: list[wire.Frame]) -> list[wire.Event]:
    return [e for e in events if isinstance(e, wire.Event) and e.kind == wire.NOTE_EVENT]


def test_a_note_is_in_the_stream_replayed_and_marked_by_an_event(sessions: Sessions) -> None:
    sessions.start("notes", [PY, "-c", PROGRAM], policy=RestartPolicy(mode="no"))
    try:
        with sessions.connect("notes", events_after=0) as tower:  # from the start of the ring, with every event
            assert tower.replay is not None and tower.replay.offset == 0
            stream = bytearray(tower.replay.data)
            others: list[wire.Frame] = []
            collect_output(tower, stream, lambda _: bool(_notes(others)), b"a note event", timeout=30,
                           others=others)
            [note] = _notes(others)
            offset, length, text = note.data["offset"], note.data["length"], note.data["text"]
            assert bytes(stream[offset:offset + length]) == notice_bytes(text)
            assert text.startswith("child exit 3") and "not restarted" in text
            # The child's forgery is output, not a note: no event covers it.
            fake_at = bytes(stream).index(FAKE)
            assert fake_at < offset and fake_at + len(FAKE) <= offset
        # Replayed: a later client gets the note's bytes at the same offsets, and the held event with them.
        with sessions.connect("notes", events_after=0) as late:
            assert late.replay is not None
            again = bytearray(late.replay.data)
            held: list[wire.Frame] = []
            deadline = time.monotonic() + 10
            while not _notes(held):
                assert time.monotonic() < deadline, held
                frame = late.recv(timeout=deadline - time.monotonic())
                if isinstance(frame, wire.Data):
                    again += frame.data
                elif isinstance(frame, wire.Frame):
                    held.append(frame)
            assert _notes(held)[0].data == note.data
            assert bytes(again[offset:offset + length]) == notice_bytes(text)
    finally:
        sessions.stop("notes")


def test_a_restart_note_says_when_and_counts_in_offsets(sessions: Sessions) -> None:
    policy = RestartPolicy(mode="always", backoff_initial=0.05, backoff_max=0.05, jitter=0.0)
    sessions.start("renote", [PY, "-c", "print('x'); raise SystemExit(3)"], policy=policy)
    try:
        with sessions.connect("renote", events_after=0) as tower:
            assert tower.replay is not None
            stream = bytearray(tower.replay.data)
            others: list[wire.Frame] = []
            collect_output(tower, stream, lambda _: len(_notes(others)) >= 2, b"two notes", timeout=30,
                           others=others)
            first, second = _notes(others)[:2]
            for note in (first, second):
                start, length = note.data["offset"], note.data["length"]
                assert bytes(stream[start:start + length]) == notice_bytes(note.data["text"])
                assert "restarting in" in note.data["text"]
            assert second.data["offset"] > first.data["offset"] + first.data["length"]  # the child's x between
    finally:
        sessions.stop("renote")
