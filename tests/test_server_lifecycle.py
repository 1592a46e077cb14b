"""The shellper process's life: detached launch, its files and identity, failed launches, stop, repair."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.frames import TREE_CHILD, echo_roundtrip, expect_closed, recv_until, status, tree_pids
from support.launchers import settled
from support.paths import PY, ROOT, SHELLPER_CLI
from support.processes import UNDER_SUBREAPER, daemons_for
from support.sessions import NO_RESTART, Sessions, files_in, left_in
from support.waiting import poll_until, wait_gone

from shellper.client.launch import LaunchError, LaunchInfo
from shellper.host.cleanup import clean_session
from shellper.host.identity import boot_id, start_time
from shellper.host.paths import PathError, SessionPaths
from shellper.host.record import SessionLock, read_record
from shellper.protocol import wire


def cli(*args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """The ``shellper`` CLI in a subprocess that exits when it is done (capture_output: waits for EOF)."""
    return subprocess.run([*SHELLPER_CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def ancestors(pid: int) -> list[int]:
    out = []
    while pid > 1:
        with open(f"/proc/{pid}/stat") as fh:
            pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        out.append(pid)
    return out


# ------------------------------------------------------------------------------------------- launch


def test_session_survives_the_launcher_exiting(sessions: Sessions) -> None:
    done = cli("--dir", str(sessions.dir), "run", "--json", "sv", "--", "cat")
    assert done.returncode == 0, done.stderr  # returned at all: the daemon does not hold the CLI's pipes
    info = LaunchInfo.from_dict(json.loads(done.stdout))
    sessions.started.append(info)
    assert not wait_gone(info.pid, 0)
    with open(f"/proc/{info.pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    ppid, pgid, sid = int(fields[1]), int(fields[2]), int(fields[3])
    assert ppid == 1 or ppid in ancestors(os.getpid()), f"parent {ppid}: init or a subreaper above us"
    assert sid != os.getsid(0) and pgid != os.getpgid(0)  # no terminal hang-up or group signal reaches it
    assert os.readlink(f"/proc/{info.pid}/fd/0") == "/dev/null"
    assert os.readlink(f"/proc/{info.pid}/fd/1") == info.log and os.readlink(f"/proc/{info.pid}/fd/2") == info.log
    with sessions.connect("sv", "terminal") as term:
        assert term.welcome is not None and term.welcome.shellper_pid == info.pid
        echo_roundtrip(term, b"alive")
    sessions.stop("sv")


@pytest.mark.parametrize(("argv", "policy", "code", "cls"), [
    (["true"], None, 0, "clean"),
    (["sh", "-c", "exit 3"], NO_RESTART, 3, "crash"),
], ids=["true", "exit-3"])
def test_an_exit_before_anyone_connects_is_reported(sessions: Sessions, argv: list[str], policy: object,
                                                   code: int, cls: str) -> None:
    info = sessions.start("fx", argv, policy=policy)
    record_path = sessions.dir / "fx.json"
    poll_until(lambda: read_record(record_path).state == "exited", what="the record to say exited")
    with sessions.connect("fx", "viewer") as late:
        assert late.welcome is not None and late.welcome.exit is not None
        assert late.welcome.state == "exited" and late.welcome.child_pid is None
        assert (late.welcome.exit["code"], late.welcome.exit["class"]) == (code, cls)
        child = late.welcome.exit["child_pid"]
        assert child == info.child_pid or info.child_pid is None  # None: it was gone before launch returned
        assert not os.path.exists(f"/proc/{child}")  # reaped
        first = late.recv(timeout=10)  # REPLAY held the whole (small) history; the EXIT comes next
        assert isinstance(first, wire.Exit), first
        assert (first.code, first.exit_class, first.state, first.child_pid) == (code, cls, "exited", child)
        assert late.output.next_offset == late.welcome.ring_end
    sessions.stop("fx")


def test_record_and_lock_describe_the_live_process(sessions: Sessions) -> None:
    info = sessions.start("rec", ["sleep", "300"], ring_bytes=128 * 1024)
    paths = {kind: sessions.dir / f"rec.{kind}" for kind in ("json", "lock", "log", "sock")}
    with sessions.connect("rec", "viewer") as viewer:
        assert viewer.welcome is not None
        welcome = viewer.welcome
    rec = read_record(paths["json"])
    child = info.child_pid
    assert child is not None
    assert (rec.name, rec.shellper_pid, rec.instance_id, rec.boot_id) == ("rec", info.pid, welcome.instance_id,
                                                                          boot_id())
    assert rec.shellper_start_time == start_time(info.pid) == welcome.shellper_start_time == info.start_time
    assert (rec.shellper_pgid, rec.shellper_sid) == (os.getpgid(info.pid), os.getsid(info.pid))
    assert rec.cmdline_sha256 == hashlib.sha256(Path(f"/proc/{info.pid}/cmdline").read_bytes()).hexdigest()
    assert (rec.child_pid, rec.child_pgid, rec.child_start_time) == (child, os.getpgid(child), start_time(child))
    assert os.getpgid(child) == child  # the child leads its own group: signals reach its whole job
    assert (rec.command, rec.socket, rec.state, rec.ring_bytes) == (["sleep", "300"], str(paths["sock"]),
                                                                     "running", 128 * 1024)
    for path in paths.values():
        assert (os.stat(path).st_mode & 0o777) == 0o600, path
    assert SessionLock.is_locked(paths["lock"])
    sessions.stop("rec")
    assert not SessionLock.is_locked(paths["lock"])
    assert not any(p.exists() for p in paths.values())


def test_a_second_run_with_the_same_name_fails_and_leaves_the_first(sessions: Sessions) -> None:
    info = sessions.start("dup", ["cat"])
    before = read_record(sessions.dir / "dup.json")
    with pytest.raises(LaunchError, match="already running"):
        sessions.start("dup", ["cat"])
    sessions.started[:] = [info]
    done = cli("--dir", str(sessions.dir), "run", "dup", "--", "cat")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("shellper: ") and "already running" in done.stderr
    assert done.stderr.count("\n") == 1
    assert daemons_for(sessions.dir) == [info.pid]
    after = read_record(sessions.dir / "dup.json")
    assert (after.instance_id, after.shellper_pid) == (before.instance_id, before.shellper_pid)
    with sessions.connect("dup", "terminal") as term:
        assert term.welcome is not None and term.welcome.instance_id == before.instance_id
        echo_roundtrip(term, b"first-intact")
    sessions.stop("dup")




@pytest.mark.parametrize(("args", "code", "says"), [
    (["run", "a/b"], 1, "invalid session name"),  # no command: $SHELL, but a name that cannot be
    (["run", "np", "--cols", "wide", "--", "cat"], 2, "invalid int value"),
    (["run", "np", "--help"], 0, "usage:"),
    (["run", "np", "--cwd", "/nonexistent", "--", "cat"], 1, "is not a directory"),
    (["ls", "run"], 2, "unrecognized arguments"),
    (["run", "np", "--bogus", "--", "cat"], 2, "unrecognized arguments"),  # a run to the prefork's guess
], ids=["bad-name", "bad-int", "help", "bad-cwd", "ls", "bad-option"])
def test_a_run_that_does_not_launch_leaves_no_process(sessions: Sessions, args: list[str], code: int,
                                                      says: str) -> None:
    """The console script forks the daemon-to-be before parsing (shellper.daemon.prefork): when the command
    turns out not to launch, that process is killed and reaped by the CLI itself. The CLI runs under a
    subreaper here, which would inherit (and report) any process the CLI left behind."""
    done = subprocess.run([PY, "-c", UNDER_SUBREAPER, *SHELLPER_CLI, "--dir", str(sessions.dir), *args],
                          capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert done.returncode == code, done.stderr
    assert says in done.stdout + done.stderr
    assert "orphans: []" in done.stderr
    assert daemons_for(sessions.dir) == []
    assert not sessions.dir.exists() or left_in(sessions.dir) == []


def test_a_command_that_cannot_start_fails_the_launch_cleanly(sessions: Sessions) -> None:
    with pytest.raises(LaunchError) as err:
        sessions.start("bad", ["/nonexistent"])
    assert "/nonexistent" in str(err.value)
    done = cli("--dir", str(sessions.dir), "run", "bad", "--", "/nonexistent")
    assert done.returncode == 1 and done.stderr.startswith("shellper: ") and "/nonexistent" in done.stderr
    poll_until(lambda: not daemons_for(sessions.dir), what="the failed shellpers to exit")
    assert left_in(sessions.dir) == []


@pytest.mark.parametrize("how", ["mode 0755", "owner nobody"])
def test_an_unsafe_runtime_dir_is_refused(sessions: Sessions, how: str) -> None:
    if how == "owner nobody" and os.geteuid() != 0:
        pytest.skip("needs root to chown")
    try:
        if how == "mode 0755":
            os.chmod(sessions.dir, 0o755)
            expected = "group/world accessible"
        else:
            os.chown(sessions.dir, 65534, 65534)
            expected = "owned by uid 65534"
        with pytest.raises(PathError, match=expected):
            sessions.start("ud", ["cat"])
        done = cli("--dir", str(sessions.dir), "run", "ud", "--", "cat")
        assert done.returncode == 1 and expected in done.stderr and done.stderr.startswith("shellper: ")
    finally:
        os.chown(sessions.dir, os.geteuid(), os.getegid())
        os.chmod(sessions.dir, 0o700)
    assert not daemons_for(sessions.dir)
    assert left_in(sessions.dir) == []


# ------------------------------------------------------------------------------------------- stop


def test_stop_leaves_no_process_zombie_or_file(sessions: Sessions) -> None:
    info = sessions.start("end", ["sh", "-c", TREE_CHILD], grace=5.0)
    with sessions.connect("end", "tower") as tower, sessions.connect("end", "viewer") as viewer:
        shell, grandchild = tree_pids(tower)
        assert shell == info.child_pid
        tower.send(wire.Stop(grace=0.3))  # TERM is ignored by the tree: SIGKILL after 0.3 s
        for client in (tower, viewer):
            frames = expect_closed(client)
            exits = [f for f in frames if isinstance(f, wire.Exit)]
            assert [(e.child_pid, e.exit_class, e.state) for e in exits] == [(shell, "requested", "stopping")]
    assert wait_gone(info.pid, 10), "the shellper survived STOP"
    for pid in (shell, grandchild):  # the shellper (their subreaper) reaped them before it exited
        assert not os.path.exists(f"/proc/{pid}"), f"pid {pid} survived STOP or was left a zombie"
    assert left_in(sessions.dir) == []


def test_sigterm_to_the_shellper_stops_the_session(sessions: Sessions) -> None:
    info = sessions.start("term", ["sh", "-c", TREE_CHILD], grace=0.3)
    with sessions.connect("term", "tower") as tower:
        shell, grandchild = tree_pids(tower)
        os.kill(info.pid, signal.SIGTERM)
        ex = recv_until(tower, wire.Exit)
        assert (ex.exit_class, ex.state) == ("requested", "stopping")
        expect_closed(tower)
    for pid in (info.pid, shell, grandchild):
        assert wait_gone(pid, 10), f"pid {pid} survived SIGTERM to the shellper"
    assert left_in(sessions.dir) == []


@contextlib.contextmanager
def immutable(directory: Path) -> Iterator[None]:
    """No entry of ``directory`` can be added or removed, by root either (chattr +i); its files stay writable."""
    done = subprocess.run(["chattr", "+i", str(directory)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot make {directory} immutable: {done.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(directory)], check=True)


def test_a_stop_that_fails_still_ends_the_session_and_says_why(sessions: Sessions) -> None:
    info = sessions.start("sf", ["sh", "-c", TREE_CHILD], grace=0.3)
    with sessions.connect("sf", "tower") as tower:
        shell, grandchild = tree_pids(tower)
    with immutable(sessions.dir):  # the stop's last step, removing the session's files, fails (EPERM)
        sessions.stop("sf")  # which waits for the shellper to exit
    for pid in (shell, grandchild):
        assert wait_gone(pid, 0), f"pid {pid} survived the failed stop"
    log = Path(info.log).read_text()
    assert "stop failed (PermissionError: [Errno 1] Operation not permitted" in log, log
    assert "could not remove the session's files: PermissionError" in log, log
    assert "stopped after a failed stop" in log, log
    # What it could not remove is a dead session's files, as after a kill -9: the Tower's clean removes them.
    removed = clean_session(SessionPaths.for_name(str(sessions.dir), "sf"))
    assert sorted(Path(p).name for p in removed) == ["sf.json", "sf.lock", "sf.log", "sf.sock"]


BROKEN_STOP = """
import sys
from shellper.daemon import lifecycle
def fail(self):
    raise RuntimeError("injected: the stop's first step fails")
