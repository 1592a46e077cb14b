"""tower_client never signals a process that is not the recorded shellper, nor a live session's tree.

Real processes throughout: stand-ins named by hand-made records, real shellpers (launched both through
``launch()`` and through the ``shellper run`` CLI), ghost records copied from live sessions. Every
process a test starts is tracked by identity and killed by the fixtures.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.paths import REPO, SHELLPER_CLI
from support.processes import alive, identity, is_dead, tree
from support.run import CGROUP_PARENT
from support.sessions import Sessions, hand_made_record, left_in
from support.waiting import poll_until

from shellper.client.launch import LaunchInfo
from shellper.core.structs import replace
from shellper.host.cleanup import CommandMismatch
from shellper.host.identity import ProcessIdentity, read_stat
from shellper.host.paths import SessionPaths
from shellper.host.record import SessionLock, cmdline_sha256, read_record, write_record
from tower_client.apply import apply, terminate_session
from tower_client.client import InstanceMismatch
from tower_client.discover import discover, discover_async, observe
from tower_client.reconcile import ReconcileAction, ReconcileDecision, Registry, RegistryRow, reconcile

pytestmark = pytest.mark.kills_sessions


def decisions(d: Path, *rows: RegistryRow, probe_timeout: float = 2.0) -> list[ReconcileDecision]:
    return reconcile(Registry(rows), discover(d, probe_timeout=probe_timeout), now=time.time())


def untouched(ident: ProcessIdentity) -> bool:
    """Alive, same process, and not even stopped."""
    st = read_stat(ident.pid)
    return alive(ident) and st is not None and st.state in "RS"


# --------------------------------------------------------------------------------------------- 1: terminate


@pytest.mark.parametrize("recorded_hash", ["none", "another_program"])
def test_terminate_refuses_a_foreign_process_with_the_recorded_ticks(sessions: Sessions, recorded_hash: str) -> None:
    """Boot id, pid and start ticks all match, but the process does not run what the record says."""
    proc = sessions.spawn(["sleep", "300"])
    sleeper = identity(proc.pid)
    sha = None if recorded_hash == "none" else cmdline_sha256("self")  # this interpreter's argv, not sleep's
    rec = hand_made_record(sessions.dir, "foreign", proc.pid, cmdline_sha256=sha)
    with pytest.raises(CommandMismatch) as caught:
        terminate_session(rec, SessionPaths.for_name(sessions.dir, "foreign"), grace=0.3, connect_timeout=0.3)
    assert caught.value.pid == proc.pid
    assert untouched(sleeper) and proc.poll() is None


def test_terminate_sends_no_stop_to_a_socket_answering_as_another_instance(sessions: Sessions) -> None:
    """The pid, its ticks, its command line and its listening socket are the record's, but WELCOME names
    another instance: InstanceMismatch, and neither STOP nor a signal reaches the shellper."""
    info = sessions.start("im", ["sleep", "300"])
    shellper = identity(info.pid)
    rec = replace(read_record(sessions.dir / "im.json"), instance_id="f" * 32)
    with pytest.raises(InstanceMismatch):
        terminate_session(rec, SessionPaths.for_name(sessions.dir, "im"), grace=0.3, connect_timeout=2.0)
    assert untouched(shellper)
    assert [(d.action, d.reason) for d in decisions(sessions.dir, RegistryRow("im", info.instance_id))] == \
        [(ReconcileAction.ADOPT, "running")]


def test_apply_terminate_refuses_a_lock_holding_stand_in(sessions: Sessions) -> None:
    """A stand-in that holds the session lock itself gets a TERMINATE decision; apply signals nothing."""
    lock = sessions.dir / "standin.lock"
    locker = "import fcntl, os, signal, sys\n" \
        "fcntl.flock(os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600), fcntl.LOCK_EX)\nsignal.pause()\n"
    proc = sessions.spawn([sys.executable, "-c", locker, str(lock)], stdout=subprocess.DEVNULL)
    stand_in = identity(proc.pid)
    poll_until(lambda: SessionLock.is_locked(lock), what="the stand-in to take the lock")
    hand_made_record(sessions.dir, "standin", proc.pid, cmdline_sha256="0" * 64)
    found = decisions(sessions.dir, probe_timeout=0.3)
    assert [(d.action, d.reason) for d in found] == [(ReconcileAction.TERMINATE, "unregistered")]
    report = apply(found, grace=0.3, probe_timeout=0.3)
    outcome = report.outcomes[0]
    assert (outcome.result, outcome.ok) == ("skipped", False), outcome
    assert outcome.error is not None and "not the recorded shellper" in outcome.error
    assert untouched(stand_in) and proc.poll() is None
    assert "standin.json" in os.listdir(sessions.dir)  # a live lock holder's files are not removed


_SELF_AND_PARENT = r"""
import json, os, sys
from shellper.host.identity import boot_id, read_stat
from shellper.host.paths import SessionPaths
from shellper.host.record import SessionRecord, cmdline_sha256
from tower_client.apply import terminate_session

