"""What a hostile peer costs a shellper (issue 27): ``python -m bench.hostile``.

One session (``cat``); a tower PINGs it every 20 ms from a thread (the sentinel) while each attack runs in a
connection of its own: map and pair bombs before and after the handshake, then 16 viewers each leaving a
16 MiB frame unfinished. For each: the shellper's peak RSS growth (VmHWM, reset before each attack through
/proc/PID/clear_refs: run as root), how long the attack took, the sentinel's slowest PONG during it, and what
the attacker was told. Figures go to bench/NOTES.md.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import struct
import tempfile
import threading
import time
from pathlib import Path

from shellper.client.launch import launch
from shellper.core.config import SessionConfig
from shellper.protocol import wire

MiB = 1024 * 1024


def _hello(role: str) -> bytes:
    return wire.encode(wire.Hello(version=wire.PROTOCOL_VERSION, role=role, replay_bytes=0, client="bench"))


def _frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">BI", kind, len(payload)) + payload


def _map_bomb(kind: int, size: int, head: bytes = b"\x81") -> bytes:
    count = size - len(head) - 7
    return _frame(kind, head + b"\xa1x\xdd" + count.to_bytes(4, "big") + b"\x80" * count)


def _pair_bomb(kind: int, size: int) -> bytes:
    count = (size - 5) // 2
    return _frame(kind, b"\xdf" + count.to_bytes(4, "big") + b"\xa0\xc0" * count)


def _kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


class Sentinel:
    """A tower PINGing every 20 ms, keeping (sent, latency) of each PING."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.sock.sendall(_hello("tower"))
        self.decoder = wire.Decoder()
        self.pings: list[tuple[float, float]] = []
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        nonce = 0
        while not self.stopping:
            nonce += 1
            sent = time.monotonic()
            self.sock.sendall(wire.encode(wire.Ping(nonce=nonce)))
            while not self.stopping:
                self.decoder.feed(self.sock.recv(1 << 20))
                if any(isinstance(f, wire.Pong) and f.nonce == nonce for f in self.decoder.events()):
                    break
            self.pings.append((sent, time.monotonic() - sent))
            time.sleep(0.02)  # pacing: one PING every 20 ms

    def worst(self, start: float, end: float) -> float:
        """The slowest PONG of the PINGs outstanding at any time in [start, end] (waits for the last of them)."""
        while not self.pings or self.pings[-1][0] <= end:
            time.sleep(0.01)
        return max((latency for sent, latency in self.pings if sent + latency >= start and sent <= end), default=0.0)

    def close(self) -> None:
        self.stopping = True
        self.sock.close()


def _attack(path: str, opening: bytes, payload: bytes) -> str:
    """Send; the fatal ERROR's code, or "accepted" if the shellper answered the PING after it."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(60)
        s.connect(path)
        s.sendall(opening)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(payload + wire.encode(wire.Ping(nonce=424242)))
        decoder = wire.Decoder()
        while True:
            try:
                chunk = s.recv(1 << 20)
            except (ConnectionResetError, TimeoutError):
                chunk = b""
            if not chunk:
                return "closed"
            decoder.feed(chunk)
            for f in decoder.events():
                if isinstance(f, wire.Error) and f.fatal:
                    return f.code
                if isinstance(f, wire.Pong) and f.nonce == 424242:
                    return "accepted"


def _unfinished(path: str, clients: int, each: int) -> str:
    socks = []
    try:
        for _ in range(clients):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(30)
            s.connect(path)
            socks.append(s)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                s.sendall(_hello("viewer") + wire.HEADER.pack(wire.FrameType.DATA, each) + bytes(each - 1))
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # a barrier: the shellper has read all before it
        probe.connect(path)
        probe.sendall(_hello("viewer") + wire.encode(wire.Status()))
        decoder = wire.Decoder()
        while True:
            decoder.feed(probe.recv(1 << 20))
            replies = [f for f in decoder.events() if isinstance(f, wire.StatusReply)]
            if replies:
                probe.close()
                return f"{len(replies[0].info['clients']) - 2} of {clients} still connected"
    finally:
        for s in socks:
            s.close()


def main() -> None:
    directory = Path(tempfile.mkdtemp(prefix="bh-", dir="/tmp"))
    os.chmod(directory, 0o700)
    info = launch(SessionConfig(name="hostile", argv=["cat"], dir=str(directory), cwd="/", env=dict(os.environ)))
    sentinel = Sentinel(info.socket)
    attacks = [
        ("HELLO, 16 MiB of empty maps, before the handshake", b"", _map_bomb(8, 16 * MiB, b"\x83\xa7version\x03"
                                                                             b"\xa4role\xa6viewer")),
        ("PING, 16 MiB of empty maps", _hello("viewer"), _map_bomb(6, 16 * MiB)),
        ("STATUS, 16 MiB of \"\" -> nil pairs", _hello("viewer"), _pair_bomb(0x0D, 16 * MiB)),
        ("PING, 64 KiB of empty maps", _hello("viewer"), _map_bomb(6, 64 * 1024)),
        ("SPAWN, 2 MiB of empty maps (a viewer's)", _hello("viewer"), _map_bomb(0x0A, 2 * MiB)),
    ]
    print(f"{'attack':52} {'peak RSS growth':>16} {'took':>7} {'worst PONG':>11}  outcome")
    try:
        for name, opening, payload in [*attacks, ("16 viewers, a 16 MiB frame each left unfinished", b"", b"")]:
            Path(f"/proc/{info.pid}/clear_refs").write_text("5")
            base = _kib(info.pid, "VmRSS")
            started = time.monotonic()
            outcome = (_attack(info.socket, opening, payload) if payload
                       else _unfinished(info.socket, 16, 16 * MiB))
            took = time.monotonic() - started
            growth = (_kib(info.pid, "VmHWM") - base) / 1024
            worst = sentinel.worst(started, started + took)
            print(f"{name:52} {growth:13.1f} MiB {took:6.2f}s {worst * 1000:8.1f} ms  {outcome}")
    finally:
        sentinel.close()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(info.socket)
            s.sendall(_hello("tower") + wire.encode(wire.Stop(grace=1.0)))
            while s.recv(1 << 20):
                pass
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
