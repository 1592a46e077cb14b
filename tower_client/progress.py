"""What the Tower has consumed of each session's stream, kept in a crash-safe journal.

Per session: the shellper instance, the output offset the Tower has taken everything before, and the
last event sequence number it has taken. The Tower acknowledges what it consumed (``ack_*``: memory
only, cheap per chunk); a background commit rewrites the journal atomically (shellper-free
:func:`~tower_client.atomicfile.write_atomic`: temp file, fsync, rename, fsync of the directory), one
write for however many acknowledgements arrived meanwhile, at most one every ``COMMIT_INTERVAL``
seconds while acknowledgements keep coming; ``await sync()`` commits at once and returns once everything
acknowledged so far is on disk. After a kill -9 the journal holds the last committed positions, and
the Tower resumes each stream there: ``resume_from`` = ``offset``, ``events_after`` = ``event_seq``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from shellper.core.errors import ShellperError
from shellper.core.names import BadName, validate_name
from tower_client.atomicfile import read_small, write_atomic

__all__ = ["JOURNAL_VERSION", "MAX_JOURNAL_BYTES", "JournalPosition", "ProgressError", "ProgressJournal"]

JOURNAL_VERSION = 1
MAX_JOURNAL_BYTES = 16 * 1024 * 1024
COMMIT_INTERVAL = 0.05
"""Seconds between background commits while acknowledgements keep coming. Each commit encodes every
session's position: back to back, 200 sessions streaming cost the Tower most of its CPU in commits
(bench/NOTES.md, issue 30). A kill -9 redelivers at most this much more; sync() does not wait."""


class ProgressError(ShellperError):
    """The journal cannot be used (unreadable, not this format, written by a newer version, or the
    commit failed); ``path`` and ``reason`` say which and why. Deleting the file starts every stream
    again at what its ring still holds."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"progress journal {path}: {reason}")


@dataclass(frozen=True)
class JournalPosition:
    """How far the Tower has consumed one shellper instance's stream."""

    instance_id: str
    offset: int = 0
    """Every output byte before this offset has been consumed."""
    event_seq: int = 0
    """Every numbered event up to this one has been consumed (0: none)."""
    stop: float | None = None
    """The Tower asked this session to stop, with this grace period, and has not seen it through yet: a
    Tower restarted in between finishes the stop instead of respawning the session (None: no stop)."""