lifecycle.Lifecycle._cancel_timers = fail
from shellper.cli.main import main
sys.exit(main(sys.argv[1:]))
"""
"""``shellper`` with a stop that fails before it has ended anything: the children are still running."""


@pytest.mark.parametrize("containment", ["auto", "none"])  # auto: a cgroup where the machine gives one
def test_a_stop_that_fails_early_still_ends_the_processes_and_exits_1(sessions: Sessions, containment: str) -> None:
    proc = subprocess.Popen([PY, "-c", BROKEN_STOP, "--dir", str(sessions.dir), "run", "--foreground", "sb",
                             "--grace", "30", "--containment", containment, "--", "sh", "-c", TREE_CHILD],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        info = LaunchInfo(**json.loads(proc.stdout.readline()))  # printed once its socket accepts
        with sessions.connect("sb", "tower") as tower:
            shell, grandchild = tree_pids(tower)
            tower.send(wire.Stop())
            expect_closed(tower)
        assert proc.wait(30) == 1  # the session was ended, though not as asked
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
    for pid in (shell, grandchild):  # ended at once: the 30 s grace was not waited for
        assert wait_gone(pid, 0), f"pid {pid} survived the failed stop"
    log = Path(info.log).read_text()
    assert "stop failed (RuntimeError: injected: the stop's first step fails)" in log, log
    assert "stopped after a failed stop" in log, log
    assert files_in(sessions.dir) == ["sb.log"]  # the rest is removed, the cgroup too
    Path(info.log).unlink()


BROKEN_CHILD_TASKS = """
import sys
from shellper.daemon import lifecycle
async def fail(self, *args, **kwargs):
    raise RuntimeError("injected: the task fails")
