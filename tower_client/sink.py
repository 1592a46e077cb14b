"""Exactly-once storage of a Fleet's output: what a Tower writes before it acknowledges.

A Tower that keeps every session's output must keep its store in step with the Fleet's journal: write what
it consumed before ``fleet.ack(item)``, and on each start throw away what it wrote past the journal's
acknowledged offset (that part comes again). :class:`Sink` does that bookkeeping once, for any store:

    sink = FileSink(out_dir, fleet.journal)   # one file per session instance, byte offset = stream offset
    async for item in fleet:
        sink.store(item)                      # output written at its offset; other items are not stored
        fleet.ack(item)

A store of another kind (a database) subclasses :class:`Sink` and gives ``trim`` and ``write``; the offsets
make both idempotent (a row per chunk keyed by session, instance and offset; ``trim`` deletes the rows
from an offset on).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Self

from shellper.core.names import validate_name
from tower_client.progress import ProgressJournal
from tower_client.stream import FleetItem, Missed, OutputChunk

__all__ = ["FileSink", "Sink"]


class Sink(ABC):
    """Where a Tower keeps each session's output, in step with ``journal`` (``fleet.journal``).

    The first time a session instance's output reaches :meth:`store` in this life of the Tower, its store is
    trimmed to the offset the journal acknowledged (0 for an instance the journal does not know): what was
    written past it before a crash was not acknowledged, and the Fleet delivers it again. The counters say
    what the stream did: ``redelivered`` and ``skipped`` stay 0 when the Fleet keeps its word,
    ``missed`` counts bytes the ring no longer held (a :class:`~tower_client.stream.Missed`).
    """

    def __init__(self, journal: ProgressJournal) -> None:
        self.journal = journal
        self.ends: dict[tuple[str, str], int] = {}
        """(session, instance) -> the offset its stored output reaches in this life."""
        self.stored = 0
        self.redelivered = 0
        self.skipped = 0
        self.missed = 0

    def store(self, item: FleetItem) -> None:
        """Keep ``item`` if it is output (at its offset; a Missed leaves its range out); other items are the
        Tower's to show or keep. Call it before ``fleet.ack(item)``."""
        if isinstance(item, OutputChunk):
            end = self._end(item.session, item.instance_id)
            if item.offset < end:
                self.redelivered += min(end, item.end) - item.offset
            elif item.offset > end:
                self.skipped += item.offset - end
            self.write(item.session, item.instance_id, item.offset, item.data)
            self.ends[item.session, item.instance_id] = max(end, item.end)
            self.stored += len(item.data)
        elif isinstance(item, Missed):
            end = self._end(item.session, item.instance_id)
            self.missed += item.missed
            self.ends[item.session, item.instance_id] = max(end, item.offset)

    def _end(self, session: str, instance_id: str) -> int:
        end = self.ends.get((session, instance_id))
        if end is None:
            for key in [k for k in self.ends if k[0] == session]:  # an older instance of it ends here
                del self.ends[key]
                self.closed(*key)
            pos = self.journal.get(session)
            end = pos.offset if pos is not None and pos.instance_id == instance_id else 0
            self.trim(session, instance_id, end)
            self.ends[session, instance_id] = end
        return end

    @abstractmethod
    def trim(self, session: str, instance_id: str, offset: int) -> None:
        """Drop what is stored of this instance's output from ``offset`` on (it comes again)."""

    @abstractmethod
    def write(self, session: str, instance_id: str, offset: int, data: bytes) -> None:
        """Store ``data``, the instance's output from ``offset``; a range written again is written the same."""

    def closed(self, session: str, instance_id: str) -> None:  # noqa: B027 - optional for a subclass
        """The Fleet follows a newer instance of ``session``: nothing more of this one comes in this life."""

    def close(self) -> None:  # noqa: B027 - optional for a subclass
        """Release what the store holds open."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FileSink(Sink):
    """One file per session instance in ``directory``, ``SESSION-INSTANCE.out``, where a byte's position is
    its stream offset (a Missed range is a hole of zeros). Written with ``pwrite`` into the page cache: it
    survives the Tower's own death at any moment (kill -9), not the machine's, since the journal may then be
    on disk ahead of the file: a Tower that must survive that calls :meth:`sync` before ``fleet.ack``."""

    def __init__(self, directory: str | os.PathLike[str], journal: ProgressJournal) -> None:
        super().__init__(journal)
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        self._fds: dict[tuple[str, str], int] = {}

    def path(self, session: str, instance_id: str) -> str:
        """The file that holds this instance's output."""
        validate_name(session)
        if not instance_id or "/" in instance_id or instance_id.startswith("."):
            raise ValueError(f"not an instance id: {instance_id!r}")
        return os.path.join(self.directory, f"{session}-{instance_id}.out")

    def _fd(self, session: str, instance_id: str) -> int:
        fd = self._fds.get((session, instance_id))
        if fd is None:
            fd = os.open(self.path(session, instance_id), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._fds[session, instance_id] = fd
        return fd

    def trim(self, session: str, instance_id: str, offset: int) -> None:
        os.ftruncate(self._fd(session, instance_id), offset)

    def write(self, session: str, instance_id: str, offset: int, data: bytes) -> None:
        fd, view = self._fd(session, instance_id), memoryview(data)
        while view:  # pwrite to a regular file writes it all but for a full disk, which raises
            n = os.pwrite(fd, view, offset)
            view, offset = view[n:], offset + n

    def sync(self) -> None:
        """fsync every open file: what was stored is on disk (blocking; ``asyncio.to_thread`` in a loop)."""
        for fd in list(self._fds.values()):
            os.fsync(fd)

    def closed(self, session: str, instance_id: str) -> None:
        fd = self._fds.pop((session, instance_id), None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for key in list(self._fds):
            self.closed(*key)
