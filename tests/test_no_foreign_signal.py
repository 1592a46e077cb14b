"""The shellper's own signals reach its own processes only (issue 15: defects 5 and 6).

A pid or process-group number the shellper once saw may since belong to a stranger. These tests make
that happen on purpose (pid reuse forced through ns_last_pid in a private pid namespace, a foreground
group of the session that died) and check that the stranger is never signalled.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.sessions import files_in

REPO = str(Path(__file__).resolve().parent.parent)


def _in_pid_namespace(script: str, *args: str, timeout: float = 120) -> dict[str, object]:
    """Run ``script`` as pid 1 of a private pid namespace (its own /proc); its last stdout line is JSON.

    The namespace holds nothing but what the script starts, so ns_last_pid decides the next pid for sure.
    When pid 1 exits the kernel kills whatever is left in it: nothing outlives the test.
    """
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) not available")
    proc = subprocess.run(["unshare", "-Urpf", "--mount-proc", sys.executable, "-c", script, *args],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": REPO})
    if proc.returncode != 0 and "unshare" in proc.stderr.split(":")[0]:
        pytest.skip(f"unshare -Urpf does not work here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert isinstance(result, dict)
    return result


# ----------------------------------------------------------------------------- defect 5: tree teardown


def test_teardown_never_signals_a_recycled_pid_of_a_descendant(tmp_path: Path) -> None:
    """The worst moment, made to happen: /proc has just listed a grandchild D of the shellper when D dies,
    its parent reaps it and a stranger X (no relative of the shellper) gets D's pid. The teardown must end
    the session's tree and never signal X. The shellper (pid 2 of the namespace) runs the real server with
    one seam: shellper.host.reaper.children, which both the old snapshot (descendants()) and the new pinning
    walk call, performs the reuse right after listing D. On the old code X got the SIGTERM."""
    d = tmp_path / "run"
    d.mkdir(mode=0o700)
    result = _in_pid_namespace(_TEARDOWN_REUSE, str(d))
    assert result["hooked"], result  # the listing of D was seen and the reuse was attempted
    if not result["reused"]:
        pytest.skip(f"could not force pid reuse through ns_last_pid: {result}")
    assert result["stranger_signals"] == [], result
    assert result["stranger_alive"], result
    assert result["host_exit"] == 0 and result["session_left"] == [], result  # the real tree still ended
    assert files_in(d) in ([], ["logs"])  # logs/: the stopped session's log, kept by design


_TEARDOWN_REUSE = r"""
import json, os, select, signal, subprocess, sys, time

d = sys.argv[1]
PY = sys.executable
# C, the session's child: forks D, reaps it when it dies, then waits without forking again (a fork
# after the reaping could take the pid meant for the stranger).
CHILD = ("import os, signal\n"
         "pid = os.fork()\n"
         "if pid == 0:\n    signal.pause()\n    os._exit(0)\n"
         "os.waitpid(pid, 0)\n"
         "while True:\n    signal.pause()\n")
# X, the stranger: reports every signal it gets, one number a line.
STRANGER = ("import os, signal\n"
            "def h(n, f):\n    os.write(1, b'%d\\n' % n)\n"
            "for s in (signal.SIGTERM, signal.SIGCONT, signal.SIGHUP, signal.SIGINT, signal.SIGRTMIN):\n"
            "    signal.signal(s, h)\n"
            "os.write(1, b'ready\\n')\n"
            "while True:\n    signal.pause()\n")
deadline = time.monotonic() + 60


def wait_until(pred, what):
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.005)


def readline(fd):
    out = b""
    while not out.endswith(b"\n"):
        if not select.select([fd], [], [], max(0, deadline - time.monotonic()))[0]:
            raise SystemExit("timed out reading a line")
        chunk = os.read(fd, 1)
        if not chunk:
            break
        out += chunk
    return out.decode()


req_r, req_w = os.pipe()   # host -> pid 1: "make a stranger with this pid"
rep_r, rep_w = os.pipe()   # pid 1 -> host: done
info_r, info_w = os.pipe()  # host's stdout: the info line