lifecycle.Lifecycle._restart_task = fail
lifecycle.Lifecycle.respawn = fail
from shellper.cli.main import main
sys.exit(main(sys.argv[1:]))
"""
"""``shellper`` whose restarts and SPAWNs fail inside their tasks."""


@pytest.mark.parametrize("what", ["restart", "SPAWN"])
def test_a_restart_or_spawn_that_fails_makes_the_session_fatal_and_says_why(sessions: Sessions, what: str) -> None:
    """The task's failure was only logged: a failed restart left the session in backoff with no child and
    nothing scheduled, for ever, and a failed SPAWN was never answered. The session is now fatal with the
    reason, where a Tower sees it; the SPAWN gets an ERROR; STOP still works."""
    child = "exit 3" if what == "restart" else "exec cat"
    proc = subprocess.Popen([PY, "-c", BROKEN_CHILD_TASKS, "--dir", str(sessions.dir), "run", "--foreground", "ct",
                             "--backoff-initial", "0.05", "--jitter", "0", "--", "sh", "-c", child],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        info = LaunchInfo(**json.loads(proc.stdout.readline()))
        with sessions.connect("ct", "tower") as tower:
            reason = f"{what} failed: RuntimeError: injected: the task fails"
            if what == "SPAWN":  # the running child is kept; the tower hears why its SPAWN did nothing
                tower.send(wire.Spawn(argv=["cat"]))
                error = recv_until(tower, wire.Error)
                assert isinstance(error, wire.Error) and (error.code, error.message) == ("spawn_failed", reason)
                assert status(tower).state == "running"
            else:
                poll_until(lambda: status(tower).state == "fatal", what="the session to become fatal")
                assert status(tower).info["state_reason"] == reason
                assert read_record(sessions.dir / "ct.json").state_reason == reason
            tower.send(wire.Stop(grace=0.5))
            expect_closed(tower)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
    assert wait_gone(info.pid, 10) and left_in(sessions.dir) == []


# ------------------------------------------------------------------------------------------- repair


def test_sigusr1_recreates_a_removed_socket(sessions: Sessions) -> None:
    info = sessions.start("usr", ["cat"])
    sock = sessions.dir / "usr.sock"
    with sessions.connect("usr", "terminal") as term:
        sock.unlink()
        os.kill(info.pid, signal.SIGUSR1)
        poll_until(sock.exists, what="the socket to be recreated")
        with sessions.connect("usr", "viewer") as fresh:
            assert fresh.welcome is not None and fresh.welcome.shellper_pid == info.pid
            echo_roundtrip(term, b"old-connection")  # the connection made before is still served
            assert len(status(fresh).info["clients"]) == 2
        os.kill(info.pid, signal.SIGUSR1)  # nothing missing: a no-op
        echo_roundtrip(term, b"still")
    sessions.stop("usr")


def test_an_exited_session_stops_itself_after_its_husk_ttl(sessions: Sessions) -> None:
    info = sessions.start("husk", ["true"], husk_ttl=0.3)
    assert wait_gone(info.pid, 10), "the husk did not stop itself"
    assert left_in(sessions.dir) == []


@pytest.mark.parametrize(("words", "child"), [
    (["run", "dd", "--", "echo", "--", "-y"], ["echo", "--", "-y"]),
    (["run", "dd", "echo", "--", "-y"], ["echo", "--", "-y"]),
    (["run", "--grace", "1", "dd", "echo", "--", "-y"], ["echo", "--", "-y"]),
    (["run", "dd", "--", "echo", "-y"], ["echo", "-y"]),
])
def test_the_child_keeps_its_own_double_dash(sessions: Sessions, words: list[str], child: list[str]) -> None:
    """Only the first -- before the command is shellper's; one inside the command (run NAME git log -- FILE,
    with no -- before git) used to vanish from the child's argv."""
    done = cli("--dir", str(sessions.dir), words[0], "--json", *words[1:])
    assert done.returncode == 0, done.stderr
    info = LaunchInfo.from_dict(json.loads(done.stdout))
    sessions.started.append(info)
    assert read_record(sessions.dir / "dd.json").command == child
    with sessions.connect("dd", "viewer") as viewer:
        poll_until(lambda: status(viewer).state == "exited", what="the child to print and exit")
    shown = cli("--dir", str(sessions.dir), "tail", "dd", "--plain")
    assert shown.stdout.splitlines()[0] == " ".join(child[1:])
    sessions.stop("dd")


