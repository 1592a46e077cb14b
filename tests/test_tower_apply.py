"""discover -> reconcile -> apply against real shellpers and real stand-in processes.

Each scenario checks the decision *and* the effect on real processes, by pid + start ticks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.paths import REPO
from support.processes import alive, identity, is_dead, tree
from support.sessions import Sessions, files_in, hand_made_record
from support.waiting import poll_until

from shellper.core.structs import replace
from shellper.host.identity import ProcessIdentity, read_stat
from shellper.host.paths import SessionPaths
from shellper.host.record import read_record, write_record
from shellper.host.shellpers import ProcTables, serves
from shellper.protocol import wire
from tower_client.apply import ADOPT_FRESH, VERIFY_CLIENT_NAME, apply
from tower_client.client import AsyncClient, AsyncResumingClient
from tower_client.discover import discover, observe
from tower_client.reconcile import ReconcileAction, Registry, RegistryRow, reconcile

TREE = ["sh", "-c", "sleep 300 & (sleep 301 & wait) & echo started; wait"]


def decide(d: Path, *rows: RegistryRow, husk_max_age: float | None = None,
           probe_timeout: float = 2.0) -> list[tuple[str, ReconcileAction, str]]:
    return [(x.name, x.action, x.reason) for x in _decisions(d, *rows, husk_max_age=husk_max_age,
                                                             probe_timeout=probe_timeout)]


def _decisions(d: Path, *rows: RegistryRow, husk_max_age: float | None = None,
               probe_timeout: float = 2.0) -> list:  # type: ignore[type-arg]
    return reconcile(Registry(rows), discover(d, probe_timeout=probe_timeout), now=time.time(),
                     husk_max_age=husk_max_age)


def full_tree(pid: int) -> list[ProcessIdentity] | None:
    """The shellper's descendants once TREE has started all of them (sh, sleep, subshell, sleep)."""
    members = tree(pid)
    return members if len(members) >= 4 else None


def files(d: Path) -> set[str]:
    """The runtime directory's entries but ``logs/`` (where a stopped session's log is kept by design) and the warm
    launcher's files."""
    return set(files_in(d)) - {"logs"}


# --------------------------------------------------------------------------------------------- adopt / terminate


def test_registered_live_shellper_is_adopted_and_resumed_without_loss(sessions: Sessions) -> None:
    """Tower reads some output, "restarts", output goes on; reconcile adopts; resume gives exact bytes."""
    info = sessions.start("arch-main", ["cat"])

    async def before_restart() -> int:
        async with AsyncClient(info.socket) as tower:
            await tower.connect()
            await tower.write(b"before\n")
            async with asyncio.timeout(10):
                while tower.output.next_offset < 16:  # "before\r\n" echoed + cat's copy
                    await tower.recv()
            return tower.output.next_offset

    async def meanwhile() -> bytes:
        async with AsyncClient(info.socket, "terminal") as term:
            await term.connect()
            await term.write(b"while-away\n")
            got = bytearray(term.replay.data if term.replay else b"")
            async with asyncio.timeout(10):
                while got.count(b"while-away\r\n") < 2:  # the echo and cat's copy, each whole: nothing follows
                    frame = await term.recv()
                    if isinstance(frame, wire.Data):
                        got += frame.data
            return bytes(got)

    resume_at = asyncio.run(before_restart())
    everything = asyncio.run(meanwhile())
    decisions = _decisions(sessions.dir, RegistryRow("arch-main", info.instance_id))
    assert [(d.action, d.reason) for d in decisions] == [(ReconcileAction.ADOPT, "running")]
    obs = decisions[0].observed
    assert obs is not None and obs.welcome_instance_id == info.instance_id and obs.peer_pid == info.pid
    assert obs.lock_owners == (info.pid,) and obs.child == "alive" and obs.record is not None
    report = apply(decisions)
    assert report.ok and report.outcomes[0].result == "adopted"
    record = obs.record

    async def after_restart() -> bytes:
        async with AsyncResumingClient(info.socket, expect_instance_id=record.instance_id) as tower:
            await tower.connect(resume_from=resume_at)
            got = bytearray()
            async with asyncio.timeout(10):
                while resume_at + len(got) < len(everything):
                    item = await tower.recv()
                    assert not isinstance(item, wire.Gap)
                    if isinstance(item, wire.Data):
                        got += item.data
            return bytes(got)

    assert asyncio.run(after_restart()) == everything[resume_at:]
    assert alive(identity(info.pid))


