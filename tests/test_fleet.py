"""The Fleet with real shellpers: a Tower killed -9 mid-flood resumes every stream exactly; a shellper
that dies is noticed through its pidfd at once and handled by policy; groups start and stop with bounded
concurrency off the loop; the registry and journal are refused when bad and survive a kill mid-write;
an agent's command line follows the mint-or-reclaim verdict."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.fleet import SLEEPER, make_fleet, wait_for
from support.paths import ROOT
from support.processes import kill_verified
from support.sessions import Sessions
from support.waiting import poll_until

import tower_client.fleet as fleet_module
import tower_client.progress as progress_module
from shellper.client.blocking import Client
from shellper.host.identity import ProcessIdentity, boot_id
from shellper.host.record import read_record
from shellper.protocol import wire
from shellper.protocol.connection import SpawnFailed
from tower_client import apply, discover, reconcile
from tower_client.agent import AgentCommand
from tower_client.atomicfile import write_atomic
from tower_client.fleet import Fleet, OnDeath, SessionSpec
from tower_client.progress import ProgressError, ProgressJournal
from tower_client.reconcile import Registry, RegistryDuplicate, RegistryNotJSON
from tower_client.stream import FleetItem, FleetState, Missed, Notice, OutputChunk, StateChange


def shellper_identity(runtime_dir: Path, name: str) -> ProcessIdentity:
    rec = read_record(runtime_dir / f"{name}.json")
    return ProcessIdentity(boot_id(), rec.shellper_pid, rec.shellper_start_time)


# --------------------------------------------------------------------------------------------- restart


def test_tower_killed_mid_flood_resumes_every_stream_exactly(tmp_path: Path) -> None:
    """The example Tower (20 sessions: 16 floods, a crash loop, SPAWN, input, stop), kill -9 mid-flood,
    restart: every kept stream byte-equal to its session's ring, 0 bytes lost, 0 duplicated."""
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "tower_demo.py"), "--floods", "16",
                          "--seconds", "3", "--kill-after", "1.0", "--json"],
                         capture_output=True, timeout=240, cwd=ROOT)
    assert out.returncode == 0, out.stdout.decode() + out.stderr.decode()
    figures = json.loads(out.stdout)
    assert figures["problems"] == []
    assert figures["streams_complete"] == 20
    assert figures["streams_equal_to_ring"] == 19  # the stopped session has no ring left to compare with
    assert figures["consumed_before_kill"] > 0  # the kill really came mid-flood
    assert figures["consumed_before_kill"] < figures["bytes"]
    assert figures["lines_lost"] == 0 and figures["lines_duplicated"] == 0
    assert figures["redelivered_after_restart"] == 0 and figures["skipped_after_restart"] == 0
    assert figures["missed_by_ring"] == 0


# --------------------------------------------------------------------------------------------- death


