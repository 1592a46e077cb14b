"""The screen model's feeding, in process: CPU per MiB, the longest pause one append causes, and the most
memory a catch-up holds, for the bench's flood, a coloured log and a redraw flood (bench/NOTES.md).

    python -m bench.screenfeed [--mib N]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

from shellper.core.ring import Scrollback
from shellper.daemon.screenfeed import ScreenModel

MiB = 1024 * 1024
RING = 8 * MiB
APPEND = 64 * 1024


def _workloads(mib: int) -> dict[str, bytes]:
    plain = b"x" * 99 + b"\n"
    log = b"".join(b"\x1b[3%dmINFO\x1b[0m line %d of a build log, with some words in it\r\n" % (i % 8, i)
                   for i in range(1000))
    frame = b"".join(b"\x1b[H\x1b[2J" + b"".join(b"\x1b[%d;1H\x1b[3%dm%s\x1b[0m" % (r + 1, (r + f) % 8, b"#" * 78)
                                                  for r in range(24)) for f in range(50))
    return {name: (unit * (mib * MiB // len(unit) + 1))[:mib * MiB]
            for name, unit in {"plain flood": plain, "coloured log": log, "redraw flood": frame}.items()}


def run(data: bytes, traced: bool) -> tuple[float, float, float, float]:
    """(CPU ms per MiB, longest append's pause ms, catch-up at the end ms, peak traced MiB after the ring was
    made). Timings are taken untraced (tracemalloc slows allocation several times), memory traced."""
    ring = Scrollback(RING)
    model = ScreenModel(ring, RING, 80, 24)
    model.screen_now()
    if traced:
        tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    longest, cpu0 = 0.0, time.process_time()
    for at in range(0, len(data), APPEND):
        piece = data[at:at + APPEND]
        t0 = time.perf_counter()
        model.before_append(len(piece))
        longest = max(longest, time.perf_counter() - t0)
        ring.append(piece)
    t0 = time.perf_counter()
    model.catch_up()
    last = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return cpu * 1000 / (len(data) / MiB), longest * 1000, last * 1000, peak / MiB


def main() -> None:
    p = argparse.ArgumentParser(prog="bench.screenfeed", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--mib", type=int, default=64, help="MiB of each workload (default 64)")
    args = p.parse_args()
    print(f"{'workload':14} {'ms/MiB':>8} {'longest append ms':>18} {'final catch-up ms':>18}",
          f"{'peak MiB (16 MiB)':>19}")
    for name, data in _workloads(args.mib).items():
        cpu, longest, last, _ = run(data, traced=False)
        peak = run(data[:16 * MiB], traced=True)[3]
        print(f"{name:14} {cpu:8.1f} {longest:18.1f} {last:18.1f} {peak:19.2f}")


if __name__ == "__main__":
    main()
