"""A terminal handed to the shellper (protocol 7.4): real PTY pairs stand in for the user's terminal.

The test holds the master side as the terminal emulator would: it reads what the shellper writes to the
terminal and types on it. Every test checks that the shellper lets go of the terminal's descriptor.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import termios
import time
import tty
from collections.abc import Iterator

import pytest
from support.paths import PY
from support.sessions import Sessions
from support.waiting import poll_until, wait_gone

from shellper.client.blocking import Client, SessionGone
from shellper.core.exits import RestartPolicy
from shellper.protocol import wire

DETACH = 0x1C


class Term:
    """A PTY pair: ``master`` is the emulator's side, ``slave`` the terminal a client hands over."""

    def __init__(self, cols: int = 80, rows: int = 24) -> None:
        self.master, self.slave = os.openpty()
        tty.setraw(self.slave)
        termios.tcsetwinsize(self.slave, (rows, cols))
        self.path = os.ttyname(self.slave)
        self.seen = bytearray()

    def fresh_open(self) -> int:
        """What ``shellper attach`` hands over: its own open of the terminal."""
        return os.open(self.path, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)

    def type(self, data: bytes) -> None:
        os.write(self.master, data)

    def expect(self, needle: bytes, timeout: float = 10.0) -> bytes:
        """Read the screen until ``needle`` has been shown; everything shown so far."""
        deadline = time.monotonic() + timeout
        while needle not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"{needle!r} not shown within {timeout:g} s; got {bytes(self.seen[-300:])!r}")
            if select.select([self.master], [], [], left)[0]:
                self.seen += os.read(self.master, 65536)
        return bytes(self.seen)

    def close(self) -> None:
        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)


@pytest.fixture(autouse=True)
def _stopped(sessions: Sessions) -> Iterator[None]:
    """Each test's sessions are stopped at its end (the sessions fixture then checks nothing is left)."""
    yield
    for info in sessions.started:
        if not wait_gone(info.pid, 0):
            sessions.stop(info.name, grace=0.1)


@pytest.fixture
def term() -> Iterator[Term]:
    t = Term()
    yield t
    t.close()


def hand_over(sessions: Sessions, name: str, term: Term, role: str = "terminal", **hello: object) -> Client:
    """Connect as ``role`` offering a fresh open of ``term``; our copy is closed again, as attach does."""
    client = Client(sessions.dir / f"{name}.sock", role, client_name="test-handoff")
    fd = term.fresh_open()
    try:
        client.connect(terminal_fd=fd, detach_byte=DETACH, **hello)  # type: ignore[arg-type]
    finally:
        os.close(fd)
    return client