host = os.fork()
if host == 0:
    try:
        os.dup2(info_w, 1)
        for fd in (req_r, rep_w, info_r, info_w):
            os.close(fd)
        import shellper.host.reaper as reaper
        from shellper.core.config import SessionConfig
        from shellper.host.identity import PidFd
        from shellper.daemon.foreground import run_foreground

        real_children = reaper.children
        me = os.getpid()
        hooked = []

        def children(pid):
            found = real_children(pid)
            if hooked or pid == me or not found:
                return found
            hooked.append(pid)  # /proc has listed D, a child of C: now D's pid goes to a stranger
            victim = found[0]
            with PidFd.open(victim) as fd:
                fd.send_signal(signal.SIGKILL)
            wait_until(lambda: not os.path.exists(f"/proc/{victim}"), "C to reap D")
            os.write(req_w, b"%d\n" % victim)
            os.read(rep_r, 1)
            return found

        reaper.children = children
        # containment "none": this is the fallback's teardown (a cgroup teardown lists no pids at all)
        config = SessionConfig(name="t", argv=[PY, "-c", CHILD], dir=d, cwd="/", env=dict(os.environ), grace=5.0,
                               containment="none")
        code = run_foreground(config)
    except BaseException as e:
        os.write(2, f"host: {e!r}\n".encode())
        code = 3
    os._exit(code)

for fd in (req_w, rep_r, info_w):
    os.close(fd)
info = json.loads(readline(info_r))
c = info["child_pid"]