@pytest.mark.parametrize("on_death", [OnDeath.REPORT, OnDeath.REAP, OnDeath.RESPAWN])
def test_a_dead_shellper_is_noticed_at_once_and_handled_by_policy(
        tmp_path: Path, runtime_dir: Path, on_death: OnDeath) -> None:
    async def main() -> None:
        async with make_fleet(tmp_path, runtime_dir, on_death=on_death) as fleet:
            try:
                await fleet.launch(SessionSpec("a", SLEEPER, cwd=str(ROOT)))
                await wait_for(fleet, lambda i: isinstance(i, OutputChunk) and b"up" in i.data)
                ident = shellper_identity(runtime_dir, "a")
                killed = time.monotonic()
                await asyncio.to_thread(kill_verified, ident)
                gone = await wait_for(fleet, lambda i: isinstance(i, StateChange) and i.state is FleetState.GONE)
                noticed = time.monotonic() - killed
                assert isinstance(gone, StateChange) and "died" in gone.reason
                # A pidfd wakes the Fleet at once; retrying the stale socket through the backoff takes 7 s.
                assert noticed < 2.0, f"death noticed after {noticed:.2f} s"
                if on_death is OnDeath.REPORT:
                    assert fleet.registry.get("a") is not None and (runtime_dir / "a.json").exists()
                    assert fleet.sessions == []
                elif on_death is OnDeath.REAP:
                    await wait_for(fleet, lambda i: isinstance(i, Notice) and i.what == "reaped")
                    assert fleet.registry.get("a") is None and not (runtime_dir / "a.json").exists()
                else:
                    await wait_for(fleet, lambda i: isinstance(i, Notice) and i.what == "relaunched")
                    up = await wait_for(fleet, lambda i: isinstance(i, StateChange) and i.state is FleetState.RUNNING)
                    assert up.instance_id != gone.instance_id
                    row = fleet.registry.get("a")
                    assert row is not None and row["instance_id"] == up.instance_id
            finally:
                await fleet.stop_all()

    asyncio.run(main())
    if on_death is OnDeath.REPORT:  # what the Tower was told to leave alone: cleaned here
        report = apply(reconcile(Registry(), discover(runtime_dir), now=time.time()))
        assert [o.result for o in report.outcomes] == ["cleaned"]


# --------------------------------------------------------------------------------------------- groups


def test_groups_start_and_stop_with_bounded_concurrency_off_the_loop(
        tmp_path: Path, runtime_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    busy, peak, lock = 0, 0, threading.Lock()
    real_launch = fleet_module.launch

    def counting_launch(config: Any) -> Any:
        nonlocal busy, peak
        with lock:
            busy += 1
            peak = max(peak, busy)
        try:
            return real_launch(config)
        finally:
            with lock:
                busy -= 1

    monkeypatch.setattr(fleet_module, "launch", counting_launch)
    stubborn = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "signal.signal(signal.SIGHUP, signal.SIG_IGN); print('up', flush=True); time.sleep(300)"]

    async def main() -> None:
        async with make_fleet(tmp_path, runtime_dir, concurrency=2) as fleet:
            try:
                results = await fleet.launch_many([SessionSpec(f"g{i}", stubborn, cwd=str(ROOT)) for i in range(5)])
                assert not [r for r in results if isinstance(r, BaseException)], results
                assert peak == 2
                assert fleet.sessions == [f"g{i}" for i in range(5)]
                lag = 0.0
                ticking = True

                async def ticker() -> None:
                    nonlocal lag
                    while ticking:
                        t = time.monotonic()
                        await asyncio.sleep(0.01)
                        lag = max(lag, time.monotonic() - t - 0.01)

                stopping, most = 0, 0
                real_stop = fleet.stop

                async def counting_stop(name: str, grace: float | None = None, **kw: Any) -> None:
                    nonlocal stopping, most
                    stopping += 1
                    most = max(most, stopping)
                    try:
                        await real_stop(name, grace, **kw)
                    finally:
                        stopping -= 1

                fleet.stop = counting_stop  # type: ignore[method-assign]
                tick = asyncio.create_task(ticker())
                t0 = time.monotonic()
                await fleet.stop_many([f"g{i}" for i in range(4)], grace=1.0)  # 2 waves of 2 x (1 s grace)
                took = time.monotonic() - t0
                ticking = False
                await tick
                assert most == 2
                assert took > 1.8, f"4 stops of 1 s grace, 2 at once, took {took:.2f} s"
                # A termination waited for on the loop would stall it for its whole grace period (1 s).
                assert lag < 0.8, f"the event loop stalled {lag:.2f} s during the stops"
                assert fleet.sessions == ["g4"]
                assert [r["name"] for r in json.loads((tmp_path / "registry.json").read_text())["sessions"]] == ["g4"]
            finally:
                await fleet.stop_all(grace=0.2)

    asyncio.run(main())