def test_send_takes_text_that_starts_with_a_dash_after_double_dash(sessions: Sessions) -> None:
    sessions.start("dash", ["cat"])
    done = cli("--dir", str(sessions.dir), "send", "dash", "--enter", "--", "-n-dash")
    assert done.returncode == 0, done.stderr
    poll_until(lambda: cli("--dir", str(sessions.dir), "tail", "dash", "--plain").stdout.count("-n-dash") == 2,
               what="the text, echoed by the terminal and copied by cat")
    sessions.stop("dash")


BAD_NUMBERS = [
    (["stop", "ok", "--grace", "inf"], "--grace: 'inf' must be a finite number of seconds >= 0"),
    (["stop", "ok", "--grace", "nan"], "--grace: 'nan' must be a finite number"),
    (["stop", "ok", "--grace", "-1"], "--grace: '-1' must be a finite number"),
    (["run", "x", "--husk-ttl", "1e309", "--", "cat"], "--husk-ttl: '1e309' must be a finite number"),
    (["tail", "ok", "--bytes", "99999999999999999999999"], "is outside 0..2^63-1 bytes"),
    (["tail", "ok", "--bytes", "-1"], "--bytes: '-1' is outside"),
    (["tail", "ok", "--bytes", "1e309K"], "'1e309K' is not a size"),
]


