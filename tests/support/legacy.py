"""A version-1 client and a `shellper legacy-main` launcher for the legacy-mode tests: what a Tower written
for the original does, over a real socket, against a real shellper."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from shellper.protocol import legacy
from shellper.protocol.legacy import RawFrame
from shellper.protocol.wire import FrameType
from support.waiting import poll_until, wait_gone

ROOT = Path(__file__).resolve().parent.parent


def config(sock: Path, command: str, *args: str, **extra: Any) -> dict[str, Any]:
    """The original's launch config, as its Tower builds it."""
    return {"command": command, "args": list(args), "cwd": str(extra.pop("cwd", ROOT)),
            "env": extra.pop("env", {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp"}),
            "cols": extra.pop("cols", 80), "rows": extra.pop("rows", 24), "socketPath": str(sock), **extra}


@dataclass
class Launched:
    proc: subprocess.Popen[bytes]
    pid: int
    start_ms: int
    sock: Path
    log: Path
    stdout: bytes

    def stop(self) -> int:
        """SIGTERM, as a Tower's killSession does; the exit status."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(timeout=30)

    def log_text(self) -> str:
        """Its stderr: <socket>.log, or logs/<name>.log once a stop has kept it there."""
        kept = self.log.parent / "logs" / self.log.name
        return "".join(p.read_text() for p in (kept, self.log) if p.exists())


def launch(sock: Path, cfg: dict[str, Any], stderr: Any = None, new_session: bool = True) -> Launched:
    """Spawn `shellper legacy-main` as the original's Tower spawns shellper-main.js: detached, stdin ignored,
    stdout a pipe read to EOF, stderr appended to <socket>.log."""
    log = sock.with_suffix(".log")
    sock.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    own = stderr is None
    err = open(log, "ab") if own else stderr  # noqa: SIM115 - handed to the child, closed right after
    try:
        argv = [sys.executable, "-m", "shellper", "legacy-main", json.dumps(cfg, separators=(",", ":"))]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                start_new_session=new_session)
    finally:
        if own:
            err.close()
    assert proc.stdout is not None
    out = proc.stdout.read()  # to EOF: the shellper closes its stdout after the line
    proc.stdout.close()
    try:
        line = json.loads(out)
    except ValueError:
        proc.wait(timeout=10)
        raise AssertionError(f"legacy-main wrote {out!r}, status {proc.returncode}; log: "
                             f"{log.read_text() if log.exists() else ''}") from None
    return Launched(proc, line["pid"], line["startTime"], sock, log, out)


@dataclass
class V1Client:
    """A version-1 client: frames in, frames out, nothing more."""

    path: Path
    sock: socket.socket = field(init=False)
    reader: legacy.FrameReader = field(default_factory=legacy.FrameReader)
    frames: list[RawFrame] = field(default_factory=list)
    closed: bool = False

    def __post_init__(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(self.path))

    def send(self, frame_type: int, payload: bytes | dict[str, Any] = b"") -> None:
        if isinstance(payload, dict):
            self.sock.sendall(legacy.encode_json(frame_type, payload))
        else:
            self.sock.sendall(legacy.encode(frame_type, payload))

    def hello(self, client_type: str | None = "tower") -> tuple[dict[str, Any], bytes]:
        """HELLO; the WELCOME (as JSON) and the REPLAY's payload, checking they come in that order."""
        hello: dict[str, Any] = {"version": 1} if client_type is None else {"version": 1, "clientType": client_type}
        self.send(FrameType.HELLO, hello)
        return self.hello_frames()

    def hello_frames(self) -> tuple[dict[str, Any], bytes]:
        """The WELCOME (as JSON) and the REPLAY's payload of a HELLO already sent, checking their order."""
        first = self.next_frame()
        assert first.frame_type == FrameType.WELCOME, first
        second = self.next_frame()
        assert second.frame_type == FrameType.REPLAY, second
        return json.loads(first.payload), second.payload

    def _read(self, timeout: float) -> bool:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 20)
        except TimeoutError:
            return True
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            return False
        self.frames.extend(f for f in self.reader.feed(data) if isinstance(f, RawFrame))
        return True

    def next_frame(self, timeout: float = 10.0) -> RawFrame:
        deadline = time.monotonic() + timeout
        while not self.frames:
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                raise AssertionError(f"no frame within {timeout} s (closed={self.closed})")
            self._read(left)
        return self.frames.pop(0)

    def until(self, frame_type: int, timeout: float = 10.0) -> RawFrame:
        """The next frame of this type (others are dropped)."""
        while True:
            frame = self.next_frame(timeout)
            if frame.frame_type == frame_type:
                return frame

    def output_until(self, needle: bytes, timeout: float = 10.0) -> bytes:
        seen = bytearray()
        deadline = time.monotonic() + timeout
        while needle not in seen:
            frame = self.next_frame(max(0.01, deadline - time.monotonic()))
            if frame.frame_type == FrameType.DATA:
                seen += frame.payload
        return bytes(seen)

    def exit_frame(self, timeout: float = 10.0) -> dict[str, Any]:
        return json.loads(self.until(FrameType.EXIT, timeout).payload)  # type: ignore[no-any-return]

    def quiet_for(self, seconds: float) -> list[RawFrame]:
        """Frames that arrive within ``seconds`` (for checking that something does NOT happen)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.closed:
            self._read(max(0.01, deadline - time.monotonic()))
        got, self.frames = self.frames, []
        return got

    def ping(self, timeout: float = 10.0) -> None:
        """PING and wait for its PONG: everything sent before it has been handled."""
        self.send(FrameType.PING)
        self.until(FrameType.PONG, timeout)

    def wait_closed(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.closed:
            assert time.monotonic() < deadline, "connection not closed"
            self._read(deadline - time.monotonic())

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> V1Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Legacy:
    """Starts legacy shellpers in one socket directory; all are SIGTERMed and gone at the end."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.started: list[Launched] = []

    def start(self, command: str = "cat", *args: str, name: str = "shellper-t1", **extra: Any) -> Launched:
        sock = self.dir / f"{name}.sock"
        launched = launch(sock, config(sock, command, *args, **extra))
        self.started.append(launched)
        return launched

    def client(self, launched: Launched) -> V1Client:
        return V1Client(launched.sock)

    def replay_with(self, launched: Launched, needle: bytes) -> bytes:
        """The REPLAY of a new connection, once the session's output holds ``needle``."""
        def replay() -> bytes | None:
            with self.client(launched) as c:
                data = c.hello()[1]
            return data if needle in data else None
        return poll_until(replay, what=f"{needle!r} in the output")  # type: ignore[no-any-return]


@pytest.fixture
def legacy_env() -> Iterator[Legacy]:
    base = Path(tempfile.mkdtemp(prefix="lg-", dir="/tmp"))
    env = Legacy(base / "run")  # the directory legacy-main creates, as shellper-main.js did
    try:
        yield env
    finally:
        for launched in env.started:
            launched.stop()
            assert wait_gone(launched.pid, 10)
        leftovers = sorted(p.name for p in env.dir.iterdir() if p.name != "logs") if env.dir.exists() else []
        shutil.rmtree(base)
        assert not [n for n in leftovers if not n.endswith(".log")], leftovers