def _parse(data: bytes, path: str) -> dict[str, JournalPosition]:
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProgressError(path, f"not valid JSON: {exc}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("sessions"), dict):
        raise ProgressError(path, 'expected {"version": 1, "sessions": {...}}')
    if obj.get("version") != JOURNAL_VERSION:
        raise ProgressError(path, f"version {obj.get('version')!r}, this library reads {JOURNAL_VERSION}")
    out: dict[str, JournalPosition] = {}
    for name, row in obj["sessions"].items():
        try:
            validate_name(name)
        except BadName as exc:
            raise ProgressError(path, f"session {name!r}: {exc}") from None
        ok = (isinstance(row, dict) and isinstance(row.get("instance_id"), str) and row["instance_id"]
              and all(isinstance(row.get(k), int) and not isinstance(row.get(k), bool) and row[k] >= 0
                      for k in ("offset", "event_seq")))
        if not ok:
            raise ProgressError(path, f"session {name!r}: expected instance_id (string), offset and event_seq "
                                "(integers >= 0)")
        stop = row.get("stop")
        if stop is not None and (isinstance(stop, bool) or not isinstance(stop, int | float) or not 0 <= stop < 1e9):
            raise ProgressError(path, f"session {name!r}: stop must be a grace period in seconds (a number >= 0)")
        out[name] = JournalPosition(row["instance_id"], row["offset"], row["event_seq"],
                             None if stop is None else float(stop))
    return out


_encode = json.JSONEncoder(separators=(",", ":")).encode
"""json.dumps(value, separators=(",", ":")), without making an encoder per call."""
_string: Callable[[str], str] = json.encoder.encode_basestring_ascii
"""A string as json.dumps writes it (ensure_ascii)."""


class ProgressJournal:
    """The consumed positions: ``acked`` (in memory, what the Tower acknowledged) and ``durable`` (on disk)."""

    def __init__(self, path: str | os.PathLike[str], positions: dict[str, JournalPosition] | None = None) -> None:
        self.path = os.fspath(path)
        self.acked: dict[str, JournalPosition] = dict(positions or {})
        self.durable: dict[str, JournalPosition] = dict(self.acked)
        self.commits = 0
        """Journal writes done: each carries every acknowledgement made before it started."""
        self._version = 0
        self._durable_version = 0
        self._flusher: asyncio.Task[None] | None = None
        self._error: ProgressError | None = None
        self._committed_at = -COMMIT_INTERVAL
        """Event-loop time the last background commit ended."""
        self._hurry = asyncio.Event()
        self._texts: dict[str, tuple[JournalPosition, str]] = {}
        """Each session's row as encode() last wrote it, with the position it was made from."""
        """A sync() waits: the next commit starts now, whatever COMMIT_INTERVAL says."""

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ProgressJournal:
        """The journal at ``path`` (empty if there is none yet); ProgressError for a file that is not one."""
        p = os.fspath(path)
        try:
            data = read_small(p, MAX_JOURNAL_BYTES)
        except OSError as exc:
            raise ProgressError(p, f"cannot read: {exc.strerror or exc}") from None
        return cls(p, None if data is None else _parse(data, p))

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.acked))

    def get(self, name: str) -> JournalPosition | None:
        return self.acked.get(name)

    # ----------------------------------------------------------------------------------- acknowledging

    def start(self, name: str, instance_id: str, offset: int = 0) -> None:
        """Track ``name`` from ``offset`` of ``instance_id`` (a new instance starts over); kept if it is the same."""
        pos = self.acked.get(name)
        if pos is None or pos.instance_id != instance_id:
            self._set(name, JournalPosition(instance_id, offset, 0))

    def ack_output(self, name: str, instance_id: str, offset: int) -> None:
        """Everything of ``instance_id``'s output before ``offset`` is consumed. An older instance's or an
        earlier offset is ignored: positions only move forward."""
        pos = self.acked.get(name)
        if pos is not None and pos.instance_id == instance_id and offset > pos.offset:  # per chunk: no replace()
            self._set(name, JournalPosition(instance_id, offset, pos.event_seq, pos.stop))

    def ack_event(self, name: str, instance_id: str, seq: int) -> None:
        pos = self.acked.get(name)
        if pos is not None and pos.instance_id == instance_id and seq > pos.event_seq:
            self._set(name, replace(pos, event_seq=seq))

    def intend_stop(self, name: str, instance_id: str, grace: float) -> None:
        """The Tower is about to stop ``name`` (``instance_id``) with ``grace``: ``await sync()`` before
        sending the STOP, so a Tower killed meanwhile finds the intent and finishes the stop."""
        pos = self.acked.get(name)
        if pos is None or pos.instance_id != instance_id:
            pos = JournalPosition(instance_id)
        self._set(name, replace(pos, stop=float(grace)))

    def stops(self) -> dict[str, float]:
        """Sessions with a stop not seen through, and the grace each was asked with."""
        return {name: pos.stop for name, pos in sorted(self.acked.items()) if pos.stop is not None}

    def forget(self, name: str) -> None:
        if self.acked.pop(name, None) is not None:
            self._changed()

    def _set(self, name: str, pos: JournalPosition) -> None:
        self.acked[name] = pos
        self._changed()

    def _changed(self) -> None:
        self._version += 1
        if self._flusher is not None and not self._flusher.done():  # per chunk: the commit under way takes it
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a script): save() writes it
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush(), name=f"progress {self.path}")

    # ----------------------------------------------------------------------------------- committing

    def encode(self) -> bytes:
        """The journal's bytes: ``{"version":..,"sessions":{name: row, ...}}`` (names sorted, no spaces). Each
        row's text is kept with the position it was made from, so a commit encodes only what moved since
        the last one (200 sessions, a commit every 50 ms: most rows have not)."""
        rows, texts = [], self._texts
        for name, p in sorted(self.acked.items()):
            kept = texts.get(name)
            if kept is None or kept[0] is not p:
                if type(p.offset) is int and type(p.event_seq) is int and p.stop is None:  # json.dumps's text
                    text = f'{_string(name)}:{{"instance_id":{_string(p.instance_id)},"offset":{p.offset},' \
                           f'"event_seq":{p.event_seq}}}'
                else:
                    row: dict[str, Any] = {"instance_id": p.instance_id, "offset": p.offset,
                                           "event_seq": p.event_seq}
                    if p.stop is not None:  # only then: a journal without stops reads as it always did
                        row["stop"] = p.stop
                    text = f"{_encode(name)}:{_encode(row)}"
                kept = texts[name] = (p, text)
            rows.append(kept[1])
        for gone in texts.keys() - self.acked.keys():
            del texts[gone]
        return f'{{"version":{JOURNAL_VERSION},"sessions":{{{",".join(rows)}}}}}'.encode()

    def save(self) -> None:
        """Write it now (blocking): for scripts and for the last commit of a Tower closing."""
        version, snapshot = self._version, dict(self.acked)
        self._write(self.encode())
        self.durable, self._durable_version = snapshot, max(self._durable_version, version)

    def _write(self, data: bytes) -> None:
        try:
            write_atomic(self.path, data)
        except OSError as exc:
            raise ProgressError(self.path, f"commit failed: {exc}") from None
        self.commits += 1

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        while self._durable_version < self._version:
            pause = self._committed_at + COMMIT_INTERVAL - loop.time()
            if pause > 0 and not self._hurry.is_set():  # group what comes meanwhile into one commit
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause):
                        await self._hurry.wait()
            self._hurry.clear()
            version, snapshot, data = self._version, dict(self.acked), self.encode()
            try:
                await asyncio.to_thread(self._write, data)  # fsync off the event loop
            except ProgressError as exc:
                self._error = exc
                return
            finally:
                self._committed_at = loop.time()
            self.durable, self._durable_version = snapshot, version

    async def sync(self) -> None:
        """Return once every acknowledgement made before the call is on disk; ProgressError if a commit failed."""
        target = self._version
        while self._durable_version < target:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            if self._flusher is None or self._flusher.done():
                self._flusher = asyncio.get_running_loop().create_task(self._flush())
            self._hurry.set()
            await asyncio.shield(self._flusher)
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    async def close(self) -> None:
        """Commit what is left and stop committing."""
        await self.sync()