@pytest.mark.parametrize(("args", "says"), BAD_NUMBERS, ids=[" ".join(a[:4]) for a, _ in BAD_NUMBERS])
def test_bad_numbers_are_refused_by_the_cli_not_the_shellper(sessions: Sessions, args: list[str], says: str) -> None:
    """inf/nan/huge values used to reach the shellper (a bad_field, or "did not stop in time" for a stop
    that was refused) or end in a traceback (OverflowError in the client or in msgpack)."""
    info = sessions.start("ok", ["cat"])
    done = cli("--dir", str(sessions.dir), *args)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not wait_gone(info.pid, 0)  # nothing reached the session
    assert left_in(sessions.dir) == ["ok.json", "ok.lock", "ok.log", "ok.sock"]
    sessions.stop("ok")


@pytest.mark.parametrize("stdout", ["/dev/full", "closed"])
def test_run_says_so_when_its_info_line_cannot_be_written(sessions: Sessions, stdout: str) -> None:
    argv = [*SHELLPER_CLI, "--dir", str(sessions.dir), "run", "out", "--", "cat"]
    if stdout == "closed":
        done = subprocess.run(["sh", "-c", '"$@" >&-', "sh", *argv], capture_output=True, text=True, timeout=30)
    else:
        with open(stdout, "w") as full:
            done = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True, timeout=30)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    record = read_record(sessions.dir / "out.json")  # it did start, and the message says so where it can
    sessions.started.append(LaunchInfo(name="out", pid=record.shellper_pid, start_time=record.shellper_start_time,
                                       boot_id=record.boot_id, instance_id=record.instance_id, child_pid=None,
                                       socket=str(sessions.dir / "out.sock"), record=str(sessions.dir / "out.json"),
                                       log=str(sessions.dir / "out.log")))
    assert "cannot write the output" in done.stderr or f"started (pid {record.shellper_pid})" in done.stderr
    sessions.stop("out")