out = {}
for who, pid in (("parent", os.getppid()), ("self", os.getpid())):
    rec = SessionRecord(name=who, boot_id=boot_id(), shellper_pid=pid, shellper_start_time=read_stat(pid).start_time,
                        instance_id="a" * 32, command=["x"], cwd="/", socket="", cmdline_sha256=cmdline_sha256(pid),
                        state="running")
    try:
        terminate_session(rec, SessionPaths.for_name(sys.argv[1], who), grace=0.2, connect_timeout=0.2)
        out[who] = "terminated"
    except Exception as exc:
        out[who] = [type(exc).__name__, getattr(exc, "pid", None) == pid]
print(json.dumps(out), flush=True)
"""


def test_terminate_refuses_the_caller_and_its_ancestors(sessions: Sessions) -> None:
    """Records naming the caller or its parent, right down to the cmdline hash: never signalled.

    Run in a process tree of its own (a new session), so a regression can only hit that tree."""
    proc = sessions.spawn(["sh", "-c", '"$0" -c "$1" "$2"; echo parent-alive', sys.executable, _SELF_AND_PARENT,
                           str(sessions.dir)], stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": REPO})
    out, _ = proc.communicate(timeout=60)
    lines = out.decode().splitlines()
    assert lines[-1:] == ["parent-alive"], lines
    assert json.loads(lines[0]) == {"parent": ["ProtectedProcess", True], "self": ["ProtectedProcess", True]}


@pytest.mark.parametrize("how", ["cli", "launch"])
def test_real_shellper_records_pass_the_cmdline_check(sessions: Sessions, how: str) -> None:
    """Both launch paths (the CLI's forked daemon, launch()'s exec of shellper.daemon) write a hash that
    matches: an unregistered session is still terminated, tree and all."""
    if how == "cli":
        run = subprocess.run([*SHELLPER_CLI, "--dir", str(sessions.dir), "run", "--json", "real", "--", "sleep", "300"],
                             capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        assert run.returncode == 0, run.stderr
        pid = json.loads(run.stdout.decode().strip().splitlines()[-1])["pid"]
        sessions.track(identity(pid))
    else:
        pid = sessions.start("real", ["sleep", "300"]).pid
    shellper = identity(pid)
    members = poll_until(lambda: tree(pid), what="the shellper's child")
    found = decisions(sessions.dir)
    assert [(d.action, d.reason) for d in found] == [(ReconcileAction.TERMINATE, "unregistered")]
    report = apply(found, grace=1.0)
    outcome = report.outcomes[0]
    assert report.ok and outcome.result == "terminated", outcome
    assert outcome.termination is not None and outcome.termination.method == "stop"
    assert is_dead(shellper) and all(is_dead(m) for m in members)
    assert left_in(sessions.dir) == []


# --------------------------------------------------------------------------------------------- 2: clean


@pytest.mark.parametrize("mode", ["none", pytest.param("cgroup", marks=pytest.mark.skipif(
    CGROUP_PARENT is None, reason="no writable cgroup v2 hierarchy here"))])
@pytest.mark.parametrize("variant", ["exact_copy", "other_instance", "live_record_removed"])
def test_cleaning_a_ghost_of_a_live_session_spares_its_child(sessions: Sessions, variant: str, mode: str) -> None:
    """A dead record copied from a live session carries that session's marks (instance id, child's
    session id); cleaning it must not end the live session's child.

    exact_copy: the instance id is claimed by the live record (suspect: nothing ended);
    other_instance: only the child is claimed (suspect); live_record_removed: nothing claims anything,
    but the child's parent is the live shellper holding cat1's lock (spared). With a cgroup, the ghost names
    cat1's cgroup, which is not a cgroup of a session "ghost": nothing is ended either."""
    info = sessions.start("cat1", ["cat"], containment=mode)
    assert info.child_pid is not None
    shellper, child = identity(info.pid), identity(info.child_pid)
    rec = read_record(sessions.dir / "cat1.json")
    ghost = replace(rec, name="ghost", shellper_pid=4_000_000)
    if variant == "other_instance":
        ghost = replace(ghost, instance_id="e" * 32)
    write_record(sessions.dir / "ghost.json", ghost)
    if variant == "live_record_removed":
        os.unlink(sessions.dir / "cat1.json")
    found = [d for d in decisions(sessions.dir, RegistryRow("cat1")) if d.name == "ghost"]
    assert [(d.action, d.reason) for d in found] == [(ReconcileAction.CLEAN, "dead")]
    report = apply(found, grace=0.3)
    outcome = report.outcomes[0]
    assert report.ok and outcome.result == "cleaned" and outcome.survivors == (), outcome
    if mode == "cgroup":
        assert "suspect record" in outcome.detail and "is not the cgroup of session 'ghost'" in outcome.detail
    elif variant == "live_record_removed":
        assert f"spared [{child.pid}]" in outcome.detail, outcome.detail
    else:
        assert "suspect record" in outcome.detail and "claimed by live" in outcome.detail, outcome.detail
    assert untouched(child) and untouched(shellper)
    assert "ghost.json" not in os.listdir(sessions.dir)
    if variant != "live_record_removed":
        assert [(d.action, d.reason) for d in decisions(sessions.dir, RegistryRow("cat1"))] == [
            (ReconcileAction.ADOPT, "running")]