def test_adopt_takes_discovers_fresh_handshake_and_only_that(sessions: Sessions) -> None:
    """One probe per session: apply's adopt check is discover's handshake when that is fresh and the process
    that answered still runs; a stale look, or a record whose start ticks are not the process's, gets a
    handshake of its own (seen as the verify client's attach by a tower already connected)."""
    info = sessions.start("fresh", ["cat"])
    decisions = _decisions(sessions.dir, RegistryRow("fresh", info.instance_id))
    assert [d.action for d in decisions] == [ReconcileAction.ADOPT]
    obs = decisions[0].observed
    assert obs is not None and obs.record is not None
    stale = [dataclasses.replace(decisions[0], observed=dataclasses.replace(
        obs, observed_at=obs.observed_at - ADOPT_FRESH - 1))]
    other = replace(obs.record, shellper_start_time=obs.record.shellper_start_time + 1)
    not_that_process = [dataclasses.replace(decisions[0], observed=dataclasses.replace(obs, record=other))]

    async def watched() -> tuple[list[str], int]:
        async with AsyncClient(info.socket) as tower:
            await tower.connect(replay_bytes=0)
            details = [(await asyncio.to_thread(apply, d)).outcomes[0].detail
                       for d in (decisions, stale, not_that_process)]
            verifies = 0
            async with asyncio.timeout(10):
                while verifies < 2:  # the last one's attach comes after whatever the first one made
                    frame = await tower.recv()
                    if isinstance(frame, wire.Event) and frame.kind == "client_attached" \
                            and frame.data.get("client") == VERIFY_CLIENT_NAME:
                        verifies += 1
            return details, verifies

    details, verifies = asyncio.run(watched())
    assert "answered discover" in details[0], details
    assert "answered discover" not in details[1] and "answered discover" not in details[2], details
    assert verifies == 2  # the stale look's and the other record's handshakes; none for the fresh one


def test_unregistered_shellper_is_terminated_with_its_whole_tree(sessions: Sessions) -> None:
    info = sessions.start("stray", TREE)
    members = poll_until(lambda: full_tree(info.pid), what="sh, 2 sleeps and a subshell")
    shellper = identity(info.pid)
    assert decide(sessions.dir) == [("stray", ReconcileAction.TERMINATE, "unregistered")]
    report = apply(_decisions(sessions.dir), grace=1.0)
    outcome = report.outcomes[0]
    assert report.ok and outcome.result == "terminated", outcome
    assert outcome.termination is not None and outcome.termination.method == "stop"
    assert set(outcome.termination.tree) == {m.pid for m in members}
    assert is_dead(shellper)
    assert [m.pid for m in members if not is_dead(m)] == []  # child and grandchildren, by pid
    assert files(sessions.dir) == set()


def test_unresponsive_shellper_is_terminated_by_signals(sessions: Sessions) -> None:
    """A frozen shellper cannot take STOP: the pidfd path (TERM, grace, KILL, confirm) still ends it all."""
    info = sessions.start("frozen", TREE)
    members = poll_until(lambda: full_tree(info.pid), what="sh, 2 sleeps and a subshell")
    shellper = identity(info.pid)
    os.kill(info.pid, signal.SIGSTOP)  # our own shellper, just launched
    decisions = _decisions(sessions.dir, probe_timeout=0.3)
    assert [(d.action, d.reason) for d in decisions] == [(ReconcileAction.TERMINATE, "unregistered")]
    assert decisions[0].observed is not None and decisions[0].observed.probe == "timeout"
    report = apply(decisions, grace=0.3, probe_timeout=0.3)
    outcome = report.outcomes[0]
    assert report.ok, outcome
    assert outcome.termination is not None and outcome.termination.method == "signals"
    assert is_dead(shellper) and [m.pid for m in members if not is_dead(m)] == []
    assert files(sessions.dir) == set()  # it could not clean up after itself: apply did