def d_pids():
    try:
        with open(f"/proc/{c}/task/{c}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


wait_until(d_pids, "C to fork D")
os.kill(host, signal.SIGTERM)  # the shellper stops: its teardown lists C's children and meets the hook
request = readline(req_r)
hooked = bool(request)
victim = int(request) if request else 0
fd = os.open("/proc/sys/kernel/ns_last_pid", os.O_WRONLY)
os.write(fd, str(victim - 1).encode())  # os.write: a buffered write could hide an EPERM
os.close(fd)
x = subprocess.Popen([PY, "-c", STRANGER], stdout=subprocess.PIPE)
assert readline(x.stdout.fileno()) == "ready\n"
os.write(rep_w, b"k")
pidfd = os.pidfd_open(host)
select.select([pidfd], [], [], max(0, deadline - time.monotonic()))
os.close(pidfd)
_, status = os.waitpid(host, 0)
# A sentinel after the shellper is gone: a signal X got before it is reported before it.
x.send_signal(signal.SIGRTMIN)
got = []
while True:
    line = readline(x.stdout.fileno()).strip()
    if not line or int(line) == signal.SIGRTMIN:
        break
    got.append(int(line))
stranger_alive = x.poll() is None
left = [p for p in (c, victim) if p != x.pid and os.path.exists(f"/proc/{p}")
        and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]
x.kill()
x.wait()
print(json.dumps({"hooked": hooked, "reused": x.pid == victim, "victim": victim, "stranger": x.pid,
                  "stranger_signals": got, "stranger_alive": stranger_alive,
                  "host_exit": os.waitstatus_to_exitcode(status), "session_left": left}))
"""


def test_own_tree_keeps_only_what_proc_shows_under_a_pinned_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same check at unit level, injected: a listing that names a live non-descendant (our parent)
    next to a real child pins the child and never the stranger, nor the caller itself."""
    import shellper.host.reaper as reaper
    from shellper.host.reaper import OwnTree

    child = subprocess.Popen(["sleep", "30"])
    try:
        me, stranger = os.getpid(), os.getppid()
        real = reaper.children
        monkeypatch.setattr(reaper, "children", lambda pid: [*real(pid), stranger, me] if pid == me else real(pid))
        tree = OwnTree()
        try:
            pinned = tree.scan()
            assert child.pid in pinned and stranger not in pinned and me not in pinned
            assert child.pid in [fd.pid for fd in tree.alive()]
            assert not tree.signal_group(stranger, 0) and not tree.signal_group(me, 0)
            assert tree.scan() == []  # nothing new
        finally:
            tree.close()
    finally:
        child.kill()
        child.wait()


# ----------------------------------------------------------------------------- defect 6: RESIZE


def test_same_size_resize_signals_the_foreground_job_and_keeps_the_size_exact() -> None:
    """The kernel signals on any change of the winsize struct: a same-size resize changes ws_xpixel and
    sets it back, so the job gets SIGWINCH and the struct ends as it would after a plain resize."""
    import fcntl
    import struct
    import termios

    from shellper.host.child import build_env, close, resize, spawn_child

    counter = ("import os, signal\n"
               "n = 0\n"
               "def h(*_):\n    global n\n    n += 1\n    os.write(1, b'winch %d\\n' % n)\n"
               "signal.signal(signal.SIGWINCH, h)\n"
               "os.write(1, b'ready\\n')\n"
               "while True:\n    signal.pause()\n")
    c = spawn_child([sys.executable, "-c", counter], cwd=None, env=build_env(None, {}), cols=80, rows=24)
    try:
        _read_until(c.master_fd, b"ready\r\n")
        resize(c, 80, 24)
        _read_until(c.master_fd, b"winch 1\r\n")
        raw = fcntl.ioctl(c.master_fd, termios.TIOCGWINSZ, bytes(8))
        assert struct.unpack("HHHH", raw) == (24, 80, 0, 0)
    finally:
        close(c)
        os.waitpid(c.pid, 0)


def _read_until(fd: int, needle: bytes, timeout: float = 10.0) -> bytes:
    import select
    import time

    out = b""
    end = time.monotonic() + timeout
    while needle not in out:
        left = end - time.monotonic()
        assert left > 0, f"{needle!r} not seen; got {out!r}"
        if select.select([fd], [], [], left)[0]:
            out += os.read(fd, 4096)
    return out


def test_resize_never_signals_a_stranger_that_got_a_dead_foreground_group_s_number() -> None:
    """In a private pid namespace, a session child acts as a shell: it puts a job in a group of its own in
    the foreground, the job exits and is reaped, and the terminal's foreground group is left the dead one
    (tcgetpgrp() still reports its number). A stranger, outside the session, is then made to lead a group
    with that very number (ns_last_pid, setpgid). Resizes, to the same size and to another, must not signal
    the stranger: the kernel signals the terminal's real (dead, empty) group. The old killpg of
    tcgetpgrp()'s number gave the stranger SIGWINCH."""
    result = _in_pid_namespace(_STALE_FOREGROUND)
    assert result["stale_reported"], result  # the terminal still names the dead group: the old code's input
    if not result["reused"]:
        pytest.skip(f"could not give the stranger the dead group's number: {result}")
    assert result["stranger_signals"] == [], result
    assert result["winsize"] == [30, 100, 0, 0], result


_STALE_FOREGROUND = r"""
import fcntl, json, os, select, signal, struct, subprocess, sys, termios, time
from shellper.host.child import build_env, close, resize, spawn_child

PY = sys.executable
SHELL = ("import os, signal\n"
         "r, w = os.pipe()\n"
         "job = os.fork()\n"
         "if job == 0:\n    os.setpgid(0, 0)\n    os.close(w)\n    os.read(r, 1)\n    os._exit(0)\n"
         "os.setpgid(job, job)\n"  # both set it, as a shell does: no race with the tcsetpgrp below
         "os.tcsetpgrp(0, job)\n"
         "os.write(w, b'x')\n"
         "os.waitpid(job, 0)\n"
         "os.write(1, b'stale %d\\n' % job)\n"
         "while True:\n    signal.pause()\n")
STRANGER = ("import os, signal\n"
            "def h(n, f):\n    os.write(1, b'%d\\n' % n)\n"
            "for s in (signal.SIGWINCH, signal.SIGRTMIN):\n    signal.signal(s, h)\n"
            "os.write(1, b'ready\\n')\n"
            "while True:\n    signal.pause()\n")
deadline = time.monotonic() + 60


def read_line(fd, out=b""):
    while b"\n" not in out:
        if not select.select([fd], [], [], max(0, deadline - time.monotonic()))[0]:
            raise SystemExit(f"timed out; got {out!r}")
        chunk = os.read(fd, 1)
        if not chunk:
            break
        out += chunk
    return out.decode().strip()


c = spawn_child([PY, "-c", SHELL], cwd="/", env=build_env(None, {}), cols=80, rows=24, stderr_mode="merged")
line = read_line(c.master_fd)
stale = int(line.split()[1])
stale_reported = os.tcgetpgrp(c.master_fd) == stale
fd = os.open("/proc/sys/kernel/ns_last_pid", os.O_WRONLY)
os.write(fd, str(stale - 1).encode())  # os.write: a buffered write could hide an EPERM
os.close(fd)
x = subprocess.Popen([PY, "-c", STRANGER], stdout=subprocess.PIPE, process_group=0)
assert read_line(x.stdout.fileno()) == "ready"
reused = x.pid == stale and os.getpgid(x.pid) == stale
resize(c, 80, 24)
resize(c, 100, 30)
x.send_signal(signal.SIGRTMIN)  # a sentinel: a SIGWINCH sent before it is reported before it
got = []
while True:
    n = read_line(x.stdout.fileno())
    if not n or int(n) == signal.SIGRTMIN:
        break
    got.append(int(n))
winsize = list(struct.unpack("HHHH", fcntl.ioctl(c.master_fd, termios.TIOCGWINSZ, bytes(8))))
x.kill()
x.wait()
close(c)
os.waitpid(c.pid, 0)
print(json.dumps({"stale": stale, "stale_reported": stale_reported, "reused": reused, "stranger": x.pid,
                  "stranger_signals": got, "winsize": winsize}))
"""
