"""make tower-demo: the example Tower, killed with -9 mid-flood and started again; the figures it gives.

Runs examples/tower.py with N sessions, kills it (SIGKILL) once every stream has started, starts it
again, and when it has finished checks every session's kept stream line by line: each line number
once, none missing, the END line last. Prints the figures; exits 1 if a byte was lost or duplicated.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
LINE = re.compile(rb"^(\S+) (\d{8}) \.+$")


def journal_offsets(state: str) -> dict[str, int]:
    try:
        with open(os.path.join(state, "journal.json")) as f:
            return {k: v["offset"] for k, v in json.load(f)["sessions"].items()}
    except (OSError, ValueError, KeyError):
        return {}


def check_streams(out: str) -> dict[str, int]:
    """Lines lost and duplicated across every kept stream, and the bytes they hold."""
    lost = dup = total = ended = 0
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name), "rb") as f:
            data = f.read()
        total += len(data)
        seen: dict[int, int] = {}
        end = None
        for line in data.split(b"\r\n") if b"\r\n" in data else data.split(b"\n"):
            m = LINE.match(line)
            if m:
                n = int(m.group(2))
                seen[n] = seen.get(n, 0) + 1
            elif line.startswith(b"END "):
                end = int(line.split()[1])
        count = end if end is not None else (max(seen) + 1 if seen else 0)
        ended += end is not None
        lost += sum(1 for n in range(count) if n not in seen)
        dup += sum(c - 1 for c in seen.values() if c > 1)
    return {"bytes": total, "lines_lost": lost, "lines_duplicated": dup, "streams_complete": ended}


def run(sessions: int, seconds: float, kill_after: float, root: str) -> dict[str, object]:
    run_dir, state = os.path.join(root, "run"), os.path.join(root, "state")
    os.makedirs(run_dir, mode=0o700)
    os.makedirs(state)
    cmd = [sys.executable, os.path.join(HERE, "tower.py"), "--dir", run_dir, "--state", state,
           "--sessions", str(sessions), "--seconds", str(seconds)]
    t0 = time.monotonic()
    with open(os.path.join(root, "tower.log"), "wb") as log:
        return _run(cmd, log, sessions, kill_after, run_dir, state, root, t0)


def _run(cmd: list[str], log: Any, sessions: int, kill_after: float, run_dir: str, state: str, root: str,
         t0: float) -> dict[str, object]:
    try:
        first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log)
        deadline = time.monotonic() + 60
        while True:  # every stream under way, and some time into the flood: then the kill
            offsets = journal_offsets(state)
            if len(offsets) == sessions and all(offsets.values()) and time.monotonic() - t0 > kill_after:
                break
            if first.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the first Tower ended or stalled before the kill (see {root}/tower.log)")
            time.sleep(0.05)  # the journal is another process's file: read it now and then
        consumed_at_kill = sum(offsets.values())
        first.send_signal(signal.SIGKILL)
        first.wait()
        killed = time.monotonic()
        second = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, timeout=90)
        if second.returncode != 0:
            raise SystemExit(f"the restarted Tower failed (see {root}/tower.log)")
        tower = json.loads(second.stdout.decode().strip().splitlines()[-1])
    finally:
        subprocess.run([sys.executable, "-m", "shellper", "--dir", run_dir, "stop", "--all"], capture_output=True)
    streams = check_streams(os.path.join(state, "out"))
    return {"sessions": sessions, "consumed_before_kill": consumed_at_kill, **streams,
            "redelivered_after_restart": tower["redelivered"], "skipped_after_restart": tower["skipped"],
            "missed_by_ring": tower["missed"], "restart_to_done_s": round(time.monotonic() - killed, 2),
            "total_s": round(time.monotonic() - t0, 2)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--kill-after", type=float, default=1.5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR (new) and keep it: the Tower's log and state")
    args = ap.parse_args()
    if args.keep:
        figures = run(args.sessions, args.seconds, args.kill_after, args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="tower-demo-", dir="/tmp") as root:
            figures = run(args.sessions, args.seconds, args.kill_after, root)
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>28}: {value}")
    bad = figures["lines_lost"] or figures["lines_duplicated"] or figures["redelivered_after_restart"] \
        or figures["skipped_after_restart"] or figures["streams_complete"] != args.sessions
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
