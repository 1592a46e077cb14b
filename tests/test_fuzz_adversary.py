"""A protocol fuzzer with a sentinel (issue 27): malformed frames of all three protocol versions, bombs (maps, arrays
and strings, nested and long), unfinished frames, slowloris, floods of connections and a client that never reads,
thrown at one shellper from several threads at once while a tower, the sentinel, PINGs it. Every PING must be
answered within a generous bound ("served": not a latency figure). It reports the frames sent, crashes, hangs (a
connection the shellper neither answered nor closed in time) and the shellper's peak RSS, which must stay bounded.

tests/test_hostile.py's fuzzer judges every answer against the spec (versions 2 and 3); this one judges only that the
shellper holds up, and is where the costly attacks are. A few seconds in ``make test``, minutes in ``make soak``.
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.hostile import Watcher, judge, mutation_cases
from support.sessions import Sessions
from support.soak import child, hello, quiet_fds, scales, status_kib
from support.waiting import poll_until, wait_gone

from shellper.daemon.clientconn import MAX_PARTIAL_BYTES
from shellper.daemon.transport import CLOSE_DRAIN
from shellper.protocol import legacy, wire
from shellper.protocol.wire import FrameType

MiB = 1024 * 1024
HANDSHAKE_TIMEOUT = 2.0
FRAME_TIMEOUT = 1.0
HANG_BOUND = 20.0
"""Seconds the shellper has to close a connection it owes an end (the client half-closed, or its deadline passed)."""
SERVED_BOUND = 20.0
"""Seconds the sentinel's PING may wait for its PONG while the attacks run: generous, the machine is shared."""


@dataclass(frozen=True)
class AdversaryScale:
    seconds: float
    workers: int
    max_bomb: int
    flood: int


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    frames: int = 0
    connections: int = 0
    scenarios: Counter[str] = field(default_factory=Counter)
    endings: Counter[str] = field(default_factory=Counter)
    hangs: list[str] = field(default_factory=list)

    def add(self, kind: str, frames: int, connections: int = 1) -> None:
        with self.lock:
            self.scenarios[kind] += 1
            self.frames += frames
            self.connections += connections


def _frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">BI", kind, len(payload)) + payload


# --------------------------------------------------------------------------------------------- bombs