def test_status_and_ls_say_each_thing_once_and_no_uptime_for_the_dead(sessions: Sessions) -> None:
    """status printed "last exit: crash: crash: exit 5", counted its own connection as a client, and ls
    went on counting the uptime of a session whose shellper had been killed."""
    sessions.start("t4", ["sh", "-c", "exit 5"], policy=NO_RESTART)
    dead = sessions.start("k", ["cat"])
    with sessions.connect("t4", "viewer") as viewer:
        poll_until(lambda: status(viewer).state == "exited", what="the child to exit")
    shown = cli("--dir", str(sessions.dir), "status", "t4").stdout
    assert "  last exit: crash: exit 5 after" in shown and "crash: crash" not in shown, shown
    assert "  clients: 0" in shown, shown
    os.kill(dead.pid, signal.SIGKILL)
    assert wait_gone(dead.pid, 10)
    listed = cli("--dir", str(sessions.dir), "ls", "-l").stdout.splitlines()
    rows = {line.split()[0]: line.split() for line in listed if not line.startswith("+")}
    rows |= {line.split()[1]: line.split()[1:] for line in listed if line.startswith("+")}  # a finished one, marked
    assert rows["k"][1] == "stale" and rows["k"][4] == "-", rows["k"]  # UPTIME
    assert "crash: crash" not in " ".join(rows["t4"])
    sessions.stop("t4")
    assert cli("--dir", str(sessions.dir), "stop", "k").returncode == 0  # its files and cgroup, as a person would
    sessions.started.remove(dead)


def test_a_dead_sessions_status_shows_its_last_exit_from_the_record(sessions: Sessions) -> None:
    """The record's exits are typed ExitRecords in memory and their wire maps on disk and in --json."""
    info = sessions.start("gone", ["sh", "-c", "exit 5"], policy=NO_RESTART)
    with sessions.connect("gone", "viewer") as viewer:
        poll_until(lambda: status(viewer).state == "exited", what="the child to exit")
    os.kill(info.pid, signal.SIGKILL)
    assert wait_gone(info.pid, 10)
    shown = cli("--dir", str(sessions.dir), "status", "gone")
    assert shown.returncode == 1 and "\n  last exit: crash: exit 5 after" in shown.stdout, shown.stdout
    record = json.loads(cli("--dir", str(sessions.dir), "status", "gone", "--json").stdout)["record"]
    assert [(e["class"], e["code"], e["state"]) for e in record["exits"]] == [("crash", 5, "exited")]
    assert record["last_exit_at"] == record["exits"][0]["time"]
    assert cli("--dir", str(sessions.dir), "stop", "gone").returncode == 0
    sessions.started.remove(info)


def test_ls_refuses_a_directory_run_would_refuse_and_dir_must_not_be_empty(sessions: Sessions) -> None:
    """ls said "no sessions in DIR" of a mode-755 DIR (where run refuses to start any), and --dir '' meant
    the default directory, outside the one the user named."""
    os.chmod(sessions.dir, 0o755)
    try:
        done = cli("--dir", str(sessions.dir), "ls")
        assert done.returncode == 1 and "unsafe runtime directory" in done.stderr and not done.stdout, done
    finally:
        os.chmod(sessions.dir, 0o700)
    missing = sessions.dir / "not-yet"
    done = cli("--dir", str(missing), "ls")
    assert done.returncode == 0 and done.stdout.startswith("no sessions in"), done
    done = cli("--dir", "", "run", "x", "--", "cat")
    assert done.returncode == 2 and "--dir: must not be empty" in done.stderr, done