def killed_beside_a_live_one(sessions: Sessions) -> tuple[LaunchInfo, ProcessIdentity]:
    """Sessions "keep" (live) and "dead" (its shellper SIGKILLed, its setsid'd sleep left running)."""
    keep = sessions.start("keep", ["cat"])
    info = sessions.start("dead", ["sh", "-c", "setsid sleep 300 & echo started; wait"])
    grandchild = poll_until(lambda: next((m for m in tree(info.pid) if (st := read_stat(m.pid)) is not None
                                          and st.comm == "sleep"), None), what="the setsid'd sleep")
    sessions.track(grandchild)
    shellper = identity(info.pid)
    os.kill(info.pid, signal.SIGKILL)  # our own shellper, just launched
    poll_until(lambda: is_dead(shellper), what="the shellper to die")
    return keep, grandchild


def test_survivors_of_a_really_dead_session_are_still_ended(sessions: Sessions) -> None:
    """Control for the above: a killed shellper's setsid'd grandchild, beside a live session, is ended."""
    keep, grandchild = killed_beside_a_live_one(sessions)
    poll_until(lambda: observe(sessions.dir, "dead").identity == "gone", what="the record to name a dead pid")
    found = [d for d in decisions(sessions.dir, RegistryRow("keep")) if d.name == "dead"]
    assert [(d.action, d.reason) for d in found] == [(ReconcileAction.CLEAN, "dead")]
    report = apply(found, grace=0.3)
    assert report.ok and report.outcomes[0].survivors == (grandchild.pid,), report.to_dict()
    assert is_dead(grandchild) and untouched(identity(keep.pid))