def bomb_payload(rng: random.Random, size: int) -> bytes:
    """A msgpack payload of about ``size`` bytes built to cost its decoder the most: many empty maps or arrays,
    empty-string -> nil pairs, nesting, long strings and binaries, extension types; behind a field or bare."""
    shape = rng.choice(["maps", "arrays", "pairs", "deep", "str", "bin", "ext", "mixed"])
    n = max(1, size - 16)
    if shape == "maps":
        body = b"\xdd" + n.to_bytes(4, "big") + b"\x80" * n
    elif shape == "arrays":
        body = b"\xdd" + n.to_bytes(4, "big") + b"\x90" * n
    elif shape == "pairs":
        return b"\xdf" + (n // 2).to_bytes(4, "big") + b"\xa0\xc0" * (n // 2)
    elif shape == "deep":
        depth = min(n, rng.choice([17, 100, 1000, 100_000]))
        body = b"\x91" * depth + b"\xc0"
    elif shape == "str":
        body = b"\xdb" + n.to_bytes(4, "big") + b"x" * n
    elif shape == "bin":
        body = b"\xc6" + n.to_bytes(4, "big") + bytes(n)
    elif shape == "ext":
        body = b"\xdd" + (n // 3).to_bytes(4, "big") + b"\xd4\x01\x00" * (n // 3)
    else:
        piece = b"\x82\xa0\x90\xa1k\x81\xa0\xc0"
        body = b"\xdd" + (n // len(piece)).to_bytes(4, "big") + piece * (n // len(piece))
    if rng.random() < 0.3:
        return body  # not a map at all
    return b"\x82\xa5nonce\x01\xa1x" + body


BOMB_TYPES = [FrameType.HELLO, FrameType.PING, FrameType.STATUS, FrameType.SPAWN, FrameType.RESIZE, FrameType.SCREEN,
              FrameType.STATUS_REPLY, 0x42]


def _v1_is_tower(stream: bytes) -> bool:
    """Whether a version-1 stream's first HELLO would be a tower's (it would replace the sentinel)."""
    reader = legacy.FrameReader()
    with contextlib.suppress(Exception):
        for f in reader.feed(stream):
            if isinstance(f, legacy.RawFrame) and f.frame_type == FrameType.HELLO:
                try:
                    return legacy.client_kind(legacy.parse_hello(f.payload).client_type) == "tower"
                except legacy.LegacyError:
                    return False
    return False


def v1_stream(rng: random.Random, max_bomb: int) -> tuple[bytes, int]:
    """A version-1 (JSON) stream: a terminal's HELLO, then valid, malformed, deep and wide frames, then mutated."""
    parts = [legacy.encode_json(FrameType.HELLO, {"version": 1, "clientType": rng.choice(["terminal", "viewer"])})]
    for _ in range(rng.randint(1, 6)):
        kind = rng.choice([FrameType.RESIZE, FrameType.SIGNAL, FrameType.SPAWN, FrameType.PING, FrameType.DATA,
                           FrameType.HELLO, 0x42])
        choice = rng.randrange(6)
        if choice == 0:
            payload = json.dumps({"cols": rng.randint(-5, 70000), "rows": rng.randint(-5, 70000), "signal": 2}).encode()
        elif choice == 1:
            depth = rng.choice([10, 1000, 50_000, 100_000])
            payload = b'{"cols":' + b"[" * depth + b"]" * depth + b"}"
        elif choice == 2:
            n = rng.randint(1, max_bomb // 3)
            payload = b'{"cols":[' + b"{}," * n + b"{}]}"
        elif choice == 3:
            payload = rng.randbytes(rng.randint(0, 64))
        elif choice == 4:
            payload = b"{" + b'"a":1,' * rng.randint(0, max_bomb // 6) + b'"b":2}'
        else:
            payload = b"plain input\r" if kind == FrameType.DATA else b"{}"
        parts.append(legacy.encode(kind, payload))
    data = bytearray(b"".join(parts))
    for _ in range(rng.choice([0, 0, 1, 2])):
        at = rng.randrange(len(parts[0]), len(data)) if len(data) > len(parts[0]) else len(data)
        op = rng.randrange(3)
        if op == 0 and at < len(data):
            data[at] ^= 1 << rng.randrange(8)
        elif op == 1:
            del data[at:]
        else:
            data[at:at] = rng.randbytes(rng.randint(1, 8))
    return bytes(data), len(parts)


# --------------------------------------------------------------------------------------------- scenarios


class Adversary:
    """Scenarios, each on connections of its own; every one ends with the shellper having closed them (checked)."""

    def __init__(self, path: str, scale: AdversaryScale, tally: Tally, stop: threading.Event) -> None:
        self.path, self.scale, self.tally, self.stop = path, scale, tally, stop

    def connect(self) -> socket.socket:
        """A connection; while the listen backlog is full (EAGAIN), tried again until HANG_BOUND, then a hang."""
        deadline = time.monotonic() + HANG_BOUND
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            s.settimeout(HANG_BOUND)
            try:
                s.connect(self.path)
                return s
            except BlockingIOError:
                s.close()
                if time.monotonic() > deadline:
                    raise AssertionError(f"the shellper accepted no connection for {HANG_BOUND:g} s") from None
                self.stop.wait(0.01)  # the backlog drains as the shellper accepts
            except BaseException:
                s.close()
                raise

    @staticmethod
    def send(s: socket.socket, data: bytes) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(data)

    def ended(self, s: socket.socket, kind: str, half_close: bool, bound: float = HANG_BOUND) -> None:
        """Wait for the shellper to end the connection (after our half-close, or a deadline of its own); the code
        of its fatal ERROR, if any, is tallied. Not ended within ``bound``: a hang."""
        if half_close:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_WR)
        decoder = wire.Decoder()
        deadline = time.monotonic() + bound
        code = "closed"
        try:
            while True:
                s.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    chunk = s.recv(1 << 20)
                except ConnectionResetError:
                    chunk = b""
                if not chunk:
                    break
                with contextlib.suppress(wire.ProtocolError):
                    decoder.feed(chunk)
                    for f in decoder.events():
                        if isinstance(f, wire.Error) and f.fatal:
                            code = f.code
        except TimeoutError:
            with self.tally.lock:
                self.tally.hangs.append(f"{kind}: not closed within {bound:g} s")
            return
        finally:
            s.close()
        with self.tally.lock:
            self.tally.endings[code] += 1

    def v2(self, rng: random.Random) -> None:
        for stream, frames in mutation_cases(rng.randrange(1 << 30), 1):
            if rng.random() < 0.5:  # the HELLO in front says version 3: half the streams speak version 2 instead
                stream = stream.replace(b"\xa7version\x03", b"\xa7version\x02", 1)
            if judge(stream, 0, 1 << 64).skip == "tower":
                continue
            s = self.connect()
            self.send(s, stream)
            self.tally.add("malformed v2/v3", frames)
            self.ended(s, "malformed v2/v3", half_close=True)

    def v1(self, rng: random.Random) -> None:
        stream, frames = v1_stream(rng, self.scale.max_bomb)
        if _v1_is_tower(stream):
            return
        s = self.connect()
        self.send(s, stream)
        self.tally.add("malformed v1", frames)
        self.ended(s, "malformed v1", half_close=True)

    def bomb(self, rng: random.Random) -> None:
        kind = rng.choice(BOMB_TYPES)
        with self.tally.lock:
            costliest = self.tally.scenarios["bomb"] < self.scale.workers  # each worker's first: the largest map bomb
        size = self.scale.max_bomb if costliest else rng.randint(1024, self.scale.max_bomb)
        payload = b"\x81\xa1x\xdd" + (size - 8).to_bytes(4, "big") + b"\x80" * (size - 8) if costliest \
            else bomb_payload(rng, size)
        s = self.connect()
        before = rng.random() < 0.3
        self.send(s, (b"" if before else hello("viewer", replay_bytes=0)) + _frame(kind, payload))
        self.tally.add("bomb", 1 if before else 2)
        self.ended(s, "bomb", half_close=True)

    def unfinished(self, rng: random.Random) -> None:
        registered = rng.random() < 0.8
        full = _frame(rng.choice([FrameType.DATA, FrameType.PING, 0x42]),
                      bomb_payload(rng, rng.randint(16, self.scale.max_bomb)))
        s = self.connect()
        self.send(s, (hello("viewer", replay_bytes=0) if registered else b"") + full[:rng.randrange(1, len(full))])
        self.tally.add("unfinished", 1 + registered)
        self.ended(s, "unfinished", half_close=False, bound=HANG_BOUND + (FRAME_TIMEOUT if registered
                                                                          else HANDSHAKE_TIMEOUT))

    def slowloris(self, rng: random.Random) -> None:
        s = self.connect()
        self.send(s, hello("viewer", replay_bytes=0))
        ping = wire.encode(wire.Ping(nonce=rng.randrange(1000)))
        for byte in ping[:-1]:
            self.send(s, bytes([byte]))
            if self.stop.wait(0.25):  # pacing: a byte every 0.25 s, until the shellper gives up on the frame
                break
        self.tally.add("slowloris", 2)
        self.ended(s, "slowloris", half_close=False, bound=HANG_BOUND + FRAME_TIMEOUT)

    def flood(self, rng: random.Random) -> None:
        socks = []
        try:
            for _ in range(self.scale.flood):
                s = self.connect()
                socks.append(s)
                if rng.random() < 0.5:
                    self.send(s, hello("viewer")[:rng.randrange(1, 20)])
        finally:
            self.tally.add("flood", 0, len(socks))
            for s in socks:
                self.ended(s, "flood", half_close=True)

    def nonreader(self, rng: random.Random) -> None:
        s = self.connect()
        self.send(s, hello("viewer"))
        s.setblocking(False)
        burst = wire.encode(wire.Status()) * 2000
        sent = 0
        with contextlib.suppress(BlockingIOError, BrokenPipeError, ConnectionResetError):
            while sent < len(burst):
                sent += s.send(burst[sent:])
        s.setblocking(True)
        self.tally.add("non-reading", 1 + sent // 5)
        self.stop.wait(rng.uniform(0.1, 1.0))  # holding its unread answers while the others attack
        self.ended(s, "non-reading", half_close=True)

    def scenarios(self) -> list[Callable[[random.Random], None]]:
        return [self.v2, self.v1, self.bomb, self.unfinished, self.slowloris, self.flood, self.nonreader]

    def run(self, seed: int, deadline: float) -> None:
        rng = random.Random(seed)
        kinds = self.scenarios()
        while not self.stop.is_set():
            rng.shuffle(kinds)
            for scenario in kinds:  # each kind once per round, and at least one round
                scenario(rng)
            if time.monotonic() >= deadline:
                return


# --------------------------------------------------------------------------------------------- the run


@pytest.fixture
def target(sessions: Sessions) -> Iterator[tuple[str, Watcher, int]]:
    info = sessions.start("adversary", child("drain", "0.05"), handshake_timeout=HANDSHAKE_TIMEOUT,
                          frame_timeout=FRAME_TIMEOUT)
    watcher = Watcher(info.socket)
    poll_until(lambda: watcher.next >= len(b"READY\n"), 10, what="READY")  # raw mode: no fuzzed ^C is a signal
    try:
        yield info.socket, watcher, info.pid
    finally:
        watcher.close()
    sessions.stop("adversary")


@scales(AdversaryScale(seconds=1, workers=2, max_bomb=4 * MiB, flood=40),
        AdversaryScale(seconds=180, workers=4, max_bomb=16 * MiB, flood=150))
def test_adversaries_of_every_kind_leave_the_shellper_serving(target: tuple[str, Watcher, int],
                                                              scale: AdversaryScale) -> None:
    path, watcher, pid = target
    base_fds = quiet_fds(pid, path, others=1)
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # peak RSS from now (we are root)
    base_rss = status_kib(pid, "VmRSS") * 1024
    tally, stop = Tally(), threading.Event()
    deadline = time.monotonic() + scale.seconds
    adversary = Adversary(path, scale, tally, stop)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            adversary.run(seed, deadline)
        except BaseException as exc:  # reported below, with the rest
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(2027 + i,), daemon=True) for i in range(scale.workers)]
    for t in threads:
        t.start()
    worst, pings = 0.0, 0
    try:
        while any(t.is_alive() for t in threads):
            started = time.monotonic()
            watcher.ping(SERVED_BOUND)  # served: answered within the bound, or the test fails here
            worst, pings = max(worst, time.monotonic() - started), pings + 1
            stop.wait(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(HANG_BOUND * 3)
    assert not errors, errors
    crashed = wait_gone(pid, 0)
    peak = status_kib(pid, "VmHWM") * 1024 - base_rss
    print(f"\nadversary: {tally.frames} frames in {tally.connections} connections, scenarios "
          f"{dict(tally.scenarios)}; endings {dict(tally.endings)}; hangs {len(tally.hangs)}; crashed: {crashed}; "
          f"sentinel {pings} PINGs, slowest PONG {worst * 1000:.0f} ms; shellper peak RSS +{peak / MiB:.0f} MiB")
    assert not crashed, "the shellper died"
    assert not tally.hangs, tally.hangs[:10]
    assert set(tally.scenarios) == {"malformed v2/v3", "malformed v1", "bomb", "unfinished", "slowloris", "flood",
                                    "non-reading"}
    watcher.ping()
    # Unfinished frames of all connections share MAX_PARTIAL_BYTES; what else is held is each worker's one frame.
    assert peak < MAX_PARTIAL_BYTES + scale.workers * 2 * scale.max_bomb + 32 * MiB
    poll_until(lambda: quiet_fds(pid, path, others=1) == base_fds, 10 + CLOSE_DRAIN,
               what="the shellper's fds back to where they were")