def test_send_to_a_session_without_a_running_program_fails(sessions: Sessions) -> None:
    """send used to exit 0 into an exited session (signal already said not_running)."""
    sessions.start("ex", ["true"], policy=NO_RESTART)
    with sessions.connect("ex", "viewer") as viewer:
        poll_until(lambda: status(viewer).state == "exited", what="the child to exit")
    done = cli("--dir", str(sessions.dir), "send", "ex", "hello", "--enter")
    assert done.returncode == 1 and "has no running program (state exited); nothing sent" in done.stderr, done
    sessions.stop("ex")


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--backoff-initial", "-1", "--backoff-initial -1.0: must be >= 0"),
    ("--breaker-count", "1e20", "--breaker-count 1e20: expected an integer"),
    ("--max-restarts", "", "--max-restarts : expected an integer"),
    ("--fatal-pattern", "(", "--fatal-pattern (: invalid regex"),
])
def test_restart_policy_errors_name_the_option_typed(sessions: Sessions, option: str, value: str, says: str) -> None:
    """They named the policy's field (backoff_initial=-1.0) and called 1e20 'not a number'."""
    done = cli("--dir", str(sessions.dir), "run", "x", option, value, "--", "cat")
    assert done.returncode == 1 and f"shellper: run: {says}" in done.stderr, done.stderr
    assert left_in(sessions.dir) == []


def test_timers_beyond_epoll_s_limit_neither_crash_nor_fire_early(sessions: Sessions) -> None:
    """epoll waits at most ~24.8 days (a C int of ms); a 30-day husk TTL or grace used to end the loop with
    OverflowError, leaving a stale session whose stop had said "stopped"."""
    month = 30 * 86400.0
    info = sessions.start("month", ["true"], husk_ttl=month, grace=month)
    with sessions.connect("month", "viewer") as viewer:
        poll_until(lambda: status(viewer).state == "exited", what="the child to exit into a husk")
        assert status(viewer).state == "exited"  # the loop still serves with the 30-day timer armed
    assert os.path.exists(f"/proc/{info.pid}")
    sessions.stop("month")
    assert left_in(sessions.dir) == []


def test_fds_do_not_grow_with_spawns_and_clients(sessions: Sessions) -> None:
    info = sessions.start("fd", ["cat"])
    fds = Path(f"/proc/{info.pid}/fd")

    def cycle() -> int:
        with sessions.connect("fd", "tower") as tower:
            tower.send(wire.Spawn(argv=["cat"]))
            recv_until(tower, wire.Event, where=lambda e: e.kind == "spawned")
            echo_roundtrip(tower, b"cycle")
            for role in ("terminal", "viewer"):
                with sessions.connect("fd", role):
                    pass
        with sessions.connect("fd", "viewer") as probe:  # the ones above are closed and forgotten
            poll_until(lambda: len(status(probe).info["clients"]) == 1, what="closed clients to go")
            return len(list(fds.iterdir()))

    baseline = cycle()
    for _ in range(4):
        assert cycle() == baseline
    sessions.stop("fd")


def test_sigusr1_rebuilds_a_removed_runtime_dir(sessions: Sessions) -> None:
    info = sessions.start("gone", ["cat"])
    settled(sessions.dir)  # a launcher exits when the directory goes; still starting, it could write in it
    with sessions.connect("gone", "terminal") as term:
        shutil.rmtree(sessions.dir)  # a cleaner took everything: socket, record, lock, log
        os.kill(info.pid, signal.SIGUSR1)
        poll_until(lambda: (sessions.dir / "gone.sock").exists() and (sessions.dir / "gone.json").exists(),
                   what="the socket and record to be back")
        assert (os.stat(sessions.dir).st_mode & 0o777) == 0o700
        assert SessionLock.is_locked(sessions.dir / "gone.lock")  # the name is taken again
        assert read_record(sessions.dir / "gone.json").instance_id == info.instance_id
        with pytest.raises(LaunchError, match="already running"):
            sessions.start("gone", ["cat"])
        sessions.started[:] = [info]
        echo_roundtrip(term, b"kept")
        with sessions.connect("gone", "viewer") as fresh:
            assert fresh.welcome is not None and fresh.welcome.instance_id == info.instance_id
    sessions.stop("gone")