def test_spawn_returns_the_new_childs_pid(tmp_path: Path, runtime_dir: Path) -> None:
    async def main() -> None:
        async with make_fleet(tmp_path, runtime_dir) as fleet:
            try:
                await fleet.launch(SessionSpec("sp", SLEEPER, cwd=str(ROOT)))
                first = await wait_for(fleet, lambda i: isinstance(i, StateChange) and i.child_pid is not None)
                pid = await fleet.spawn("sp")
                assert isinstance(first, StateChange) and pid != first.child_pid
                assert read_record(runtime_dir / "sp.json").child_pid == pid
                with pytest.raises(SpawnFailed):  # the shellper's refusal, typed
                    await fleet.spawn("sp", ["/no/such/program"])
            finally:
                await fleet.stop_all()

    asyncio.run(main())


# --------------------------------------------------------------------------------------------- restart in process


def test_a_new_fleet_adopts_and_resumes_at_the_acknowledged_offset(tmp_path: Path, runtime_dir: Path) -> None:
    talker = [sys.executable, "-c", "import sys\nfor line in sys.stdin:\n    print('got', line.strip(), flush=True)"]

    async def output_until(fleet: Fleet, needle: bytes) -> tuple[int, bytes]:
        """The stream's output from its first chunk until ``needle`` has come: (first offset, bytes)."""
        first: int | None = None
        data = b""
        while needle not in data:
            chunk = await wait_for(fleet, lambda i: isinstance(i, OutputChunk))
            assert isinstance(chunk, OutputChunk)
            if first is None:
                first = chunk.offset
            assert chunk.offset == first + len(data)  # contiguous
            data += chunk.data
        assert first is not None
        return first, data

    async def main() -> None:
        fleet = make_fleet(tmp_path, runtime_dir, on_death=OnDeath.REPORT)
        await fleet.start()
        try:
            await fleet.launch(SessionSpec("t", talker, cwd=str(ROOT), columns={"team": "blue"}))
            await fleet.client("t").write(b"one\n")
            start, before = await output_until(fleet, b"got one\r\n")
            await fleet.sync()
            await fleet.client("t").write(b"two\n")  # consumed by nobody before the "crash"
        finally:
            await fleet.close()  # the sessions run on
        again = make_fleet(tmp_path, runtime_dir, on_death=OnDeath.REPORT)
        async with again:
            try:
                assert again.sessions == ["t"]
                row = again.registry.get("t")
                assert row is not None and row["team"] == "blue"  # the Tower's column kept
                resumed, after = await output_until(again, b"got two")
                assert resumed == start + len(before)  # exactly where the acknowledged output ended
                assert b"one" not in after
            finally:
                await again.stop_all()

    asyncio.run(main())


def test_a_session_started_outside_the_fleet_is_noticed_through_inotify(tmp_path: Path, runtime_dir: Path) -> None:

    outside = Sessions(runtime_dir)

    async def main() -> None:
        async with make_fleet(tmp_path, runtime_dir) as fleet:
            await asyncio.to_thread(outside.start, "stray", SLEEPER)
            notice = await wait_for(fleet, lambda i: isinstance(i, Notice) and i.what == "appeared")
            assert notice.session == "stray"

    try:
        asyncio.run(main())
    finally:
        outside.stop("stray")
        assert not outside.cleanup()


# --------------------------------------------------------------------------------------------- files


def test_a_bad_registry_or_journal_is_refused_and_left_as_it_was(tmp_path: Path, runtime_dir: Path) -> None:
    reg = tmp_path / "registry.json"
    for content, error in ((b"{not json", RegistryNotJSON),
                           (b'{"sessions": [{"name": "a"}, {"name": "a"}]}', RegistryDuplicate)):
        reg.write_bytes(content)
        with pytest.raises(error, match=r"registry\.json"):
            make_fleet(tmp_path, runtime_dir)
        assert reg.read_bytes() == content
    reg.write_bytes(b'{"sessions": [], "tower": {"port": 8080}}')
    (tmp_path / "journal.json").write_bytes(b'{"version": 1, "sessions": {"a": {"offset": -1}}}')
    with pytest.raises(ProgressError, match=r"journal\.json"):
        make_fleet(tmp_path, runtime_dir)