def test_shellper_stop_of_a_dead_session_ends_its_leftovers_and_removes_its_files(sessions: Sessions) -> None:
    """`shellper stop` said "nothing is listening (stale socket)" and left every file (and whatever the tree
    left running); it now cleans up as reconcile would, and leaves a live session beside it alone."""
    keep, grandchild = killed_beside_a_live_one(sessions)
    done = subprocess.run([*SHELLPER_CLI, "--dir", str(sessions.dir), "stop", "dead", "--grace", "0.3"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("stopped dead: its shellper was already gone; removed its files and ended 1 "
                                   "process(es) it left running")
    assert is_dead(grandchild) and untouched(identity(keep.pid))
    assert sorted(p.name for p in sessions.dir.iterdir() if p.name.startswith("dead")) == []


# --------------------------------------------------------------------------------------------- 3: arguments


@pytest.mark.parametrize("concurrency", [0, -1])
def test_discover_refuses_a_concurrency_below_one(sessions: Sessions, concurrency: int) -> None:
    """0 used to wait forever for a free probe slot; the async form is bounded here so a regression fails."""
    sessions.start("one", ["cat"])

    async def bounded() -> None:
        async with asyncio.timeout(10):
            await discover_async(sessions.dir, concurrency=concurrency)

    with pytest.raises(ValueError, match=r"^concurrency must be >= 1$"):
        asyncio.run(bounded())
    with pytest.raises(ValueError, match=r"^concurrency must be >= 1$"):
        discover(sessions.dir, concurrency=concurrency)


@pytest.mark.parametrize("probe_timeout", [0, -1.0, float("nan"), float("inf")])
def test_probe_timeout_must_be_finite_and_positive(sessions: Sessions, probe_timeout: float) -> None:
    sessions.start("one", ["cat"])
    with pytest.raises(ValueError, match="probe_timeout"):
        discover(sessions.dir, probe_timeout=probe_timeout)
    with pytest.raises(ValueError, match="probe_timeout"):
        observe(sessions.dir, "one", probe_timeout=probe_timeout)
    with pytest.raises(ValueError, match="probe_timeout"):
        apply(decisions(sessions.dir, RegistryRow("one")), probe_timeout=probe_timeout)


@pytest.mark.parametrize("husk_max_age", [-1, float("nan")])
def test_reconcile_refuses_a_bad_husk_max_age(sessions: Sessions, husk_max_age: float) -> None:
    sessions.start("one", ["cat"])
    with pytest.raises(ValueError, match="husk_max_age"):
        reconcile(Registry((RegistryRow("one"),)), discover(sessions.dir), now=time.time(),
                  husk_max_age=husk_max_age)


# --------------------------------------------------------------------------------------------- 4: client arguments


BAD_PATHS = [(None, TypeError), (3, TypeError), (b"/tmp/x.sock", TypeError), ("", ValueError),
             ("/tmp/x.sock\0junk", ValueError)]


@pytest.mark.parametrize(("path", "error"), BAD_PATHS, ids=[repr(p)[:20] for p, _ in BAD_PATHS])
@pytest.mark.parametrize("kind", ["Client", "AsyncClient", "ResumingClient", "AsyncResumingClient"])
def test_a_client_refuses_a_path_str_would_turn_into_another(kind: str, path: object, error: type) -> None:
    """Client(None) used to connect to ./None (a socket there answered), b"/x.sock" to "b'/x.sock'", and a
    NUL cut the address short in the kernel."""
    import tower_client.client as tc
    from shellper.client.blocking import Client

    cls = Client if kind == "Client" else getattr(tc, kind)
    with pytest.raises(error, match="socket path"):
        cls(path)


@pytest.mark.parametrize("kind", ["Client", "AsyncClient", "ResumingClient", "AsyncResumingClient"])
def test_a_client_refuses_an_unknown_role_before_connecting(kind: str, tmp_path: Path) -> None:
    import tower_client.client as tc
    from shellper.client.blocking import Client

    cls = Client if kind == "Client" else getattr(tc, kind)
    with pytest.raises(ValueError, match="role 'admin' is not one of"):
        cls(tmp_path / "x.sock", "admin")
    cls(tmp_path / "x.sock", "viewer")  # a good one constructs (nothing connects yet)


BAD_REQUESTS = [
    ("resize", (0, 24), {}, ValueError), ("resize", ("80", 24), {}, ValueError),
    ("resize", (80, 70000), {}, ValueError),
    ("signal", (9,), {}, ValueError), ("signal", ("SIGBOGUS",), {}, ValueError),
    ("spawn", ([],), {}, ValueError), ("spawn", ("cat",), {}, ValueError), ("spawn", (None,), {"cwd": 5}, ValueError),
    ("spawn", (None,), {"env": {"A": 1}}, ValueError),
    ("stop", (-1,), {}, ValueError), ("stop", (float("nan"),), {}, ValueError), ("stop", ("5",), {}, ValueError),
    ("write", ("text",), {}, TypeError), ("write", (None,), {}, TypeError),
]


@pytest.mark.parametrize(("method", "args", "kwargs", "error"), BAD_REQUESTS,
                         ids=[f"{m}{a!r:.16}{k or ''}" for m, a, k, _ in BAD_REQUESTS])
def test_a_bad_request_raises_locally_and_keeps_the_connection(
        sessions: Sessions, method: str, args: tuple[object, ...], kwargs: dict[str, object], error: type) -> None:
    """Each used to reach the shellper, whose fatal ERROR bad_field closed the tower's connection (or, for
    spawn([]), ended the child): now the argument is refused before anything is sent."""
    from tower_client.client import AsyncClient

    info = sessions.start("req", ["cat"])

    async def go() -> str:
        async with asyncio.timeout(20):
            client = AsyncClient(sessions.dir / "req.sock", "tower")
            await client.connect(replay_bytes=0)
            try:
                with pytest.raises(error, match=r"must be|is not one of|is outside"):
                    await getattr(client, method)(*args, **kwargs)
                return (await client.status()).state
            finally:
                await client.close()

    assert asyncio.run(go()) == "running"
    assert alive(identity(info.pid)) and alive(identity(info.child_pid))


def test_observe_refuses_a_directory_others_could_plant_records_in(sessions: Sessions) -> None:
    """discover() refused a group/world-writable directory but observe() (behind `tower-client reap`) read
    its records as evidence."""
    from shellper.host.paths import UnsafeDirError

    sessions.start("one", ["cat"])
    for mode in (0o777, 0o750):  # 0750: not writable by others, but a client would refuse to connect there
        os.chmod(sessions.dir, mode)
        try:
            with pytest.raises(UnsafeDirError, match="group/world accessible"):
                observe(sessions.dir, "one")
        finally:
            os.chmod(sessions.dir, 0o700)
    assert observe(sessions.dir, "one").record is not None


@pytest.mark.parametrize("name", ["KILL", "kill", "SIGKILL", "SIGwinch"])
def test_the_client_lets_through_every_signal_name_the_shellper_takes(name: str) -> None:
    """The client's check is the shellper's own (wire.bare_signal): it once refused "SIGKILL", which the
    shellper accepts. The connection holds the one check every client's request methods use."""
    from shellper.protocol import wire
    from shellper.protocol.connection import Connection

    frame = wire.Signal(signal=name)
    assert Connection("x.sock").checked(frame) is frame
