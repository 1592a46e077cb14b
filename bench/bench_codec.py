"""Codec throughput: how many frames per second encode and decode cost, away from any socket.

This bounds what the shellper can push to a client: PTY output leaves as 64 KiB DATA frames at
most, and control frames (RESIZE, PING, EVENT) are small msgpack maps.

    python3 -m bench.bench_codec [--seconds 0.5]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from shellper.protocol.wire import Data, Decoder, Event, Frame, Ping, Resize, encode, encode_data

MIB = 1024 * 1024

EXIT_RECORD: dict[str, Any] = {
    "code": None, "signal": "SIGSEGV", "core": True, "uptime": 12.5, "class": "crash",
    "reason": "killed by SIGSEGV (core dumped)", "state": "backoff", "child_pid": 4243,
    "time": 1767225600.25, "restart_in": 2.0, "stderr_tail": "Segmentation fault\n",
}

CASES: list[tuple[str, Frame]] = [
    ("DATA 64 KiB", Data(bytes(range(256)) * 256)),
    ("RESIZE", Resize(cols=120, rows=40)),
    ("PING", Ping(nonce=123456789)),
    ("EVENT exited", Event(seq=42, kind="exited", time=1767225612.5, data=EXIT_RECORD)),
]


def _rate(step: Callable[[int], None], seconds: float) -> float:
    """Operations per second of ``step(n)`` (which performs n operations), measured for ``seconds``."""
    batch, done, elapsed = 1, 0, 0.0
    while elapsed < seconds:
        start = time.perf_counter()
        step(batch)
        elapsed += time.perf_counter() - start
        done += batch
        if batch < 4096:
            batch *= 2
    return done / elapsed


def _measure(frame: Frame, seconds: float) -> dict[str, float]:
    wire = encode(frame)
    is_data = isinstance(frame, Data)
    payload = frame.data if isinstance(frame, Data) else b""

    def encode_n(n: int) -> None:
        if is_data:
            for _ in range(n):
                encode_data(payload)
        else:
            for _ in range(n):
                encode(frame)

    decoder = Decoder()

    def decode_n(n: int) -> None:
        for _ in range(n):
            decoder.feed(wire)
            decoder.next_event()

    def roundtrip_n(n: int) -> None:
        if is_data:
            for _ in range(n):
                decoder.feed(encode_data(payload))
                decoder.next_event()
        else:
            for _ in range(n):
                decoder.feed(encode(frame))
                decoder.next_event()

    check = Decoder()
    check.feed(wire)
    assert check.next_event() == frame, "codec does not round-trip the benchmark frame"

    encode_fps = _rate(encode_n, seconds / 3)
    decode_fps = _rate(decode_n, seconds / 3)
    roundtrip_fps = _rate(roundtrip_n, seconds / 3)
    return {
        "frame_bytes": float(len(wire)),
        "encode_fps": encode_fps,
        "decode_fps": decode_fps,
        "roundtrip_fps": roundtrip_fps,
        "roundtrip_mib_s": roundtrip_fps * len(wire) / MIB,
    }


def run(seconds: float = 1.5) -> dict[str, dict[str, float]]:
    """Measure every case for about ``seconds`` each; print a table and return the numbers.

    Keys: case name -> frame_bytes, encode_fps, decode_fps, roundtrip_fps (encode + feed + decode
    of one frame, frames/s) and roundtrip_mib_s (wire bytes through a round trip per second).
    """
    results = {name: _measure(frame, seconds) for name, frame in CASES}
    header = f"{'frame':<14} {'bytes':>7} {'encode/s':>11} {'decode/s':>11} {'round trip/s':>13} {'MiB/s':>9}"
    print(header)
    print("-" * len(header))
    for name, r in results.items():
        print(f"{name:<14} {r['frame_bytes']:>7.0f} {r['encode_fps']:>11,.0f} {r['decode_fps']:>11,.0f} "
              f"{r['roundtrip_fps']:>13,.0f} {r['roundtrip_mib_s']:>9,.1f}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="shellper wire codec throughput")
    parser.add_argument("--seconds", type=float, default=1.5, help="time spent on each frame kind")
    args = parser.parse_args(argv)
    run(args.seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
