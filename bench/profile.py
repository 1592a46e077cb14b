"""Where the time goes in ``shellper attach`` workloads: py-spy on the shellper and the attach client.

    python -m bench.profile [--workload flood|echo] [--bytes 256M] [--trips 20000] [--rate 250] [--top 25]

Runs the attach-flood workload once (child -> shellper -> attach -> harness PTY), or echo round trips,
with ``py-spy record --nonblocking`` sampling the shellper and the attach client, then prints, for each, the functions
with the most samples on top of the stack (self) and anywhere in it (inclusive). py-spy is not a
project dependency: ``pip install py-spy``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench.child import MARKER
from bench.harness import BenchError, Lab, MiB
from bench.workloads import attach, detach

_LINE = re.compile(r":\d+\)$")


@dataclass
class Profile:
    samples: int
    self_counts: Counter[str]
    inclusive: Counter[str]


def parse_collapsed(text: str) -> Profile:
    """py-spy's raw (collapsed) output: ``frame;frame;...;leaf COUNT`` per line. Line numbers dropped."""
    self_counts: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_LINE.sub(")", f) for f in stack.split(";")[1:]]  # [0] is the process/thread label
        if not frames:
            continue
        total += n
        self_counts[frames[-1]] += n
        for f in set(frames):
            inclusive[f] += n
    return Profile(total, self_counts, inclusive)


def _short(frame: str) -> str:
    """``func (/long/path/pkg/mod.py)`` -> ``func (pkg/mod.py)``."""
    func, _, where = frame.partition(" (")
    parts = where.rstrip(")").split("/")
    return f"{func} ({'/'.join(parts[-2:])})" if where else func


def report(label: str, prof: Profile, top: int) -> str:
    out = [f"== {label}: {prof.samples} samples"]
    for title, counts in (("self", prof.self_counts), ("inclusive", prof.inclusive)):
        out.append(f"  -- top {top} by {title}")
        for frame, n in counts.most_common(top):
            out.append(f"  {100 * n / max(1, prof.samples):5.1f}%  {n:6d}  {_short(frame)}")
    return "\n".join(out)


def _size(text: str) -> int:
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    units = {"K": 1024, "M": MiB, "G": 1024 * MiB}
    return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)


def _terminated(signum: int, _frame: object) -> None:
    sys.exit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.profile", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--workload", choices=("flood", "echo"), default="flood",
                   help="flood: the attach-flood workload; echo: one-byte round trips through attach")
    p.add_argument("--bytes", type=_size, default=256 * MiB, help="flood size (default 256M)")
    p.add_argument("--trips", type=int, default=20000, help="echo round trips (default 20000)")
    p.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--keep", type=Path, default=None, help="keep the raw py-spy files in this directory")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminated)  # unwind through Lab.close: nothing is left running
    pyspy = shutil.which("py-spy")
    if pyspy is None:
        print("bench.profile: py-spy not found; pip install py-spy", file=sys.stderr)
        return 1
    outdir = args.keep or Path(tempfile.mkdtemp(prefix="spprof-"))
    outdir.mkdir(parents=True, exist_ok=True)
    with Lab(None) as lab:
        a = attach(lab, "shellper", ["flood", str(args.bytes)] if args.workload == "flood" else ["echo"])
        assert a.server_pid is not None and a.client_pid is not None
        targets = {"shellper": a.server_pid, "attach": a.client_pid}
        spies = {}
        try:
            for label, pid in targets.items():
                spies[label] = lab.spawn([pyspy, "record", "--nonblocking", "--format", "raw", "--rate",
                                          str(args.rate), "--pid", str(pid), "-o", str(outdir / f"{label}.txt")],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # py-spy attaches
            t0 = time.perf_counter()
            if args.workload == "flood":
                a.term.write(b"g")
                drained = a.term.read_until(MARKER, timeout=600)
                elapsed = drained.done_at - t0
                skipped = max(0, args.bytes - drained.bytes) / MiB
                summary = (f"attach flood of {args.bytes / MiB:.0f} MiB: {drained.bytes / MiB / elapsed:.1f} MiB/s "
                           f"delivered to the terminal, {skipped:.1f} MiB skipped (GAP)")
            else:
                trips = sorted(a.term.roundtrip() / 1000 for _ in range(args.trips))
                summary = (f"{args.trips} echo round trips through attach: p50 {trips[len(trips) // 2]:.1f} us, "
                           f"p99 {trips[len(trips) * 99 // 100]:.1f} us")
        finally:
            for proc in spies.values():
                proc.send_signal(signal.SIGINT)
            for proc in spies.values():
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            detach(lab, a)
    try:  # the profiles go even when printing fails (a reader such as `head` that left early)
        print(f"{summary} (under py-spy, {args.rate} Hz, nonblocking)")
        for label in targets:
            path = outdir / f"{label}.txt"
            if not path.exists():
                raise BenchError(f"py-spy wrote no {path} (is ptrace allowed?)")
            print(report(label, parse_collapsed(path.read_text()), args.top))
    finally:
        if args.keep is None:
            shutil.rmtree(outdir, ignore_errors=True)
    if args.keep is not None:
        print(f"raw profiles in {outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
