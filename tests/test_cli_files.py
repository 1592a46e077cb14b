"""What failed launches, killed writers and interrupted stops leave behind, and what the CLI says about it.

Driven through the real ``shellper`` and ``tower-client`` commands in subprocesses: record temp files a
kill -9 left, a launch on a really full filesystem (a small tmpfs, as root), ``stop`` when its
shellper is killed or stopped while stopping, a forked daemon-to-be that dies, symlinks at the log and
socket.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.paths import PY, REPO, SHELLPER_CLI
from support.processes import identity, is_dead, kill_verified, tree
from support.sessions import Sessions
from support.soak import scales
from support.waiting import poll_until, wait_gone

from shellper.client.blocking import Client
from shellper.client.launch import LaunchInfo, _log_tail
from shellper.client.sessions import probe_status
from shellper.host.identity import PidFd, ProcessIdentity, read_stat
from shellper.host.paths import record_temp_name, temp_file_session
from shellper.host.record import read_record

pytestmark = pytest.mark.kills_sessions

TOWER_CLI = [str(Path(PY).with_name("tower-client"))]


def shellper(d: Path, *args: str, env: dict[str, str] | None = None,
             timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SHELLPER_CLI, "--dir", str(d), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=env)


def reconcile_apply(d: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    registry = tmp / "registry.json"
    registry.write_text(json.dumps({"sessions": []}))
    return subprocess.run([*TOWER_CLI, "--dir", str(d), "reconcile", "--registry", str(registry), "--apply",
                           "--grace", "0.5"], capture_output=True, text=True, timeout=60, cwd=REPO)


def files_of(d: Path, name: str) -> list[str]:
    """Every entry of ``d`` that belongs to session ``name``, by name (temp files included)."""
    return sorted(p.name for p in d.iterdir() if p.name.startswith((f"{name}.", f".{name}.json.")))


def one_line(text: str) -> bool:
    return text.count("\n") == 1 and "Traceback" not in text


# --------------------------------------------------------------------------------------------- 15a: temp files

_WRITER = """
import os, signal, sys
from shellper.host.record import SessionRecord, write_record

def stuck(fd):  # the data is written; the kill -9 lands before the fsync and the rename
    os.write(1, b"writing\\n")
    signal.pause()

os.fsync = stuck
rec = SessionRecord(name=sys.argv[2], boot_id="b", shellper_pid=os.getpid(), shellper_start_time=1,
                    instance_id="i", command=["sleep"], cwd="/", socket="")
write_record(os.path.join(sys.argv[1], sys.argv[2] + ".json"), rec)
"""


def killed_writer_leftover(d: Path, name: str) -> Path:
    """A real record write (shellper.host.record.write_record) kill -9'ed in the middle: its temp file stays."""
    proc = subprocess.Popen([PY, "-c", _WRITER, str(d), name], stdout=subprocess.PIPE, cwd=REPO)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"writing\n"
        proc.kill()
    finally:
        proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()
    left = [p for p in d.iterdir() if p.name.startswith(f".{name}.json.{proc.pid}.")]
    assert len(left) == 1 and left[0].name.endswith(".tmp") and left[0].stat().st_size > 0, left
    return left[0]


@pytest.mark.parametrize("name", ["a", "a.json", "x-1.2_y"])
def test_the_temp_name_the_writer_uses_is_the_one_recognised(name: str) -> None:
    made = record_temp_name(f"{name}.json")
    assert made.startswith(f".{name}.json.{os.getpid()}.") and temp_file_session(made) == name


@pytest.mark.parametrize("file_name", [
    "x.json.123.deadbeef.tmp",  # not hidden
    ".x.json.123.deadbeef.tmp.1", ".x.json.123.deadbeef.tmpx", ".x.json.123.deadbeef",
    ".x.json.123.DEADBEEF.tmp", ".x.json.123.deadbee.tmp", ".x.json.123.deadbeef0.tmp",
    ".x.json.0123.deadbeef.tmp", ".x.json.-1.deadbeef.tmp", ".x.json.12a.deadbeef.tmp", ".x.json..deadbeef.tmp",
    ".x.json.\u0661\u0662.deadbeef.tmp",  # Arabic-Indic digits: isdigit() says yes
    ".x.log.123.deadbeef.tmp", ".json.123.deadbeef.tmp", "..x.json.123.deadbeef.tmp", ".-x.json.123.deadbeef.tmp",
])
def test_only_exactly_the_writers_pattern_counts(file_name: str) -> None:
    assert temp_file_session(file_name) is None