def test_husk_adopted_when_wanted_terminated_when_not(sessions: Sessions) -> None:
    wanted = sessions.start("husk-a", ["sh", "-c", "exit 0"])
    unwanted = sessions.start("husk-b", ["sh", "-c", "exit 0"])
    poll_until(lambda: all(o.state == "exited" for o in discover(sessions.dir)), what="both children to exit")
    decisions = _decisions(sessions.dir, RegistryRow("husk-a"))
    assert [(d.name, d.action, d.reason) for d in decisions] == [
        ("husk-a", ReconcileAction.ADOPT, "husk"), ("husk-b", ReconcileAction.TERMINATE, "unregistered")]
    assert all(d.observed is not None and d.observed.child == "none" for d in decisions)
    wanted_id, unwanted_id = identity(wanted.pid), identity(unwanted.pid)
    report = apply(decisions)
    assert report.ok, report.to_dict()
    assert [o.result for o in report.outcomes] == ["adopted", "terminated"]
    assert alive(wanted_id) and is_dead(unwanted_id)
    # the Tower still wants it, but it has been a husk for longer than allowed
    assert decide(sessions.dir, RegistryRow("husk-a"), husk_max_age=0) == [
        ("husk-a", ReconcileAction.TERMINATE, "husk_expired")]


def test_superseded_instance_is_terminated_and_respawned(sessions: Sessions) -> None:
    info = sessions.start("sup", ["sleep", "300"])
    shellper = identity(info.pid)
    row = RegistryRow("sup", "0" * 32)
    decisions = _decisions(sessions.dir, row)
    assert [(d.action, d.reason) for d in decisions] == [(ReconcileAction.TERMINATE, "superseded"),
                                                        (ReconcileAction.RESPAWN, "superseded")]
    report = apply(decisions)
    assert [o.result for o in report.outcomes] == ["terminated", "reported"]
    assert is_dead(shellper)


# --------------------------------------------------------------------------------------------- never signalled


def test_rewritten_start_time_is_left_and_never_signalled(sessions: Sessions) -> None:
    """The record now names "another process" at that pid: leave it, whatever the registry says."""
    info = sessions.start("tampered", ["sleep", "300"])
    shellper = identity(info.pid)
    path = sessions.dir / "tampered.json"
    rec = read_record(path)
    write_record(path, replace(rec, shellper_start_time=rec.shellper_start_time + 1))
    for rows in ((), (RegistryRow("tampered"),)):
        decisions = _decisions(sessions.dir, *rows)
        assert [(d.action, d.reason) for d in decisions] == [(ReconcileAction.LEAVE, "pid_reused")]
        obs = decisions[0].observed
        assert obs is not None and obs.identity == "mismatch" and obs.locked
        report = apply(decisions)
        assert [o.result for o in report.outcomes] == ["reported"]
    assert alive(shellper) and "tampered.json" in files(sessions.dir)
    st = read_stat(info.pid)
    assert st is not None and st.state in "RS"  # not even stopped


def test_stand_in_with_rewritten_start_time_survives(sessions: Sessions) -> None:
    proc = sessions.spawn(["sleep", "300"])
    sleeper = identity(proc.pid)
    hand_made_record(sessions.dir, "standin", proc.pid, shellper_start_time=sleeper.start_time + 7)
    (sessions.dir / "standin.lock").touch()
    decisions = _decisions(sessions.dir, RegistryRow("standin"))
    assert [(d.action, d.reason) for d in decisions] == [(ReconcileAction.CLEAN, "pid_reused"),
                                                        (ReconcileAction.RESPAWN, "pid_reused")]
    report = apply(decisions)
    assert report.ok and report.outcomes[0].result == "cleaned"
    assert files(sessions.dir) == set()
    assert alive(sleeper) and proc.poll() is None


def test_previous_boot_record_is_cleaned_without_probe_or_signal(sessions: Sessions) -> None:
    proc = sessions.spawn(["sleep", "300"])
    sleeper = identity(proc.pid)
    hand_made_record(sessions.dir, "oldboot", proc.pid, boot_id="00000000-0000-0000-0000-000000000000")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sessions.dir / "oldboot.sock"))
    listener.listen(4)  # a probe would show up here as a pending connection
    try:
        decisions = _decisions(sessions.dir)
        assert [(d.action, d.reason) for d in decisions] == [(ReconcileAction.CLEAN, "previous_boot")]
        obs = decisions[0].observed
        assert obs is not None and (obs.boot, obs.identity, obs.probe) == ("previous", "unchecked", "skipped")
        report = apply(decisions)
        assert report.ok and report.outcomes[0].result == "cleaned"
        assert select.select([listener], [], [], 0)[0] == []  # nobody ever connected
    finally:
        listener.close()
    assert files(sessions.dir) == set()
    assert alive(sleeper) and proc.poll() is None