WRITER = """
import sys
from tower_client.atomicfile import write_atomic
path = sys.argv[1]
versions = [b'{"sessions": [], "v": %d, "pad": "%s"}' % (i, b"x" * 200000) for i in range(2)]
print("ready", flush=True)
i = 0
while True:
    write_atomic(path, versions[i % 2])
    i += 1
"""


def test_a_kill_mid_write_leaves_the_old_or_the_new_file_never_a_torn_one(tmp_path: Path) -> None:
    path = tmp_path / "registry.json"
    write_atomic(path, b'{"sessions": [], "v": 0, "pad": ""}')
    kinds = set()
    for trial in range(12):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, cwd=ROOT)
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        time.sleep(0.005 * trial)  # a different moment of the write loop each time, not synchronisation
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        kinds.add(json.loads(path.read_bytes())["v"])
        os.sync()
    assert kinds <= {0, 1}
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "registry.json"]
    assert all(p.startswith(".registry.json.") and p.endswith(".tmp") for p in leftovers)


def test_the_journal_commits_in_the_background_and_reads_back(tmp_path: Path) -> None:
    async def main() -> None:
        j = ProgressJournal.load(tmp_path / "j.json")
        j.start("a", "inst1")
        for end in range(1, 2001):
            j.ack_output("a", "inst1", end)
        j.ack_output("a", "old-instance", 99999)  # an older instance's chunk moves nothing
        j.ack_event("a", "inst1", 7)
        await j.sync()
        assert j.commits < 50  # group commit: not one fsync per acknowledgement
        back = ProgressJournal.load(tmp_path / "j.json").get("a")
        assert back is not None and (back.offset, back.event_seq) == (2000, 7)

    asyncio.run(main())