def test_stop_removes_the_temp_file_a_killed_writer_left_beside_a_killed_session(sessions: Sessions) -> None:
    info = sessions.start("kw", ["sleep", "300"])
    leftover = killed_writer_leftover(sessions.dir, "kw")
    shellper_id = identity(info.pid)
    os.kill(info.pid, signal.SIGKILL)  # our own shellper
    poll_until(lambda: is_dead(shellper_id), what="the shellper to die")
    done = shellper(sessions.dir, "stop", "kw", "--grace", "0.5")
    assert done.returncode == 0, done.stderr
    assert not leftover.exists() and files_of(sessions.dir, "kw") == []


@pytest.mark.parametrize("how", ["stop", "reconcile"])
def test_a_session_with_only_a_temp_file_left_is_seen_and_cleaned(sessions: Sessions, tmp_path: Path,
                                                                   how: str) -> None:
    leftover = killed_writer_leftover(sessions.dir, "only")
    listed = shellper(sessions.dir, "ls", "--json")
    assert [(s["name"], s["state"]) for s in json.loads(listed.stdout)] == [("only", "stale")], listed.stderr
    done = shellper(sessions.dir, "stop", "only") if how == "stop" else reconcile_apply(sessions.dir, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not leftover.exists() and files_of(sessions.dir, "only") == []


def test_what_only_looks_like_a_temp_file_is_never_touched(sessions: Sessions, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    d = sessions.dir
    (d / ".lk.json.123.deadbeef.tmp").symlink_to(victim)  # the pattern, but a symlink
    (d / ".lk.json.456.deadbeef.tmp").mkdir()  # the pattern, but a directory
    near = [".lk.json.123.DEADBEEF.tmp", ".lk.json.0123.deadbeef.tmp", "lk.json.123.deadbeef.tmp",
            ".lk.json.123.deadbeef.tmp.bak"]
    for n in near:
        (d / n).write_text("not a temp file of lk\n")
    assert json.loads(shellper(d, "ls", "--json").stdout) == []  # none of them makes a session
    real = killed_writer_leftover(d, "lk")
    for done in (shellper(d, "stop", "lk"), reconcile_apply(d, tmp_path)):
        assert done.returncode == 0, done.stdout + done.stderr
    assert not real.exists()
    assert (d / ".lk.json.123.deadbeef.tmp").is_symlink() and victim.read_text() == "precious\n"
    assert (d / ".lk.json.456.deadbeef.tmp").is_dir()
    assert all((d / n).read_text() == "not a temp file of lk\n" for n in near)
    shutil.rmtree(d / ".lk.json.456.deadbeef.tmp")


# --------------------------------------------------------------------------------------------- 15b: full disk


@pytest.fixture
def full_fs() -> Iterator[Path]:
    """A runtime directory on a 64 KiB tmpfs with no byte free (a file fills the rest); unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("needs root: mounting a small tmpfs is how this test gets a really full filesystem")
    base = Path(tempfile.mkdtemp(prefix="fs-", dir="/tmp"))
    mount = base / "m"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        shutil.rmtree(base)
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip() or made.returncode}")
    try:
        run_dir = mount / "run"
        run_dir.mkdir(mode=0o700)
        yield run_dir
    finally:
        unmount(mount)
        shutil.rmtree(base)


def unmount(mount: Path) -> None:
    """umount, retried for a while: anything on the machine that looks into the directory for a moment
    (another process walking /tmp) makes it "busy". Lazily, and the test fails, if it stays busy."""
    deadline = time.monotonic() + 10.0
    while subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
        if time.monotonic() > deadline:
            subprocess.run(["umount", "-l", str(mount)], check=True)
            pytest.fail(f"{mount} stayed busy for 10 s: unmounted lazily")
        time.sleep(0.1)


def fill(run_dir: Path) -> None:
    """Write into the filesystem until it refuses: ENOSPC."""
    chunk = b"\0" * 4096
    with open(run_dir.parent / "fill", "wb", buffering=0) as f, pytest.raises(OSError) as caught:
        while True:
            f.write(chunk)
    assert caught.value.errno == errno.ENOSPC


@pytest.mark.parametrize("foreground", [False, True])
def test_a_launch_on_a_full_disk_says_so_and_leaves_nothing(full_fs: Path, foreground: bool) -> None:
    fill(full_fs)
    done = shellper(full_fs, "run", *(["--foreground"] if foreground else []), "full", "--", "sleep", "300")
    assert done.returncode == 1 and one_line(done.stderr), done.stderr
    assert f"session lock {full_fs}/full.lock: cannot write to it: No space left on device" in done.stderr
    assert "the filesystem is full: free some space" in done.stderr
    assert files_of(full_fs, "full") == []
    # the daemon-to-be reports its failure, then exits: it may take a moment
    poll_until(lambda: not [p for p in os.listdir("/proc") if p.isdigit() and _runs_in(int(p), full_fs)],
               what="the failed launch's processes to exit")


def _runs_in(pid: int, d: Path) -> bool:
    """A shellper process for ``d`` (the CLI names the directory in its argv)."""
    with contextlib.suppress(OSError):
        return os.fsencode(str(d)) in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return False


@pytest.mark.parametrize("how", ["stop", "reconcile"])
@pytest.mark.parametrize("left", [("lock",), ("log",), ("lock", "log")])
def test_a_lock_and_log_left_on_a_full_disk_are_cleaned(full_fs: Path, tmp_path: Path, how: str,
                                                        left: tuple[str, ...]) -> None:
    """What the old launch left on a full disk: NAME.lock and/or NAME.log, the lock free."""
    for suffix in left:
        (full_fs / f"gone.{suffix}").write_bytes(b"")
    fill(full_fs)
    done = shellper(full_fs, "stop", "gone") if how == "stop" else reconcile_apply(full_fs, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert files_of(full_fs, "gone") == []


# --------------------------------------------------------------------------------------------- 16: stop


_IGNORES_TERM = ("import signal, subprocess\n"
                 "signal.signal(signal.SIGTERM, signal.SIG_IGN)  # and so does the sleep (inherited)\n"
                 "signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what ignores SIGTERM is hung up first\n"
                 "subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
                 "signal.pause()\n")


@contextlib.contextmanager
def stopping_session(sessions: Sessions, name: str) -> Iterator[tuple[LaunchInfo, ProcessIdentity,
                                                                      subprocess.Popen[str]]]:
    """Session ``name`` whose tree ignores TERM (a setsid'd sleep in it), and a `shellper stop` with a 60 s
    grace that has begun: (info, the sleep, the stop command), which is ended on the way out."""
    info = sessions.start(name, [PY, "-c", _IGNORES_TERM])
    sleep = poll_until(lambda: next((m for m in tree(info.pid) if (st := read_stat(m.pid)) is not None
                                     and st.comm == "sleep"), None), what="the setsid'd sleep")
    sessions.track(sleep)
    stop = subprocess.Popen([*SHELLPER_CLI, "--dir", str(sessions.dir), "stop", name, "--grace", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        poll_until(lambda: read_record(sessions.dir / f"{name}.json").state == "stopping",
                   what="the stop to begin")
        yield info, sleep, stop
    finally:
        if stop.poll() is None:
            stop.kill()
            stop.communicate()


def test_stop_fails_when_its_shellper_is_killed_while_stopping(sessions: Sessions) -> None:
    """The connection ends because the shellper was SIGKILLed in its stop grace: its files and a
    grandchild are left. `stop` said "stopped" (exit 0); it now says what is left, and a second stop
    ends the grandchild and removes the files."""
    with stopping_session(sessions, "k") as (info, sleep, stop):
        os.kill(info.pid, signal.SIGKILL)  # our own shellper, mid-stop
        out, err = stop.communicate(timeout=60)
    assert stop.returncode == 1 and out == "" and one_line(err), (out, err)
    assert f"its shellper (pid {info.pid}) died before it finished stopping" in err, err
    assert f"files left in {sessions.dir}: k.sock, k.json, k.lock, k.log" in err, err
    running = re.search(r"processes it started still running: ([\d, ]+)", err)
    assert running and str(sleep.pid) in running[1].split(", "), err  # the child may not have died yet either
    assert "run `shellper stop k` again" in err, err
    again = shellper(sessions.dir, "stop", "k", "--grace", "0.5")
    assert again.returncode == 0, again.stderr
    assert is_dead(sleep) and files_of(sessions.dir, "k") == []


_FLOOD_ON_ENTER = ("import signal, sys\n"
                   "sys.stdin.readline()\n"
                   "sys.stdout.write('x' * 3_000_000); sys.stdout.flush()\n"
                   "signal.pause()\n")


@contextlib.contextmanager
def stop_lingering(sessions: Sessions, name: str) -> Iterator[int]:
    """A session whose shellper, once asked to stop, lingers ~2 s after closing the `stop` connection:
    a viewer that stopped reading mid-flood has its EXIT still queued, and the shellper gives it up to 2 s
    before it removes its files and exits. Yields the shellper's pid."""
    info = sessions.start(name, [PY, "-c", _FLOOD_ON_ENTER])
    stalled = Client(sessions.dir / f"{name}.sock", "viewer", client_name="stalled", timeout=10)
    stalled.connect(replay_bytes=0)
    try:
        sent = shellper(sessions.dir, "send", name, "go", "--enter")
        assert sent.returncode == 0, sent.stderr

        def flooded() -> bool:
            reply = probe_status(sessions.dir / f"{name}.sock")
            return reply is not None and reply.info["ring_end"] >= 3_000_000

        poll_until(flooded, 30, what="the flood to be read")
        yield info.pid
    finally:
        stalled.close()


def test_stop_returns_only_once_the_shellper_has_exited_and_its_files_are_gone(sessions: Sessions) -> None:
    """`stop` printed "stopped" as soon as the connection closed, while the shellper still had files."""
    with stop_lingering(sessions, "lg") as pid:
        done = shellper(sessions.dir, "stop", "lg")
        assert done.returncode == 0 and done.stdout == "stopped lg\n", done.stderr
        assert files_of(sessions.dir, "lg") == [] and wait_gone(pid, 0)


def drop_connections_of(shellper_pid: int, peer: int) -> int:
    """Shut down, from outside, the shellper's connections to ``peer``: a copy of each socket fd is taken
    with pidfd_getfd (root) and shut down, which ends the connection for both ends. Returns how many."""
    libc = ctypes.CDLL(None, use_errno=True)
    dropped = 0
    with PidFd.open(shellper_pid) as pidfd:
        for entry in os.listdir(f"/proc/{shellper_pid}/fd"):
            try:
                if not os.readlink(f"/proc/{shellper_pid}/fd/{entry}").startswith("socket:"):
                    continue
            except FileNotFoundError:  # closed meanwhile
                continue
            copy = libc.syscall(_SYS_PIDFD_GETFD, pidfd.fileno(), int(entry), 0)
            if copy < 0:
                raise OSError(ctypes.get_errno(), f"pidfd_getfd of fd {entry} of pid {shellper_pid}")
            with socket.socket(fileno=copy) as sock, contextlib.suppress(OSError):
                creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
                if struct.unpack("3i", creds)[0] == peer:
                    sock.shutdown(socket.SHUT_RDWR)
                    dropped += 1
    return dropped


_SYS_PIDFD_GETFD = 438  # the same number on every architecture (added after the tables were unified)


def test_stop_fails_when_its_connection_ends_while_the_shellper_is_stopped(sessions: Sessions) -> None:
    """The shellper is SIGSTOPped in its stop grace and the `stop` command's connection ends: `stop` said
    "stopped" (exit 0); it now waits for the shellper to exit, then says it is stopped and what to do.
    Doing what it says (kill -KILL, stop again) ends everything and removes the files."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the connection is ended from outside with pidfd_getfd")
    with stopping_session(sessions, "st") as (info, sleep, stop):
        os.kill(info.pid, signal.SIGSTOP)  # our own shellper, mid-stop
        assert drop_connections_of(info.pid, stop.pid) == 1
        out, err = stop.communicate(timeout=60)
    assert stop.returncode == 1 and out == "" and one_line(err), (out, err)
    assert "stop: session 'st': the connection ended but the shellper did not exit" in err, err
    assert f"its shellper (pid {info.pid}) is stopped (SIGSTOP)" in err and f"`kill -CONT {info.pid}`" in err, err
    assert f"files left in {sessions.dir}: st.sock, st.json, st.lock, st.log" in err, err
    assert f"`kill -KILL {info.pid}`, then `shellper stop st`" in err, err
    os.kill(info.pid, signal.SIGKILL)  # as it says (our own shellper)
    again = shellper(sessions.dir, "stop", "st", "--grace", "0.5")
    assert again.returncode == 0, again.stderr
    assert is_dead(sleep) and files_of(sessions.dir, "st") == []


# --------------------------------------------------------------------------------------------- 16: errors


@pytest.mark.parametrize("extra", [[], ["--env", "K=V"]], ids=["forked", "spawned"])
def test_run_says_so_in_one_line_when_the_forked_daemon_to_be_dies(sessions: Sessions, tmp_path: Path,
                                                                   extra: list[str]) -> None:
    """The process `shellper run` starts early to become the shellper (forked, or spawned for an --env) is
    killed before it gets the config: a BrokenPipeError traceback; now one line naming the session and its
    log."""
    (tmp_path / "sitecustomize.py").write_text(
        "import os, signal\n"
        "from shellper.daemon import prefork\n"
        "_start = prefork.Prefork.start.__func__\n"
        "def start(cls, *args, **kwargs):\n"
        "    forked = _start(cls, *args, **kwargs)\n"
        "    os.kill(forked.pid, signal.SIGKILL)  # dead (not reaped) before the CLI writes the config\n"
        "    os.waitid(os.P_PID, forked.pid, os.WEXITED | os.WNOWAIT)\n"
        "    return forked\n"
        "prefork.Prefork.start = classmethod(start)\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = shellper(sessions.dir, "run", "pf", *extra, "--", "sleep", "300", env=env)
    assert done.returncode == 1 and done.stdout == "" and one_line(done.stderr), done.stderr
    assert done.stderr.startswith("shellper: session 'pf' did not start: the process started to become its "
                                  "shellper died before it got its config (killed by SIGKILL)")
    assert f"{sessions.dir}/pf.log" in done.stderr
    assert files_of(sessions.dir, "pf") == []


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret"
    path.write_text("line one\nTOP-SECRET-CONTENT\n")
    return path


def test_a_symlinked_log_is_refused_by_name_and_never_read(sessions: Sessions, secret: Path) -> None:
    log = sessions.dir / "sl.log"
    log.symlink_to(secret)
    done = shellper(sessions.dir, "run", "sl", "--", "sleep", "300")
    assert done.returncode == 1 and one_line(done.stderr), done.stderr
    assert "TOP-SECRET" not in done.stderr
    assert f"session log {log}: cannot open it: Too many levels of symbolic links; it is a symlink" in done.stderr
    assert log.is_symlink() and files_of(sessions.dir, "sl") == ["sl.log"]
    log.unlink()


def test_the_log_tail_of_a_failed_launch_is_read_without_following_links(tmp_path: Path, secret: Path) -> None:
    log = tmp_path / "x.log"
    log.symlink_to(secret)
    assert _log_tail(str(log)) == ""
    log.unlink()
    os.mkfifo(log)  # nobody writes it: a blocking open would hang
    assert _log_tail(str(log)) == ""
    log.unlink()
    log.write_text("".join(f"line {i}\n" for i in range(100_000)))
    assert _log_tail(str(log)) == ": line 99995 | line 99996 | line 99997 | line 99998 | line 99999"


def test_a_symlinked_socket_is_named_with_what_to_do(sessions: Sessions, secret: Path) -> None:
    sock = sessions.dir / "ss.sock"
    sock.symlink_to(secret)
    run = shellper(sessions.dir, "run", "ss", "--", "sleep", "300")
    assert run.returncode == 1 and one_line(run.stderr), run.stderr
    assert run.stderr == (f"shellper: session socket {sock}: a symlink is in the way; shellper never follows, "
                          "replaces or removes anything but a stale socket there: remove it\n")
    for command in (["status", "ss"], ["attach", "ss"], ["send", "ss", "x"]):
        done = shellper(sessions.dir, *command)
        assert done.returncode == 1 and one_line(done.stderr), (command, done.stderr)
        assert f"session 'ss': {sock}: is a symlink, not a session socket" in done.stderr, (command, done.stderr)
    stop = shellper(sessions.dir, "stop", "ss")
    assert stop.returncode == 1 and one_line(stop.stderr), stop.stderr
    assert f"left in {sessions.dir}: ss.sock (a symlink), which shellper never removes" in stop.stderr
    assert sock.is_symlink() and files_of(sessions.dir, "ss") == ["ss.sock"]
    sock.unlink()


def test_a_stale_socket_says_where_and_what_to_do(sessions: Sessions) -> None:
    info = sessions.start("dead", ["sleep", "300"])
    kill_verified(identity(info.pid))
    done = shellper(sessions.dir, "tail", "dead")
    assert done.returncode == 1 and one_line(done.stderr), done.stderr
    assert done.stderr == (f"shellper: session 'dead': {sessions.dir}/dead.sock: nothing is listening (stale "
                           "socket); its shellper is gone: `shellper stop dead` ends what it left running and "
                           "removes its files\n")
    assert shellper(sessions.dir, "stop", "dead").returncode == 0 and files_of(sessions.dir, "dead") == []


def test_a_fifo_at_the_log_neither_hangs_a_launch_nor_is_removed(sessions: Sessions) -> None:
    """A FIFO at NAME.log: the launch must not hang opening it, and says it is not a regular file."""
    d = sessions.dir
    os.mkfifo(d / "ff.log")
    done = shellper(d, "run", "ff", "--", "sleep", "300", timeout=30)
    assert done.returncode == 1 and one_line(done.stderr), done.stderr
    assert f"session log {d}/ff.log: cannot open it: not a regular file" in done.stderr
    assert stat.S_ISFIFO(os.lstat(d / "ff.log").st_mode) and files_of(d, "ff") == ["ff.log"]


@scales(5, 40)
def test_run_replace_racing_stop_on_a_husk_always_starts_the_new_session(sessions: Sessions, scale: int) -> None:
    """Issue 27, defect 11: `run --replace p1` racing `stop p1` on a husk failed 1 time in 10 (the stop closed
    the connection its status request was on, or its tower connection was replaced by the stop's, or launch
    found the old lock still held) and started nothing. Now run waits for a husk someone else is stopping,
    and every round starts the new session. The racing stop says it stopped p1 (the husk, or the new
    session if it came second), or that there was no such session between the two. Rounds of the race: 5 here
    (before the fix about half of the rounds failed), 40 in `make soak`; the husk is awaited in its record,
    not through a `status` process per poll."""
    d = sessions.dir
    for _ in range(scale):
        assert shellper(d, "run", "p1", "--restart", "no", "--", "sh", "-c", "exit 0").returncode == 0
        poll_until(lambda: read_record(d / "p1.json").state == "exited", 30, what="p1 to be a husk")
        base = [*SHELLPER_CLI, "--dir", str(d)]
        stop = subprocess.Popen([*base, "stop", "p1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=REPO)
        run = subprocess.Popen([*base, "run", "--replace", "p1", "--", "sleep", "300"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=REPO)
        run_out, run_err = run.communicate(timeout=60)
        stop_out, stop_err = stop.communicate(timeout=60)
        assert run.returncode == 0 and run_out.startswith("started p1 "), (run_out, run_err, stop_out, stop_err)
        assert (stop.returncode == 0 and stop_out.startswith("stopped p1")) or (
            stop.returncode == 1 and "no such session socket" in stop_err), (stop_out, stop_err, run_out)
        if (d / "p1.sock").exists():
            done = shellper(d, "stop", "p1")
            assert done.returncode == 0, done.stderr
        assert files_of(d, "p1") == []


def test_the_hint_for_a_name_without_a_socket_never_suggests_that_name(sessions: Sessions) -> None:
    """The "did you mean 'p1'?" hint suggested the name typed itself when p1 had files but no socket (a
    session starting or stopping)."""
    (sessions.dir / "p1.log").write_text("")
    (sessions.dir / "other.log").write_text("")
    done = shellper(sessions.dir, "send", "p1", "x")
    assert done.returncode == 1
    assert "did you mean" not in done.stderr and "starting or stopping" in done.stderr, done.stderr
    typo = shellper(sessions.dir, "send", "p11", "x")
    assert "did you mean 'p1'?" in typo.stderr, typo.stderr
