"""The server's side of one connection, in process: the CPU a keystroke, a batch of output, a request and a
catch-up cost in shellper.daemon.clientconn, with no socket (a transport that drops what it is given).

Run from the repository root: ``python3 -m bench.bench_conn [--repeat N]``. Why: `make bench`'s attach flood
and echo figures measure the same paths end to end, but through sockets, PTYs and another process each, so
on a loaded machine their noise hides a change of a few percent in the connection's own code; this takes the
best of ``--repeat`` rounds of each path instead. It drives the connection only through the transport's
callbacks and the session's calls (data_received, on_output, pause_writing, resume_writing), so the same
file measures a tree before and after a change to the connection's insides.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from shellper.core.defaults import MAX_UNREAD_BYTES
from shellper.core.ring import Scrollback
from shellper.daemon.clientconn import ClientConn
from shellper.protocol import wire


class _Timer:
    def cancel(self) -> None:
        pass


class _Loop:
    def call_later(self, delay: float, callback: Any) -> _Timer:
        return _Timer()

    def clock(self) -> float:
        return time.monotonic()


class _Log:
    def write(self, text: str) -> None:
        pass


class _Session:
    """Just enough of shellper.daemon.session.Session for a connection's handshake and its hot paths."""

    handshake_timeout = frame_timeout = 10.0
    max_unread_bytes = MAX_UNREAD_BYTES
    cols, rows, event_seq, stopping = 80, 24, 0, False

    def __init__(self) -> None:
        self.loop, self.log, self.scrollback, self.created_at = _Loop(), _Log(), Scrollback(), time.time()
        self.typed = 0
        self._ids = 0

    def new_client_id(self) -> int:
        self._ids += 1
        return self._ids

    def welcome(self, role: str, terminal: bool = False) -> wire.Welcome:
        ring = self.scrollback
        return wire.Welcome(version=wire.PROTOCOL_VERSION, name="bench", shellper_pid=1, shellper_start_time=0,
                            boot_id="b", instance_id="i", state="running", cols=80, rows=24,
                            ring_start=ring.start, ring_end=ring.end, role=role)

    def write_input(self, data: bytes, client: Any) -> None:
        self.typed += len(data)

    def ended_exit(self) -> None:
        return None

    def admit(self, client: Any) -> bool:
        return True

    def hold_partial(self, delta: int) -> bool:
        return True

    def register(self, client: Any) -> None:
        pass

    def output_taken(self) -> None:
        pass

    def disconnect(self, client: Any, reason: str) -> None:
        pass


class _Transport:
    def __init__(self) -> None:
        self.written = 0

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def _connected(role: str) -> tuple[_Session, ClientConn, _Transport]:
    session = _Session()
    conn = ClientConn(session)  # type: ignore[arg-type]
    transport = _Transport()
    conn.transport = transport  # type: ignore[assignment]
    conn.data_received(wire.encode(wire.Hello(version=wire.PROTOCOL_VERSION, role=role, replay_bytes=0)))
    assert conn.registered
    return session, conn, transport


def _best(fn: Any, n: int, repeat: int) -> float:
    """Nanoseconds per call, the best of ``repeat`` rounds of ``n`` calls."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(n)
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e9


def run(repeat: int = 7, scale: float = 1.0) -> dict[str, float]:
    """Nanoseconds per operation of each path; ``scale`` multiplies the operations per round."""
    results: dict[str, float] = {}

    def count(n: int) -> int:
        return max(1, int(n * scale))

    _, conn, _ = _connected("terminal")
    key = wire.encode_data(b"x")

    def keystrokes(n: int) -> None:
        for _ in range(n):
            conn.data_received(key)
    results["keystroke (one DATA frame) in, ns"] = _best(keystrokes, count(200_000), repeat)

    ping = wire.encode(wire.Ping(nonce=1))

    def pings(n: int) -> None:
        for _ in range(n):
            conn.data_received(ping)
    results["PING in, PONG out, ns"] = _best(pings, count(100_000), repeat)

    session, conns = _Session(), []
    for _ in range(4):
        conn = ClientConn(session)  # type: ignore[arg-type]
        conn.transport = _Transport()  # type: ignore[assignment]
        conn.data_received(wire.encode(wire.Hello(version=wire.PROTOCOL_VERSION, role="tower", replay_bytes=0)))
        conns.append(conn)
    ring, piece = session.scrollback, b"x" * 99 + b"\n"
    frame = wire.encode_data(piece)

    def outputs(n: int) -> None:
        for _ in range(n):
            old_end = ring.end
            ring.append(piece)
            for conn in conns:
                conn.on_output(old_end, piece, frame)
    results["output batch to 4 caught-up clients (ring append included), ns"] = _best(outputs, count(100_000), repeat)

    session, conn, _ = _connected("tower")
    ring, block = session.scrollback, b"y" * 4095 + b"\n"

    def catch_up(n: int) -> None:
        for _ in range(n):
            conn.pause_writing()
            for _ in range(64):  # 256 KiB behind
                ring.append(block)
            conn.resume_writing()
    results["catch-up of 256 KiB from the ring, ns"] = _best(catch_up, count(500), repeat)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    for name, ns in run(args.repeat).items():
        print(f"{ns:12.0f}  {name}")


if __name__ == "__main__":
    main()