def test_a_stream_of_acknowledgements_is_committed_at_most_every_interval_and_sync_does_not_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Acknowledgements one event-loop turn apart for 0.4 s: background commits come at most every
    COMMIT_INTERVAL (each encodes every session: back to back they were most of a Tower's CPU), and a sync()
    commits at once however long the interval is."""
    monkeypatch.setattr(progress_module, "write_atomic", lambda path, data: None)  # no fsync: commits as fast as asked

    async def stream() -> int:
        j = ProgressJournal.load(tmp_path / "j.json")
        j.start("a", "inst1")
        end, offset = time.monotonic() + 0.4, 0
        while time.monotonic() < end:
            offset += 1
            j.ack_output("a", "inst1", offset)
            await asyncio.sleep(0)
        await j.sync()
        return j.commits

    assert asyncio.run(stream()) <= 0.4 / progress_module.COMMIT_INTERVAL + 3
    monkeypatch.setattr(progress_module, "COMMIT_INTERVAL", 3600.0)

    async def at_once() -> None:
        j = ProgressJournal.load(tmp_path / "k.json")
        j.start("a", "inst1")
        await j.sync()  # the first commit: the interval starts now
        j.ack_output("a", "inst1", 10)
        async with asyncio.timeout(10):
            await j.sync()
        assert j.durable["a"].offset == 10

    asyncio.run(at_once())


# --------------------------------------------------------------------------------------------- agents


AGENT = [sys.executable, "-c", "import sys, time; print('agent', *sys.argv[1:], flush=True); time.sleep(300)"]


def test_an_agent_resumes_a_free_id_and_mints_when_a_persons_cli_holds_it(tmp_path: Path, runtime_dir: Path) -> None:
    conversation = "c0ffee00-1111-2222-3333-444455556666"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "--resume", conversation])

    async def launched_argv(fleet: Fleet, name: str) -> list[str]:
        await fleet.launch(SessionSpec(name, agent=AgentCommand(tuple(AGENT), conversation), cwd=str(ROOT)))
        return read_record(runtime_dir / f"{name}.json").command

    async def main() -> None:
        async with make_fleet(tmp_path, runtime_dir) as fleet:
            try:
                held = await launched_argv(fleet, "held")  # a person's own CLI holds it: mint, touch nothing
                assert held[-2] == "--session-id" and held[-1] != conversation
                assert holder.poll() is None
                row = fleet.registry.get("held")
                assert row is not None and row["agent"]["conversation_id"] == held[-1]  # the next start resumes it
                holder.kill()
                holder.wait()
                free = await launched_argv(fleet, "free")
                assert free[-2:] == ["--resume", conversation]
            finally:
                await fleet.stop_all()

    try:
        asyncio.run(main())
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


FAKE_AGENT = """
import os, sys
flag = os.environ["IN_USE_FLAG"]
if "--resume" in sys.argv and os.path.exists(flag):
    print("Error: Session ID " + sys.argv[-1] + " is already in use", file=sys.stderr, flush=True)
    sys.exit(1)
print("agent", *sys.argv[1:], flush=True)
sys.stdin.readline()  # a line of input makes it crash
sys.exit(1)
"""


def test_an_agent_that_finds_its_id_in_use_is_relaunched_once_with_a_fresh_id(
        tmp_path: Path, runtime_dir: Path) -> None:
    """The incident: the id is free at launch, a person's CLI takes it, the agent restarts and dies with
    "already in use". The shellper's fatal pattern stops the loop at once; the Fleet relaunches through
    the verdict, which mints: one round, no loop."""
    conversation = "deadbeef-1111-2222-3333-444455556666"
    flag = tmp_path / "in-use"
    env = {**os.environ, "IN_USE_FLAG": str(flag)}
    holder: subprocess.Popen[bytes] | None = None

    async def main() -> None:
        nonlocal holder
        async with make_fleet(tmp_path, runtime_dir) as fleet:
            try:
                agent = AgentCommand((sys.executable, "-c", FAKE_AGENT), conversation)
                await fleet.launch(SessionSpec("arch", agent=agent, cwd=str(ROOT), env=env))
                assert read_record(runtime_dir / "arch.json").command[-2:] == ["--resume", conversation]
                await wait_for(fleet, lambda i: isinstance(i, OutputChunk) and b"agent" in i.data)
                holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "--resume",
                                           conversation])
                flag.touch()
                await fleet.client("arch").write(b"crash\n")  # the shellper restarts it with the same id
                seen: list[FleetItem] = []
                fatal = await wait_for(fleet, lambda i: isinstance(i, StateChange) and i.state is FleetState.FATAL,
                                       seen=seen)
                assert isinstance(fatal, StateChange) and fatal.exit is not None
                assert "already in use" in fatal.exit.reason
                await wait_for(fleet, lambda i: isinstance(i, Notice) and i.what == "relaunched", seen=seen)
                command = read_record(runtime_dir / "arch.json").command
                assert command[-2] == "--session-id" and command[-1] != conversation
                assert holder.poll() is None  # the person's CLI was never touched
                assert sum(1 for i in seen if isinstance(i, StateChange) and i.state is FleetState.FATAL) == 1
            finally:
                await fleet.stop_all()

    try:
        asyncio.run(main())
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()


COMMITTER = """
import asyncio, sys
from tower_client.progress import ProgressJournal

async def main():
    j = ProgressJournal.load(sys.argv[1])
    j.start("a", "inst")
    offset = j.get("a").offset
    print("ready", flush=True)
    while True:
        for _ in range(50):
            offset += 7
            j.ack_output("a", "inst", offset)
        await j.sync()
        print(offset, flush=True)  # on disk now

asyncio.run(main())
"""


def test_what_sync_said_is_on_disk_survives_a_kill(tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    durable = 0
    for trial in range(8):
        proc = subprocess.Popen([sys.executable, "-c", COMMITTER, str(path)], stdout=subprocess.PIPE, cwd=ROOT)
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        for _ in range(3 + trial * 5):  # a different number of commits each time
            durable = int(proc.stdout.readline())
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        pos = ProgressJournal.load(path).get("a")  # never torn: it loads
        assert pos is not None and pos.offset >= durable and pos.offset % 7 == 0
        durable = pos.offset


def test_a_row_that_cannot_be_started_is_reported_and_kept(tmp_path: Path, runtime_dir: Path) -> None:
    """start() respawns registered sessions that are not running from their launch column; one that cannot
    start is a Notice, and its row stays for the Tower to fix (a Tower must not forget a session)."""
    rows = [{"name": "ghost", "instance_id": None, "team": "red",
             "launch": {"argv": ["/bin/true"], "cwd": "/no/such/directory", "env": {}}},
            {"name": "back", "instance_id": None,
             "launch": {"argv": SLEEPER, "cwd": str(ROOT), "env": dict(os.environ)}}]
    (tmp_path / "registry.json").write_text(json.dumps({"sessions": rows}))

    async def main() -> None:
        async with make_fleet(tmp_path, runtime_dir) as fleet:
            try:
                seen: list[FleetItem] = []

                def both(_: FleetItem) -> bool:  # in either order: the respawns run concurrently
                    return (any(isinstance(i, Notice) and i.what == "failed" for i in seen)
                            and any(isinstance(i, OutputChunk) and b"up" in i.data for i in seen))

                await wait_for(fleet, both, seen=seen)
                assert fleet.sessions == ["back"]
                notices = {(i.session, i.what) for i in seen if isinstance(i, Notice)}
                assert {("ghost", "respawn"), ("ghost", "failed"), ("back", "relaunched")} <= notices
                row = fleet.registry.get("ghost")
                assert row is not None and row["team"] == "red"
            finally:
                await fleet.stop_all()

    asyncio.run(main())


def held(sock: Path) -> bool:
    with Client(sock, "viewer", client_name="test") as viewer:
        viewer.connect(replay_bytes=0)
        reply = viewer.request(wire.Status(), wire.StatusReply, timeout=5)
        assert isinstance(reply, wire.StatusReply)
        return bool(reply.info.get("output_held"))


def test_a_tower_that_does_not_read_holds_its_sessions_back_not_its_memory(tmp_path: Path, runtime_dir: Path) -> None:
    """Output waits in the Fleet up to MAX_PENDING_BYTES per session; past that the shellper holds the child
    (output_held), and when the Tower reads again nothing is missing."""
    flood = [sys.executable, "-c", "import os\nn = 0\nwhile True:\n"
             "    os.write(1, b''.join(b'%09d\\n' % (n + i) for i in range(6000)))\n    n += 6000"]

    async def main() -> None:
        async with make_fleet(tmp_path, runtime_dir) as fleet:
            try:
                await fleet.launch(SessionSpec("f", flood, cwd=str(ROOT)))
                member = fleet.members["f"]
                # The Tower is "busy elsewhere": nothing is read meanwhile. Its own connection is full, so a
                # viewer asks the shellper (now and then, with a deadline) whether it holds the child back.
                await asyncio.to_thread(poll_until, lambda: held(runtime_dir / "f.sock"), 20.0, 0.05,
                                        "the shellper to hold its child back")
                assert member.pending <= fleet_module.MAX_PENDING_BYTES + 1024 * 1024
                expected, got = 0, 0
                while got < 4 * 1024 * 1024:
                    item = await fleet.next(10)
                    assert item is not None and not isinstance(item, Missed)
                    if isinstance(item, OutputChunk):
                        assert item.offset == expected
                        expected, got = item.end, got + len(item.data)
                    fleet.ack(item)
            finally:
                await fleet.stop_all(grace=0.2)

    asyncio.run(main())
