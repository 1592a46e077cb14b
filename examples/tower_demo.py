"""make tower-demo: the example Tower, killed with -9 mid-flood and started again; the figures it gives.

Runs examples/tower.py (16 flooding sessions and four more: a crash loop, SPAWN, input, stop), kills it
(SIGKILL) once every flood has started, starts it again, and when it has finished compares every kept
stream with its session's ring, byte for byte, and checks its lines: each line number once, none missing,
the END line last; the crash loop fatal, the SPAWNed command's lines after the first's, every question
answered, the stopped session gone. Prints the figures; exits 1 if a byte was lost or duplicated.
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

from tower_client import Client, Data, Gap, SessionGone, SessionNotFound, socket_path

HERE = os.path.dirname(os.path.abspath(__file__))
LINE = re.compile(rb"^(\S+) (\d{8}) \.+$")


def journal_offsets(state: str) -> dict[str, int]:
    try:
        with open(os.path.join(state, "journal.json")) as f:
            return {k: v["offset"] for k, v in json.load(f)["sessions"].items()}
    except (OSError, ValueError, KeyError):
        return {}


def read_ring(run_dir: str, name: str, instance_id: str) -> bytes | None:
    """Everything the session's ring holds (None if the session is gone), as a viewer reads it from offset 0."""
    try:
        with Client(socket_path(run_dir, name), role="viewer") as client:
            welcome = client.connect(resume_from=0, expect_instance_id=instance_id)
            replay = client.conn.replay
            assert replay is not None and replay.offset == 0 and not replay.gap, "the ring lost its start"
            data = bytearray(replay.data)
            while len(data) < welcome.ring_end:
                frame = client.recv(timeout=10)
                if isinstance(frame, Gap) or frame is None:
                    raise SystemExit(f"{name}: reading its ring failed at {len(data)}")
                if isinstance(frame, Data):
                    data += frame.data
            return bytes(data[:welcome.ring_end])
    except (SessionGone, SessionNotFound):
        return None


def check_streams(out: str, run_dir: str) -> dict[str, Any]:
    """Lines lost and duplicated across every kept stream, the bytes they hold, and how each compares with
    its ring."""
    lost = dup = total = ended = equal = 0
    problems: list[str] = []
    for file in sorted(f for f in os.listdir(out) if f.endswith(".out")):
        name, _, instance = file.removesuffix(".out").partition("-")
        with open(os.path.join(out, file), "rb") as f:
            data = f.read()
        total += len(data)
        ring = read_ring(run_dir, name, instance)
        if ring is not None:
            equal += ring == data
            if ring != data:
                with open(os.path.join(out, file + ".ring"), "wb") as copy:  # beside it, to compare
                    copy.write(ring)
                problems.append(f"{name}: kept {len(data)} bytes, its ring holds {len(ring)}, not the same")
        elif name != "stopme":
            problems.append(f"{name}: its session is gone")
        lines = data.split(b"\r\n")
        seen: dict[bytes, dict[int, int]] = {}
        for line in lines:
            m = LINE.match(line)
            if m:
                counts = seen.setdefault(m.group(1), {})
                counts[int(m.group(2))] = counts.get(int(m.group(2)), 0) + 1
        ends = [int(line.split()[1]) for line in lines if line.startswith(b"END ")]
        for counts in seen.values():  # every flood (spawn's two commands each) numbered without a hole
            dup += sum(c - 1 for c in counts.values() if c > 1)
            lost += sum(1 for n in range(max(counts) + 1) if n not in counts)
        if name.startswith("f") or name == "spawn":
            complete = len(ends) == len(seen) and all(e == max(c) + 1 for e, c in zip(ends, seen.values(), strict=True))
        elif name == "input":
            complete = all(b"GOT %d" % k in data for k in range(10)) and bool(ends)
        elif name == "crash":
            complete = data.count(b"CRASH") >= 2
        else:  # stopme: stopped mid-flood, gone
            complete = ring is None and not ends
        if name == "spawn" and list(seen) != [b"a", b"b"]:
            complete = False
        ended += complete
        if not complete:
            problems.append(f"{name}: not complete")
    return {"bytes": total, "lines_lost": lost, "lines_duplicated": dup, "streams_complete": ended,
            "streams_equal_to_ring": equal, "problems": problems}


def run(floods: int, seconds: float, kill_after: float, root: str) -> dict[str, Any]:
    run_dir, state = os.path.join(root, "run"), os.path.join(root, "state")
    os.makedirs(run_dir, mode=0o700)
    os.makedirs(state)
    cmd = [sys.executable, os.path.join(HERE, "tower.py"), "--dir", run_dir, "--state", state,
           "--floods", str(floods), "--seconds", str(seconds)]
    t0 = time.monotonic()
    with open(os.path.join(root, "tower.log"), "wb") as log:
        try:
            return _run(cmd, log, floods, kill_after, run_dir, state, root, t0)
        finally:
            subprocess.run([sys.executable, "-m", "shellper", "--dir", run_dir, "stop", "--all"], capture_output=True)


def _run(cmd: list[str], log: Any, floods: int, kill_after: float, run_dir: str, state: str, root: str,
         t0: float) -> dict[str, Any]:
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log)
    deadline = time.monotonic() + 60
    while True:  # every flood under way, and some time into it: then the kill
        offsets = journal_offsets(state)
        flooding = [v for k, v in offsets.items() if k.startswith("f") and k[1:].isdigit()]
        if len(flooding) == floods and all(flooding) and time.monotonic() - t0 > kill_after:
            break
        if first.poll() is not None or time.monotonic() > deadline:
            first.kill()
            first.wait()
            raise SystemExit(f"the first Tower ended or stalled before the kill (see {root}/tower.log)")
        time.sleep(0.05)  # the journal is another process's file: read it now and then
    consumed_at_kill = sum(offsets.values())
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed = time.monotonic()
    second = subprocess.run([*cmd, "--leave-running"], stdout=subprocess.PIPE, stderr=log, timeout=120)
    if second.returncode != 0:
        raise SystemExit(f"the restarted Tower failed (see {root}/tower.log)")
    tower = json.loads(second.stdout.decode().strip().splitlines()[-1])
    restart_to_done = time.monotonic() - killed
    streams = check_streams(os.path.join(state, "out"), run_dir)
    return {"sessions": floods + 4, "consumed_before_kill": consumed_at_kill, **streams,
            "redelivered_after_restart": tower["redelivered"], "skipped_after_restart": tower["skipped"],
            "missed_by_ring": tower["missed"], "restart_to_done_s": round(restart_to_done, 2),
            "total_s": round(time.monotonic() - t0, 2)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--floods", type=int, default=16, help="flooding sessions, beside the four others")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--kill-after", type=float, default=1.5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR (new) and keep it: the Tower's log and state")
    args = ap.parse_args()
    if args.keep:
        figures = run(args.floods, args.seconds, args.kill_after, args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="tower-demo-", dir="/tmp") as root:
            figures = run(args.floods, args.seconds, args.kill_after, root)
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>28}: {value}")
    bad = figures["lines_lost"] or figures["lines_duplicated"] or figures["redelivered_after_restart"] \
        or figures["skipped_after_restart"] or figures["problems"] or figures["streams_complete"] != args.floods + 4
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
