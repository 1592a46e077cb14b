"""A Tower of sessions on this machine and on the loopback sshd hosts, for tests/test_fleet_hosts.py.

``python hosts_tower.py ROOT RUNTIME`` launches (when its registry is empty) a flooding session here, one on
alpha and two on beta, stores every output chunk at its offset in ROOT/sink/NAME before
acknowledging it (truncating to the journal's offset at start: exactly-once), and prints one JSON line per
Notice and Missed, ``ready`` once started, so the test can follow it. It runs until killed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from tower_client import Fleet, FleetPolicy, Missed, Notice, OutputChunk, SessionSpec

PHASE_LINES = 20_000
"""Lines of each phase of a flood (8 bytes and CRLF each)."""
FLOOD = """
import os, sys, time
gate, n = sys.argv[1], int(sys.argv[2])
out = sys.stdout
for i in range(n):
    out.write("%07d\\n" % i)
    if i % 500 == 499:
        out.flush()
        time.sleep(0.05)
out.flush()
while not os.path.exists(gate):
    time.sleep(0.05)
for i in range(n, 2 * n):
    out.write("%07d\\n" % i)
out.write("DONE\\n")
out.flush()
time.sleep(300)
"""
SESSIONS = {"here1": None, "a1": "alpha", "b1": "beta", "b2": "beta"}


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


async def main(root: str, runtime: str) -> None:
    sinks = os.path.join(root, "sink")
    os.makedirs(sinks, exist_ok=True)
    fleet = Fleet(runtime, os.path.join(root, "registry.json"), os.path.join(root, "journal.json"),
                  policy=FleetPolicy(grace=1.0, concurrency=4))
    files: dict[str, int] = {}

    def sink(name: str) -> int:
        if name not in files:
            fd = os.open(os.path.join(sinks, name), os.O_RDWR | os.O_CREAT, 0o600)
            pos = fleet.journal.get(name)
            os.ftruncate(fd, pos.offset if pos is not None else 0)
            files[name] = fd
        return files[name]

    async with fleet:
        if not fleet.registry.rows:
            gate = os.path.join(root, "phase2")
            specs = [SessionSpec(name, [sys.executable, "-c", FLOOD, gate, str(PHASE_LINES)], host=host)
                     for name, host in SESSIONS.items()]
            for result in await fleet.launch_many(specs):
                if isinstance(result, BaseException):
                    say(error=repr(result))
        say(ready=sorted(fleet.sessions))
        async for item in fleet:
            if isinstance(item, OutputChunk):
                os.pwrite(sink(item.session), item.data, item.offset)
            elif isinstance(item, Missed):
                say(missed=item.session, bytes=item.missed)
            elif isinstance(item, Notice):
                say(notice=item.what, session=item.session, reason=item.reason, detail=item.detail)
            fleet.ack(item)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