def test_real_pid_reuse_is_never_signalled(tmp_path: Path) -> None:
    """In a private pid namespace: a recorded process dies, another gets its pid (forced via
    ns_last_pid). Whatever the start ticks say, the newcomer is never signalled."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) not available")
    d = Path(os.path.realpath("/tmp")) / f"tc-ns-{os.getpid()}"
    d.mkdir(mode=0o700)
    try:
        proc = subprocess.run(["unshare", "-Urpf", "--mount-proc", sys.executable, "-c", _PID_REUSE, str(d)],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": REPO})
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if proc.returncode != 0 and "unshare" in proc.stderr.split(":")[0]:
        pytest.skip(f"unshare -Urpf does not work here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if not result["same_pid"]:
        pytest.skip("could not force pid reuse through ns_last_pid")
    for case in result["cases"]:
        assert case["actions"] and "terminate" not in case["actions"], case
        assert case["newcomer_alive"] and case["signalled"] == [], case
        if case["lock"] == "held_by_other":
            assert case["actions"] == ["leave"], case
        else:
            assert case["actions"][0] == "clean", case  # stale files go; the newcomer stays


_PID_REUSE = r"""
import fcntl, json, os, subprocess, sys, time
from pathlib import Path
from shellper.host.identity import boot_id, read_stat
from shellper.core.owner import default_owner
from shellper.host.record import SessionRecord, write_record
from tower_client.apply import ADOPT_FRESH, VERIFY_CLIENT_NAME, apply
from tower_client.client import AsyncClient, AsyncResumingClient
from tower_client.discover import discover
from tower_client.reconcile import Registry, RegistryRow, reconcile

d = Path(sys.argv[1])
NEWCOMER = "import signal, sys, time\n" \
    "def h(n, f):\n    print(n, flush=True)\n" \
    "for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGUSR1): signal.signal(s, h)\n" \
    "print('ready', flush=True)\ntime.sleep(60)\n"


