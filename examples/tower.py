"""A complete Tower on tower_client.Fleet: N sessions, every stream kept in state/out/, restart-safe.

    python examples/tower.py --dir RUNTIME_DIR --state STATE_DIR [--sessions 10] [--seconds 4]

The first start launches N sessions that each print numbered lines for a few seconds and end with
"END <count>". A later start (after a kill -9, say) adopts them and resumes every stream where the
journal says this Tower stopped. When every session's child has ended and its output is consumed, the
Tower stops them all and prints its figures as one JSON line. SIGTERM or SIGINT shut it down cleanly
instead: the journal is committed and the sessions run on, for the next start to adopt.
"""

import argparse
import asyncio
import json
import os
import signal
import sys
import time

from tower_client import (
    Fleet,
    FleetPolicy,
    FleetState,
    Missed,
    Notice,
    OutputChunk,
    SessionOptions,
    SessionSpec,
    StateChange,
)

FLOOD = ("import os, sys, time\n"
         "name, seconds = sys.argv[1], float(sys.argv[2])\n"
         "end, n = time.monotonic() + seconds, 0\n"
         "while time.monotonic() < end:\n"
         "    line = b'%s %08d ................................................\\n'\n"
         "    os.write(1, b''.join(line % (name.encode(), n + i) for i in range(32)))\n"
         "    n += 32\n"
         "    time.sleep(0.01)\n"
         "os.write(1, b'END %d\\n' % n)\n")


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()
    out = os.path.join(args.state, "out")
    os.makedirs(out, exist_ok=True)
    started, took, redelivered, skipped, missed = time.monotonic(), 0, 0, 0, 0
    fleet = Fleet(args.dir, os.path.join(args.state, "registry.json"), os.path.join(args.state, "journal.json"),
                  policy=FleetPolicy(concurrency=4))
    files: dict[str, tuple[int, int]] = {}  # session -> (fd, size): the stream as consumed, offset = position

    def sink(name: str, instance: str) -> tuple[int, int]:
        if name not in files:  # truncate to what the journal committed: what comes now continues exactly there
            fd = os.open(os.path.join(out, f"{name}-{instance}.out"), os.O_RDWR | os.O_CREAT, 0o600)
            pos = fleet.journal.get(name)
            size = pos.offset if pos is not None and pos.instance_id == instance else 0
            os.ftruncate(fd, size)
            files[name] = (fd, size)
        return files[name]

    async with fleet:
        for sig in (signal.SIGTERM, signal.SIGINT):  # the `async for` below ends; the sessions run on
            asyncio.get_running_loop().add_signal_handler(sig, fleet.shutdown)
        if not fleet.registry.rows:
            specs = [SessionSpec(f"s{i:02d}", [sys.executable, "-c", FLOOD, f"s{i:02d}", str(args.seconds)],
                                 options=SessionOptions(ring_bytes=8 << 20)) for i in range(args.sessions)]
            for result in await fleet.launch_many(specs):
                if isinstance(result, BaseException):
                    raise result
        done: set[str] = set()
        async for item in fleet:
            if isinstance(item, OutputChunk):
                fd, size = sink(item.session, item.instance_id)
                if item.offset < size:
                    redelivered += size - item.offset
                elif item.offset > size:
                    skipped += item.offset - size
                os.pwrite(fd, item.data, item.offset)
                files[item.session] = (fd, max(size, item.end))
                took += len(item.data)
            elif isinstance(item, Missed):
                missed += item.missed
            elif isinstance(item, StateChange):
                print(f"{item.session}: {item.state} ({item.reason})", file=sys.stderr)
                if item.state in (FleetState.EXITED, FleetState.FATAL):
                    done.add(item.session)
            elif isinstance(item, Notice):
                print(f"{item.session}: {item.what} ({item.reason}) {item.detail}", file=sys.stderr)
            fleet.ack(item)
            if done >= set(fleet.sessions) and len(done) >= len(fleet.registry.rows):
                break
        await fleet.sync()
        interrupted = fleet.closed  # shut down by a signal: what was consumed is committed, the sessions run on
        if not interrupted:
            await fleet.stop_all(grace=1.0)
    for fd, _ in files.values():
        os.close(fd)
    if not interrupted:
            print(json.dumps({"sessions": len(done), "bytes": took, "redelivered": redelivered, "skipped": skipped,
                          "missed": missed, "journal_commits": fleet.journal.commits,
                          "seconds": round(time.monotonic() - started, 3)}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
