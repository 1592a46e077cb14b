"""A complete Tower on tower_client.Fleet: floods, a crash loop, SPAWN, input and stop; restart-safe.

    python examples/tower.py --dir RUNTIME_DIR --state STATE_DIR [--floods 16] [--seconds 4] [--leave-running]

The first start launches the sessions: ``fNN`` print numbered lines for a few seconds and end with "END
<count>"; ``crash`` fails at once, again and again, until its breaker gives up (fatal); ``spawn`` runs a
short first command, and the Tower SPAWNs a second one in it when the first has ended; ``input`` asks
questions the Tower answers by writing to it; ``stopme`` floods until the Tower stops it. Every stream is
kept in STATE_DIR/out by the shipped FileSink. A later start (after a kill -9, say) adopts them all and
resumes every stream where the journal says this Tower stopped, and every decision is taken again from what
the sessions say, so none is made twice. When all are done it prints its figures as one JSON line and stops
them (``--leave-running``: leaves them, for make tower-demo to compare each file with its ring). SIGTERM or
SIGINT shut it down cleanly: the journal is committed and the sessions run on, for the next start to adopt.
"""

import argparse
import asyncio
import json
import os
import re
import signal
import sys
import time

from tower_client import (
    FileSink,
    Fleet,
    FleetPolicy,
    FleetState,
    Notice,
    OutputChunk,
    RestartPolicy,
    SessionEvent,
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
ASK = ("import select, sys\n"  # asks again every 0.2 s until answered: an answer lost to nothing is no hang
       "for k in range(int(sys.argv[1])):\n"
       "    while True:\n"
       "        print(f'ASK {k}', flush=True)\n"
       "        if select.select([sys.stdin], [], [], 0.2)[0] and sys.stdin.readline().strip() == f'ANS {k}':\n"
       "            break\n"
       "    print(f'GOT {k}', flush=True)\n"
       "print(f'END {sys.argv[1]}', flush=True)\n")
CRASH = "import sys; print('CRASH', flush=True); sys.exit(3)"
QUESTIONS = 10
STOP_AFTER = 64 << 10  # stopme is stopped once this much of its output is stored


def specs(floods: int, seconds: float) -> list[SessionSpec]:
    def flood(name: str, secs: float) -> list[str]:
        return [sys.executable, "-c", FLOOD, name, str(secs)]
    options = SessionOptions(ring_bytes=8 << 20)
    return [SessionSpec("crash", [sys.executable, "-c", CRASH],
                        options=SessionOptions(policy=RestartPolicy(mode="on-failure", backoff_initial=0.05,
                                                                    backoff_max=0.2, breaker_count=3))),
            SessionSpec("spawn", flood("a", 0.5), options=options),
            SessionSpec("input", [sys.executable, "-c", ASK, str(QUESTIONS)], options=options),
            SessionSpec("stopme", flood("stopme", 600), options=options),
            *(SessionSpec(f"f{i:02d}", flood(f"f{i:02d}", seconds), options=options) for i in range(floods))]


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--floods", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--leave-running", action="store_true")
    args = ap.parse_args()
    started = time.monotonic()
    os.makedirs(args.state, mode=0o700, exist_ok=True)
    fleet = Fleet(args.dir, os.path.join(args.state, "registry.json"), os.path.join(args.state, "journal.json"),
                  policy=FleetPolicy(concurrency=4))
    stopping: list[asyncio.Task[None]] = []  # a stop runs beside the stream, which must not wait for it
    spawned: dict[str, list[str]] = {}  # session -> the argv its last `spawned` event in this life named

    async def first_command_ended(item: StateChange) -> bool:
        """spawn's child has exited: the first command (SPAWN the second now) or the second (it is done)?
        The stream's `spawned` event says which, else the session's status (that event was acknowledged
        before a restart): asking again after a kill -9 never spawns the second command twice."""
        argv = spawned.get(item.session)
        if argv is None:
            status = await fleet.session(item.session).status()
            if FleetState.of(status.state) is not FleetState.EXITED:
                return False  # an old exit, the second command runs: its own exit comes later
            argv = list(status.info.get("argv", []))
        if argv[-2:-1] == ["a"]:
            await fleet.session(item.session).spawn([sys.executable, "-c", FLOOD, "b", str(args.seconds)])
            return True
        return False

    async with fleet:
        for sig in (signal.SIGTERM, signal.SIGINT):  # the `async for` below ends; the sessions run on
            asyncio.get_running_loop().add_signal_handler(sig, fleet.shutdown)
        if not fleet.registry.rows and not fleet.journal.stops():  # the first start: nothing of ours yet
            for result in await fleet.launch_many(specs(args.floods, args.seconds)):
                if isinstance(result, BaseException):
                    raise result
        with FileSink(os.path.join(args.state, "out"), fleet.journal) as sink:
            done: set[str] = set()
            async for item in fleet:
                sink.store(item)  # first stored, then acknowledged: nothing lost, nothing twice
                if isinstance(item, OutputChunk) and item.session == "input":
                    for k in re.findall(rb"ASK (\d+)", item.data):  # answered as often as asked
                        await fleet.session("input").write(b"ANS %s\n" % k)
                elif isinstance(item, OutputChunk) and item.session == "stopme" and item.end >= STOP_AFTER \
                        and not stopping and "stopme" in fleet.sessions:
                    stopping.append(asyncio.create_task(fleet.session("stopme").stop(grace=1.0)))
                elif isinstance(item, SessionEvent) and item.kind == "spawned":
                    spawned[item.session] = list(item.data.get("argv", []))
                elif isinstance(item, StateChange):
                    print(f"{item.session}: {item.state} ({item.reason})", file=sys.stderr)
                    if item.state is FleetState.RUNNING:
                        done.discard(item.session)
                    elif item.state is FleetState.FATAL or (item.state is FleetState.EXITED and not (
                            item.session == "spawn" and await first_command_ended(item))):
                        done.add(item.session)
                elif isinstance(item, Notice):
                    print(f"{item.session}: {item.what} ({item.reason}) {item.detail}", file=sys.stderr)
                fleet.ack(item)
                if set(fleet.registry.rows) <= done and "stopme" not in fleet.registry.rows \
                        and await all_stored(fleet):
                    break
            await asyncio.gather(*stopping, return_exceptions=True)  # a shutdown may have cut a stop short
            await fleet.sync()
            figures = {"sessions": len(done), "bytes": sink.stored, "redelivered": sink.redelivered,
                       "skipped": sink.skipped, "missed": sink.missed}
        interrupted = fleet.closed  # shut down by a signal: what was consumed is committed, the sessions run on
        if not interrupted and not args.leave_running:
            await fleet.stop_all(grace=1.0)
    if not interrupted:
        print(json.dumps({**figures, "journal_commits": fleet.journal.commits,
                          "seconds": round(time.monotonic() - started, 3)}), flush=True)


async def all_stored(fleet: Fleet) -> bool:
    """Every session's ring is stored and acknowledged to its end (what a shellper writes after its child's
    exit, as its "[shellper] child exit" line, comes after the exit's state)."""
    for name in fleet.sessions:
        handle = fleet.session(name)
        acknowledged = handle.acknowledged
        if acknowledged is None or acknowledged.offset < (await handle.status()).info["ring_end"]:
            return False
    return True


if __name__ == "__main__":
    asyncio.run(main())
