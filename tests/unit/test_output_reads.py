"""How the shellper reads a flood from the PTY: with nobody attached, a wakeup's reads go to the ring at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from shellper.daemon import output as output_module
from shellper.daemon.output import FORWARD_BATCH, READS_DETACHED, READS_PER_WAKEUP, Output

PTY_READ = 4095
"""What one read of a PTY returns in a flood."""


class _Loop:
    def __init__(self) -> None:
        self.readers: dict[int, tuple[Callable[..., object], tuple[Any, ...]]] = {}

    def add_reader(self, fd: int, callback: Callable[..., object], *args: Any) -> None:
        self.readers[fd] = (callback, args)

    def remove_reader(self, fd: int) -> None:
        self.readers.pop(fd, None)

    def time(self) -> float:
        return 0.0


class _Log:
    def write(self, text: str) -> None:
        pass


class _Child:
    master_fd = 99
    stderr_fd = None

    def output_fds(self) -> tuple[int, ...]:
        return (self.master_fd,)


class _Sink:
    terminal = None


class _Client:
    """A caught-up client that takes frames; counts what it is handed."""

    def __init__(self) -> None:
        self.sink = _Sink()
        self.pieces: list[int] = []

    def on_output(self, old_end: int, data: bytes, frame: bytes) -> None:
        self.pieces.append(len(data))


def _flood(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """os.readv as a flooding PTY: 4,095 bytes per read, never empty; returns the list of reads made."""
    reads: list[int] = []

    def readv(fd: int, buffers: tuple[memoryview, ...]) -> int:
        n = min(PTY_READ, len(buffers[0]))
        buffers[0][:n] = b"x" * n
        reads.append(n)
        return n

    monkeypatch.setattr(output_module.os, "readv", readv)
    return reads


def _wakeup(out: Output, loop: _Loop) -> None:
    callback, args = loop.readers[_Child.master_fd]
    callback(*args)


def test_a_detached_wakeup_fills_the_buffer_and_appends_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _flood(monkeypatch)
    loop = _Loop()
    out = Output(loop, _Log(), 1 << 20, {})  # type: ignore[arg-type]
    out.attach(_Child())  # type: ignore[arg-type]
    appended: list[int] = []
    monkeypatch.setattr(out, "append", lambda data: appended.append(len(data)))
    _wakeup(out, loop)
    assert len(reads) == READS_DETACHED
    assert appended == [READS_DETACHED * PTY_READ]


def test_an_attached_wakeup_hands_pieces_every_two_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _flood(monkeypatch)
    loop = _Loop()
    client = _Client()
    out = Output(loop, _Log(), 1 << 20, {1: client})  # type: ignore[dict-item]
    out.attach(_Child())  # type: ignore[arg-type]
    _wakeup(out, loop)
    assert len(reads) == READS_PER_WAKEUP
    per_piece = -(-FORWARD_BATCH // PTY_READ) * PTY_READ
    assert client.pieces == [per_piece] * (READS_PER_WAKEUP * PTY_READ // per_piece)
    assert out.scrollback.end == READS_PER_WAKEUP * PTY_READ