def reuse():
    # P, the recorded "shellper", holds the session lock through an inherited open file description.
    lock_fd = os.open(d / "reuse.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock_fd, fcntl.LOCK_EX)
    p = subprocess.Popen(["sleep", "60"], pass_fds=(lock_fd,))
    os.close(lock_fd)  # from now on only P holds the lock; it is released when P dies
    ticks = read_stat(p.pid).start_time
    p.kill(); p.wait()
    fd = os.open("/proc/sys/kernel/ns_last_pid", os.O_WRONLY)
    os.write(fd, str(p.pid - 1).encode())  # os.write: a buffered write can hide EPERM
    os.close(fd)
    q = subprocess.Popen([sys.executable, "-c", NEWCOMER], stdout=subprocess.PIPE)
    return p.pid, ticks, q


cases = []
same_pid = True
same_tick = False
for lock in ("free", "held_by_other"):
    for rows in ((), (RegistryRow("reuse"),)):
        for attempt in range(20):  # try for a start-tick collision too (pid AND ticks equal)
            for f in d.iterdir():
                f.unlink()
            pid, ticks, q = reuse()
            assert q.stdout.readline() == b"ready\n"
            collided = q.pid == pid and read_stat(q.pid).start_time == ticks
            if collided or attempt == 19:
                break
            q.kill(); q.wait()
        same_pid = same_pid and q.pid == pid
        same_tick = same_tick or collided
        write_record(d / "reuse.json", SessionRecord(
            name="reuse", boot_id=boot_id(), shellper_pid=pid, shellper_start_time=ticks, instance_id="e" * 32,
            command=["x"], cwd="/", socket=str(d / "reuse.sock"), state="running", owner=default_owner()))
        if lock == "held_by_other":  # a new owner (this process) holds the lock now
            other = os.open(d / "reuse.lock", os.O_RDWR)
            fcntl.flock(other, fcntl.LOCK_EX)
        decisions = reconcile(Registry(rows), discover(d, probe_timeout=0.5), now=time.time())
        apply(decisions, grace=0.2)
        if lock == "held_by_other":
            os.close(other)
        os.set_blocking(q.stdout.fileno(), False)
        got = (q.stdout.read() or b"").decode().split()
        cases.append({"lock": lock, "registered": bool(rows), "collided": collided,
                      "actions": [str(x.action) for x in decisions], "reasons": [x.reason for x in decisions],
                      "newcomer_alive": q.poll() is None and read_stat(q.pid).state in "RS", "signalled": got})
        q.kill(); q.wait()
print(json.dumps({"same_pid": same_pid, "same_tick": same_tick, "cases": cases}))
"""


# --------------------------------------------------------------------------------------------- directories


def test_two_towers_on_two_directories_never_meet(sessions: Sessions, other: Sessions) -> None:
    a = sessions.start("same", ["sleep", "300"])
    b = other.start("same", ["sleep", "300"])
    b_id = identity(b.pid)
    mine = sessions.start("only-a", ["sleep", "300"])
    seen_a = {o.name: o.instance_id for o in discover(sessions.dir)}
    seen_b = {o.name: o.instance_id for o in discover(other.dir)}
    assert seen_a == {"same": a.instance_id, "only-a": mine.instance_id}
    assert seen_b == {"same": b.instance_id}
    # tower B wants nothing: it ends its own shellper and never sees, let alone touches, A's
    report = apply(_decisions(other.dir), grace=1.0)
    assert report.ok and [o.decision.name for o in report.outcomes] == ["same"]
    assert is_dead(b_id)
    assert alive(identity(a.pid)) and alive(identity(mine.pid))
    assert {"same.sock", "same.json", "same.lock"} <= files(sessions.dir)
    assert decide(sessions.dir, RegistryRow("same"), RegistryRow("only-a")) == [
        ("only-a", ReconcileAction.ADOPT, "running"), ("same", ReconcileAction.ADOPT, "running")]


def test_observe_reports_a_dead_shellper_and_clean_then_respawn(sessions: Sessions) -> None:
    info = sessions.start("gone", ["sleep", "300"])
    child = identity(info.child_pid or 0)
    sessions.track(child)
    shellper = identity(info.pid)
    os.kill(info.pid, signal.SIGKILL)  # our own shellper, just launched: it dies without cleaning up
    poll_until(lambda: is_dead(shellper), what="the shellper to die")
    obs = observe(sessions.dir, "gone")
    assert (obs.identity, obs.locked, obs.probe) == ("gone", False, "refused")
    decisions = _decisions(sessions.dir, RegistryRow("gone"))
    assert [(d.action, d.reason) for d in decisions] == [(ReconcileAction.CLEAN, "dead"),
                                                         (ReconcileAction.RESPAWN, "dead")]
    report = apply(decisions)
    assert [o.result for o in report.outcomes] == ["cleaned", "reported"] and report.ok
    assert files(sessions.dir) == set()

pytestmark = pytest.mark.kills_sessions


def test_proc_tables_read_before_a_session_started_still_see_it(sessions: Sessions) -> None:
    """discover reads /proc's lock and socket tables once for a whole directory; a session that started after
    they were read is looked up afresh, so it is seen holding its lock and serving its socket, as without them."""
    early = sessions.start("early", ["cat"])
    tables = ProcTables()
    assert tables.lock_owners(SessionPaths.for_name(sessions.dir, "early").lock) == (early.pid,)
    assert serves(early.pid, read_record(early.record), str(sessions.dir), tables)
    late = sessions.start("late", ["cat"])  # after the tables were read
    record = read_record(late.record)
    assert tables.lock_owners(SessionPaths.for_name(sessions.dir, "late").lock) == (late.pid,)
    assert serves(late.pid, record, str(sessions.dir), tables)
    assert not serves(early.pid, record, str(sessions.dir), tables)  # another session's shellper is not its server


def test_proc_tables_do_not_name_a_holder_the_inode_number_had_before(tmp_path: Path) -> None:
    """/proc/locks names files by inode number: a lock file removed after the table was read may have its number
    given to a new one, so the table's holder is believed only if it has this very file open (seen under load,
    where discover then said another process held a session's lock)."""
    import fcntl

    lock = tmp_path / "x.lock"
    with lock.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        st = lock.stat()
        tables = ProcTables()
        tables.lock_owners(lock)  # reads the table
        key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        # the table as it would read had the inode number been another file's, locked by another process
        tables._locks = {key: (os.getppid(),)}
        assert tables.lock_owners(lock) == (os.getpid(),)