def holds(pid: int, path: str) -> bool:
    """Whether process ``pid`` has a descriptor open on ``path``."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == path:
                return True
    return False


def frames_until_closed(client: Client, timeout: float = 10.0) -> list[wire.Frame]:
    got: list[wire.Frame] = []
    deadline = time.monotonic() + timeout
    with contextlib.suppress(SessionGone):
        while time.monotonic() < deadline:
            frame = client.recv(timeout=max(0.0, deadline - time.monotonic()))
            if frame is not None:
                got.append(frame)
        pytest.fail(f"the connection stayed open; frames: {got}")
    return got


def test_handed_terminal_shows_replay_and_output_takes_keys_and_detaches(sessions: Sessions, term: Term) -> None:
    info = sessions.start("cat", ["cat"])
    with sessions.connect("cat") as tower:
        tower.write(b"before\r")
        poll_until(lambda: tower.recv(timeout=0.1) is not None and tower.output.next_offset >= 16,
                   what="cat's copy of the line")
    client = hand_over(sessions, "cat", term, replay_bytes=1 << 20)
    with client:
        assert client.welcome is not None and client.welcome.terminal is True
        assert client.replay is not None and client.replay.data == b""  # the history went to the terminal
        assert client.replay.offset == client.welcome.ring_end
        term.expect(b"before\r\nbefore\r\n")
        assert holds(info.pid, term.path)
        term.type(b"typed\r")
        term.expect(b"typed\r\ntyped\r\n")  # the PTY's echo, then cat's copy
        term.type(b"last" + bytes([DETACH]) + b"never\r")
        frames = frames_until_closed(client)
    releases = [f for f in frames if isinstance(f, wire.Release)]
    assert [r.reason for r in releases] == ["detach"]
    assert not any(isinstance(f, wire.Data) for f in frames)  # output went to the terminal, not the socket
    poll_until(lambda: not holds(info.pid, term.path), what="the shellper to close the terminal")
    with sessions.connect("cat", replay_bytes=1 << 20) as tower:  # what was typed before the detach byte
        tower.write(b"\r")
        seen = b""
        while b"last\r\n" not in seen:
            frame = tower.recv(timeout=10)
            assert frame is not None, seen
            seen += frame.data if isinstance(frame, (wire.Data, wire.Replay)) else b""
        assert b"never" not in seen


@pytest.mark.parametrize("offer", ["tower with a terminal", "terminal with a pipe"])
def test_a_handover_the_shellper_may_not_take_is_refused_and_the_client_relays(
        sessions: Sessions, term: Term, offer: str) -> None:
    info = sessions.start("cat", ["cat"])
    read_end, write_end = os.pipe()
    path = term.path if offer.startswith("tower") else os.readlink(f"/proc/self/fd/{read_end}")
    client = Client(sessions.dir / "cat.sock", "tower" if offer.startswith("tower") else "terminal")
    fd = term.fresh_open() if offer.startswith("tower") else read_end
    try:
        client.connect(terminal_fd=fd, detach_byte=DETACH)
        with client:
            assert client.welcome is not None and client.welcome.terminal is None
            assert not holds(info.pid, path)
            client.write(b"relayed\r")
            seen = b""
            while b"relayed\r\nrelayed\r\n" not in seen:  # output comes as DATA, as without a handover
                frame = client.recv(timeout=10)
                assert frame is not None, seen
                seen += frame.data if isinstance(frame, wire.Data) else b""
    finally:
        if fd != read_end:
            os.close(fd)
        os.close(read_end)
        os.close(write_end)


def test_a_descriptor_after_the_handshake_is_never_taken(sessions: Sessions, term: Term) -> None:
    info = sessions.start("cat", ["cat"])
    with sessions.connect("cat", "terminal") as client:
        assert client.sock is not None
        fd = term.fresh_open()
        try:
            socket.send_fds(client.sock, [wire.encode(wire.Ping(nonce=5))], [fd])
        finally:
            os.close(fd)
        pong = client.request(wire.Ping(nonce=6), wire.Pong)
        assert isinstance(pong, wire.Pong)
        assert not holds(info.pid, term.path)


def test_half_close_gets_the_terminal_back(sessions: Sessions, term: Term) -> None:
    info = sessions.start("cat", ["cat"])
    client = hand_over(sessions, "cat", term)
    with client:
        assert client.sock is not None
        client.sock.shutdown(socket.SHUT_WR)
        frames = frames_until_closed(client)
    assert [f.reason for f in frames if isinstance(f, wire.Release)] == ["closing"]
    poll_until(lambda: not holds(info.pid, term.path), what="the shellper to close the terminal")


def test_exit_gives_the_terminal_back_before_the_exit_frame(sessions: Sessions, term: Term) -> None:
    sessions.start("once", [PY, "-c", "import sys; sys.stdout.write('\\x1b[?1049hin-tui'); sys.stdout.flush(); "
                                      "sys.stdin.readline(); sys.exit(3)"], policy=RestartPolicy(mode="no"))
    client = hand_over(sessions, "once", term)
    with client:
        term.expect(b"in-tui")
        term.type(b"\r")
        frames: list[wire.Frame] = []
        while not any(isinstance(f, wire.Exit) for f in frames):
            frame = client.recv(timeout=10)
            assert frame is not None, frames
            frames.append(frame)
    kinds = [type(f).__name__ for f in frames if isinstance(f, (wire.Release, wire.Exit))]
    assert kinds == ["Release", "Exit"]
    release = next(f for f in frames if isinstance(f, wire.Release))
    assert release.reason == "exit" and b"\x1b[?1049l" in release.reset  # switches the alternate screen off
    exit_frame = next(f for f in frames if isinstance(f, wire.Exit))
    assert exit_frame.code == 3


def test_a_terminal_that_hangs_up_is_released(sessions: Sessions) -> None:
    info = sessions.start("cat", ["cat"])
    term = Term()
    try:
        client = hand_over(sessions, "cat", term)
    finally:
        term.close()  # the emulator and every other open of the terminal go away: the shellper reads EIO
    with client:
        frames = frames_until_closed(client)
    assert [f.reason for f in frames if isinstance(f, wire.Release)] == ["hangup"]
    poll_until(lambda: not holds(info.pid, term.path), what="the shellper to close the terminal")


def test_the_terminal_size_is_applied_at_the_handover(sessions: Sessions) -> None:
    sessions.start("cat", ["cat"], cols=80, rows=24)
    term = Term(cols=91, rows=33)
    try:
        with hand_over(sessions, "cat", term) as client:
            reply = client.request(wire.Status(), wire.StatusReply)
            assert isinstance(reply, wire.StatusReply)
            assert (reply.info["cols"], reply.info["rows"]) == (91, 33)
            assert [c["terminal"] for c in reply.info["clients"]] == [True]
    finally:
        term.close()


def test_a_detach_byte_that_is_not_a_byte_is_a_bad_field(sessions: Sessions, term: Term) -> None:
    sessions.start("cat", ["cat"])
    client = Client(sessions.dir / "cat.sock", "terminal")
    fd = term.fresh_open()
    try:
        with pytest.raises(Exception, match="detach_byte"):
            client.connect(terminal_fd=fd, detach_byte=256)
    finally:
        os.close(fd)
        client.close()


def test_a_viewer_terminal_types_nothing_but_can_detach(sessions: Sessions, term: Term) -> None:
    info = sessions.start("cat", ["cat"])
    with hand_over(sessions, "cat", term, role="viewer") as client:
        assert client.welcome is not None and client.welcome.terminal is True
        term.type(b"not-for-the-child\r" + bytes([DETACH]))
        frames = frames_until_closed(client)
    assert [f.reason for f in frames if isinstance(f, wire.Release)] == ["detach"]
    poll_until(lambda: not holds(info.pid, term.path), what="the shellper to close the terminal")
    with sessions.connect("cat", replay_bytes=1 << 20) as tower:
        reply = tower.request(wire.Status(), wire.StatusReply)
        assert isinstance(reply, wire.StatusReply) and reply.info["ring_end"] == 0  # cat never got a byte


def test_a_killed_attach_client_leaves_the_terminal_alone(sessions: Sessions, term: Term) -> None:
    """SIGKILL gives attach no chance to ask for its terminal back: its socket closing is the request."""
    info = sessions.start("cat", ["cat"])
    script = ("import os, signal, sys; from shellper.client.blocking import Client\n"
              "c = Client(sys.argv[1], 'terminal'); fd = os.open(sys.argv[2], os.O_RDWR | os.O_NOCTTY)\n"
              "c.connect(terminal_fd=fd); os.close(fd); print(c.welcome.terminal, flush=True); signal.pause()")
    proc = subprocess.Popen([PY, "-c", script, str(sessions.dir / "cat.sock"), term.path], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "True"
        assert holds(info.pid, term.path)
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    poll_until(lambda: not holds(info.pid, term.path), what="the shellper to close the terminal")
    term.type(b"after\r")  # nobody reads the terminal now: the keys stay in it, the child gets none
    with sessions.connect("cat") as tower:
        reply = tower.request(wire.Status(), wire.StatusReply)
        assert isinstance(reply, wire.StatusReply) and reply.info["ring_end"] == 0
