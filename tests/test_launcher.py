"""The warm launcher (shellper.daemon.launcher): a session it forks is a cold one's equal, and nothing else.

Real processes throughout: a launcher per test in a runtime directory of the test's own, which the test
removes at its end (the launcher exits on that: inotify), then waits for the launcher's pid to be gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.frames import read_until
from support.paths import SHELLPER_CLI
from support.sessions import Sessions
from support.waiting import poll_until, wait_gone

from shellper.client import warm
from shellper.client.launch import LaunchInfo
from shellper.host import warmstart
from shellper.host.identity import read_stat

NOBODY = 65534


class WarmDir(Sessions):
    """Sessions in a runtime directory of their own, with the launcher on; every launcher seen is waited out."""

    launchers: set[int]

    def launcher_pid(self) -> int | None:
        try:
            about = json.loads((self.dir / warmstart.LOCK_NAME).read_text())
        except (OSError, ValueError):
            return None
        pid = about.get("pid")
        if isinstance(pid, int) and read_stat(pid) is not None:
            self.launchers.add(pid)
            return pid
        return None

    def listening(self) -> int | None:
        """The launcher's pid once its socket accepts (a connect that the launcher then sees as empty)."""
        pid = self.launcher_pid()
        if pid is None:
            return None
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.connect(str(self.dir / warmstart.SOCKET_NAME))
            return pid
        return None

    def ensure_launcher(self, *, other: int | None = None) -> int:
        if self.listening() in (None, other):
            warm.start_launcher(str(self.dir))
        pid = poll_until(lambda: (p := self.listening()) not in (None, other) and p, what="a launcher listening")
        assert isinstance(pid, int)
        return pid


@pytest.fixture
def wd(monkeypatch: pytest.MonkeyPatch) -> Iterator[WarmDir]:
    monkeypatch.setenv(warmstart.LAUNCHER_ENV, "on")
    warm._logged.clear()
    warm._started.clear()
    directory = Path(tempfile.mkdtemp(prefix="spw-", dir="/tmp"))
    os.chmod(directory, 0o700)
    s = WarmDir(directory)
    s.launchers = set()
    try:
        yield s
    finally:
        s.launcher_pid()
        for info in s.started:
            if not wait_gone(info.pid, 0):
                with contextlib.suppress(Exception):
                    s.stop(info.name, grace=1.0)
        shutil.rmtree(directory, ignore_errors=True)
        left = [pid for pid in s.launchers if not wait_gone(pid, 10)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(directory, ignore_errors=True)
        _remove_killed_launchers_cgroup(directory)
        assert not left, f"launcher {left} did not exit when its runtime directory was removed"


def _remove_killed_launchers_cgroup(directory: Path) -> None:
    """The empty cgroup a launcher killed with SIGKILL leaves (the next launcher of its directory would reuse it)."""
    from support.run import CGROUP_PARENT

    from shellper.host.launchercgroup import leaf_name

    if CGROUP_PARENT is not None:
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(os.path.join(CGROUP_PARENT, leaf_name(str(directory))))


def is_warm(info: LaunchInfo) -> bool:
    """Forked by the launcher: its command line is the launcher's (a cold one's is ``shellper.daemon``)."""
    return b"shellper.daemon.launcher" in Path(f"/proc/{info.pid}/cmdline").read_bytes()


def echoes(s: Sessions, name: str, text: bytes) -> None:
    with s.connect(name) as client:
        client.write(text + b"\n")
        read_until(client, text + b"\r\n")


def test_warm_session_runs_attaches_and_stops_like_a_cold_one(wd: WarmDir) -> None:
    launcher = wd.ensure_launcher()
    info = wd.start("w", ["cat"])
    assert is_warm(info)
    stat = read_stat(info.pid)
    assert stat is not None and stat.ppid != launcher, "the session must not be the launcher's child"
    echoes(wd, "w", b"warm-ping")
    env = {**os.environ, warmstart.LAUNCHER_ENV: "on"}
    run = subprocess.run([*SHELLPER_CLI, "--dir", str(wd.dir), "run", "--json", "c", "--", "cat"], env=env,
                         capture_output=True, timeout=30, check=True)
    cli_info = LaunchInfo.from_dict(json.loads(run.stdout))
    wd.started.append(cli_info)
    assert is_warm(cli_info)
    echoes(wd, "c", b"cli-ping")
    subprocess.run([*SHELLPER_CLI, "--dir", str(wd.dir), "stop", "c"], env=env, capture_output=True, timeout=30,
                   check=True)
    assert wait_gone(cli_info.pid)
    wd.stop("w")


def test_session_survives_kill_9_of_the_launcher_and_a_new_one_takes_over(wd: WarmDir) -> None:
    launcher = wd.ensure_launcher()
    about = warmstart.launcher_status(str(wd.dir))
    assert about is not None and about["pid"] == launcher and about["current"] is True
    info = wd.start("k", ["cat"])
    assert is_warm(info)
    os.kill(launcher, signal.SIGKILL)
    assert wait_gone(launcher)
    assert warmstart.launcher_status(str(wd.dir)) is None, "a killed launcher's lock file is not a launcher"
    echoes(wd, "k", b"after-kill")
    cold = wd.start("k2", ["cat"])  # its socket refuses: a cold start, and a new launcher for the next one
    assert not is_warm(cold)
    wd.ensure_launcher(other=launcher)
    again = wd.start("k3", ["cat"])
    assert is_warm(again)
    for name in ("k", "k2", "k3"):
        echoes(wd, name, name.encode())
        wd.stop(name)


def _status(pid: int, field: str) -> str:
    text = Path(f"/proc/{pid}/status").read_text()
    found = re.search(rf"^{field}:\s*(\S+)", text, re.M)
    assert found, field
    return found.group(1)


def _fds(pid: int, name: str) -> Counter[str]:
    """What ``pid`` holds open, by kind: numbers of sockets, pipes and inodes, and the session's name, out."""
    kinds: Counter[str] = Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            kinds[re.sub(r"\[\d+\]", "[]", target.replace(f"/{name}.", "/NAME.")).replace("/dev/pts/", "pts")
                  .rstrip("0123456789")] += 1
    return kinds


def _cgroup(pid: int) -> str:
    return re.sub(r"[0-9a-f]{12}\.[0-9a-f]{12}\.[^./]+\.[0-9a-f]{32}", "LEAF", Path(f"/proc/{pid}/cgroup").read_text())


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode(errors="replace").partition("=")[::2] for e in raw if e)


def test_nothing_of_the_launcher_leaks_into_a_session(wd: WarmDir, monkeypatch: pytest.MonkeyPatch) -> None:
    # A launcher started by hand with everything a careless spawner could leave it: an environment variable,
    # an inherited descriptor, a blocked signal and an ignored one.
    keep_r, keep_w = os.pipe()
    os.set_inheritable(keep_w, True)
    old = signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    try:
        subprocess.run([sys.executable, "-m", warm.LAUNCHER_MODULE, str(wd.dir)], env={**os.environ, "LEAK_MARK": "1"},
                       pass_fds=(keep_w,), start_new_session=True, check=True, timeout=30,
                       preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2}))
    finally:
        signal.signal(signal.SIGUSR1, old)
        os.close(keep_w)
    try:
        launcher = wd.ensure_launcher()
        warm_info = wd.start("w", ["cat"])
        assert is_warm(warm_info)
        monkeypatch.setenv(warmstart.LAUNCHER_ENV, "off")
        cold_info = wd.start("c", ["cat"])
        assert not is_warm(cold_info)
        for info in (warm_info, cold_info):  # the shellper moves into its cgroup just after it reports ready
            if info.containment == "cgroup":
                poll_until(lambda i=info: "/LEAF/shellper\n" in _cgroup(i.pid), what="the shellper in its cgroup")
        for w, c in ((warm_info.pid, cold_info.pid), (warm_info.child_pid, cold_info.child_pid)):
            assert w is not None and c is not None
            for field in ("SigBlk", "SigIgn", "SigCgt"):
                assert _status(w, field) == _status(c, field), (field, w, c)
            assert _cgroup(w) == _cgroup(c)
            assert "LEAK_MARK" not in _environ(w)
        # A shellper holds its cgroup's cgroup.procs open for a moment as it moves in: wait until both settle.
        with contextlib.suppress(pytest.fail.Exception):
            poll_until(lambda: _fds(warm_info.pid, "w") == _fds(cold_info.pid, "c"), timeout=5, what="")
        assert _fds(warm_info.pid, "w") == _fds(cold_info.pid, "c")
        assert _fds(warm_info.child_pid or 0, "w") == _fds(cold_info.child_pid or 0, "c")
        assert set(_environ(warm_info.child_pid or 0)) == set(_environ(cold_info.child_pid or 0))
        stat = read_stat(warm_info.pid)
        assert stat is not None and stat.ppid != launcher
        children = "".join(p.read_text() for p in Path(f"/proc/{launcher}/task").glob("*/children"))
        assert children.split() == [], "the launcher keeps no child"
        assert _status(launcher, "SigBlk") == "0000000000000000"
        assert "LEAK_MARK" not in _environ(launcher)
        assert len(os.listdir(f"/proc/{launcher}/fd")) == 3 + 3  # stdio; its lock, inotify and listener
    finally:
        os.close(keep_r)
        for info in wd.started:
            wd.stop(info.name)


def test_a_stale_launcher_is_replaced_never_used(wd: WarmDir) -> None:
    subprocess.run([sys.executable, "-m", warm.LAUNCHER_MODULE, str(wd.dir), "--stamp", "0-stale"],
                   start_new_session=True, check=True, timeout=30)
    stale = wd.ensure_launcher()
    info = wd.start("s", ["cat"])
    assert not is_warm(info)
    assert wait_gone(stale), "a stale launcher exits once a caller finds it so"
    fresh = wd.ensure_launcher(other=stale)
    about = json.loads((wd.dir / warmstart.LOCK_NAME).read_text())
    assert about["pid"] == fresh and about["stamp"] == warmstart.package_stamp()
    again = wd.start("s2", ["cat"])
    assert is_warm(again)
    wd.stop("s")
    wd.stop("s2")


def test_a_launcher_whose_code_changes_on_disk_exits(wd: WarmDir, tmp_path: Path) -> None:
    """A launcher watches its package's directories: a module written (or touched, added, removed) after it
    started means a caller may run other code than it holds, so it exits at once, its files with it. The caller
    sends only warmstart.code_identity() (no walk of the package); this is what keeps that exact."""
    import shellper

    copy = tmp_path / "pkg"
    shutil.copytree(Path(shellper.__file__).parent, copy / "shellper")
    # the run's cgroup parent too: without it a launcher run as root would make the machine's default one
    env = {"PYTHONPATH": str(copy), **{k: v for k, v in os.environ.items() if k == "SHELLPER_CGROUP_PARENT"}}
    for change in ("written", "added"):
        subprocess.run([sys.executable, "-P", "-m", warm.LAUNCHER_MODULE, str(wd.dir)], env=env,
                       start_new_session=True, check=True, timeout=30)
        launcher = poll_until(wd.listening, what="the launcher of the copy listening")
        assert _environ(launcher).get("PYTHONPATH") == str(copy), "it runs the copy"
        if change == "written":
            with open(copy / "shellper" / "core" / "names.py", "a") as module:
                module.write("# changed\n")
        else:
            (copy / "shellper" / "core" / "added.py").write_text("")
        assert wait_gone(launcher), f"a launcher whose package was {change} lives on"
        assert not (wd.dir / warmstart.SOCKET_NAME).exists()


def test_another_uid_cannot_start_a_session_through_it(wd: WarmDir) -> None:
    if os.geteuid() != 0:
        pytest.skip("acting as another user needs root")
    launcher = wd.ensure_launcher()
    sock_path = str(wd.dir / warmstart.SOCKET_NAME)
    os.chmod(wd.dir, 0o711)  # as if misconfigured: only SO_PEERCRED stands between them and the launcher
    os.chmod(sock_path, 0o666)
    report_r, report_w = os.pipe()
    request = {"stamp": warmstart.code_identity(), **warmstart.caller_state(), "cwd": "/",
               "config": json.dumps({"name": "x", "argv": ["true"], "dir": str(wd.dir), "cwd": "/", "env": {}})}
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the other user
        code = 1
        try:
            os.close(report_r)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.chdir("/")
            _, ready_w = os.pipe()
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.connect(sock_path)
                try:
                    warmstart.send_message(sock, request, [ready_w])
                    reply: object = warmstart.recv_message(sock)[0]
                except (EOFError, warmstart.LauncherError, ConnectionResetError, BrokenPipeError):  # refused
                    reply = "closed"
            os.write(report_w, json.dumps(reply).encode())
            code = 0
        except BaseException as exc:
            os.write(report_w, json.dumps(repr(exc)).encode())
        finally:
            os._exit(code)
    os.close(report_w)
    try:
        _, status = os.waitpid(pid, 0)
        reply = json.loads(os.read(report_r, 4096))
    finally:
        os.close(report_r)
        os.chmod(wd.dir, 0o700)
    assert reply == "closed"
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert not (wd.dir / "x.sock").exists() and not (wd.dir / "x.lock").exists()
    assert f"refused a caller of uid {NOBODY}" in (wd.dir / warmstart.LOG_NAME).read_text()
    assert wd.listening() == launcher, "the launcher serves on"


def test_off_takes_the_cold_path_and_starts_no_launcher(wd: WarmDir, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(warmstart.LAUNCHER_ENV, "off")
    info = wd.start("o", ["cat"])
    assert not is_warm(info)
    assert not (wd.dir / warmstart.SOCKET_NAME).exists()
    monkeypatch.setenv(warmstart.LAUNCHER_ENV, "on")
    wd.ensure_launcher()
    monkeypatch.setenv(warmstart.LAUNCHER_ENV, "off")
    again = wd.start("o2", ["cat"])
    assert not is_warm(again)
    wd.stop("o")
    wd.stop("o2")


def test_a_caller_in_another_namespace_starts_cold(wd: WarmDir) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a network namespace of its own needs root and unshare(1)")
    launcher = wd.ensure_launcher()
    code = ("import json, os, sys\n"
            "from shellper.client.launch import launch\n"
            "from shellper.core.config import SessionConfig\n"
            "info = launch(SessionConfig(name='n', argv=['cat'], dir=sys.argv[1], cwd='/', env=dict(os.environ)))\n"
            "print(json.dumps(info.to_dict()))\n")
    done = subprocess.run(["unshare", "--net", sys.executable, "-c", code, str(wd.dir)], capture_output=True,
                          timeout=60, env={**os.environ, warmstart.LAUNCHER_ENV: "on"})
    if done.returncode != 0 and b"unshare" in done.stderr:
        pytest.skip(f"no network namespace here: {done.stderr.decode(errors='replace').strip()}")
    assert done.returncode == 0, done.stderr
    info = LaunchInfo.from_dict(json.loads(done.stdout))
    wd.started.append(info)
    assert not is_warm(info)
    assert "cold start: the launcher refused: the caller is in another net namespace" in \
        (wd.dir / warmstart.LOG_NAME).read_text()
    assert wd.listening() == launcher
    echoes(wd, "n", b"from-another-netns")
    wd.stop("n")


def test_a_bad_request_is_refused_unlogged_and_the_launcher_serves_on(wd: WarmDir) -> None:
    launcher = wd.ensure_launcher()
    secret = "SECRET-8c1f-in-the-env"
    bad = json.dumps({"name": "b", "argv": ["cat"], "dir": str(wd.dir), "cwd": "/", "env": {"TOKEN": secret}})[:-1]
    ready_r, ready_w = os.pipe()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(wd.dir / warmstart.SOCKET_NAME))
            warmstart.send_message(sock, {"stamp": warmstart.code_identity(), "config": bad,
                                          **warmstart.caller_state()}, [ready_w])
            with pytest.raises((EOFError, warmstart.LauncherError, ConnectionResetError)):
                warmstart.recv_message(sock)
    finally:
        os.close(ready_r)
        os.close(ready_w)
    log = (wd.dir / warmstart.LOG_NAME).read_text()
    assert "request failed" in log and secret not in log
    assert wd.listening() == launcher
    info = wd.start("b", ["cat"])
    assert is_warm(info)
    wd.stop("b")


def test_idle_it_never_wakes_and_it_exits_after_its_idle_period(wd: WarmDir) -> None:
    subprocess.run([sys.executable, "-m", warm.LAUNCHER_MODULE, str(wd.dir), "--idle", "2"],
                   start_new_session=True, check=True, timeout=30)
    launcher = wd.ensure_launcher()
    poll_until(lambda: "poll" in Path(f"/proc/{launcher}/wchan").read_text(), what="the launcher asleep in poll")
    switches = _status(launcher, "voluntary_ctxt_switches"), _status(launcher, "nonvoluntary_ctxt_switches")
    assert not wait_gone(launcher, 0.5), "it exited long before its idle period"
    assert (_status(launcher, "voluntary_ctxt_switches"), _status(launcher, "nonvoluntary_ctxt_switches")) == \
        switches, "an idle launcher woke up"
    assert wait_gone(launcher, 10), "it did not exit after its idle period"
    assert os.listdir(wd.dir) == [], "every file it made goes with it, its log too"


@pytest.mark.parametrize("how", ["SIGTERM", "SIGHUP"])
def test_a_signal_ends_it_and_every_file_and_cgroup_it_made_goes_with_it(wd: WarmDir, how: str) -> None:
    launcher = wd.ensure_launcher()
    leaf = _own_leaf(launcher)
    info = wd.start("t", ["cat"])
    assert is_warm(info)
    wd.stop("t")
    shutil.rmtree(wd.dir / "logs")
    os.kill(launcher, getattr(signal, how))
    assert wait_gone(launcher, 10)
    assert os.listdir(wd.dir) == [], "its socket, lock and log are removed as it exits"
    assert leaf is None or not os.path.exists(leaf), "its cgroup is removed as it exits"


def _own_leaf(pid: int) -> str | None:
    """The launcher's cgroup, where it moved into one of its own (None: no cgroup hierarchy we may write to)."""
    from support.run import CGROUP_PARENT

    from shellper.host.cgroup import find_mount, own_cgroup

    mount, here = find_mount(), own_cgroup(pid)
    if CGROUP_PARENT is None or mount is None or here is None:
        return None
    return mount + here


def test_it_lives_in_a_cgroup_of_its_own_not_its_callers(wd: WarmDir) -> None:
    """Started by a caller in a cgroup (a job's, a test's jail): the launcher moves to a leaf of its own under the
    shellper cgroup parent, so it neither shows as the caller's process nor keeps the caller's cgroup populated;
    a session it forks for that caller is placed as a cold start's is (containment none: the caller's cgroup)."""
    from support.run import CGROUP_PARENT

    from shellper.host.launchercgroup import leaf_name

    if CGROUP_PARENT is None:
        pytest.skip("no cgroup v2 hierarchy we may write to")
    jail = os.path.join(CGROUP_PARENT, f"launcher-jail-{os.getpid()}")
    os.mkdir(jail)

    def enter_jail() -> None:
        with open(os.path.join(jail, "cgroup.procs"), "w") as procs:
            procs.write(str(os.getpid()))

    try:
        env = {**os.environ, warmstart.LAUNCHER_ENV: "on"}
        run = [*SHELLPER_CLI, "--dir", str(wd.dir), "run", "--json", "--containment", "none"]
        for name in ("j1", "j2"):  # the first starts the launcher (from inside the jail), the second uses it
            if name == "j2":
                launcher = poll_until(wd.listening, what="the launcher the first run started")
            done = subprocess.run([*run, name, "--", "cat"], env=env, capture_output=True, timeout=60,
                                  preexec_fn=enter_jail)
            assert done.returncode == 0, done.stderr
            wd.started.append(LaunchInfo.from_dict(json.loads(done.stdout)))
        cold, warm_info = wd.started
        assert not is_warm(cold) and is_warm(warm_info)
        assert _own_leaf(launcher) == os.path.join(CGROUP_PARENT, leaf_name(str(wd.dir)))
        for info in (cold, warm_info):
            assert _cgroup(info.pid) == _cgroup(cold.pid)
            assert _own_leaf(info.pid) == jail, "an uncontained session lives where its caller does"
            assert info.child_pid is not None and _own_leaf(info.child_pid) == jail, "its child forked after the move"
        for info in (cold, warm_info):
            wd.stop(info.name)
        poll_until(lambda: not Path(jail, "cgroup.procs").read_text().split(), what="the jail empty")
        assert wd.listening() == launcher, "the launcher lives on, elsewhere"
    finally:
        for info in wd.started:
            with contextlib.suppress(Exception):
                wd.stop(info.name)
        poll_until(lambda: not Path(jail, "cgroup.procs").read_text().split(), what="the jail empty")
        os.rmdir(jail)


def test_a_caller_in_another_cgroup_starts_cold(wd: WarmDir) -> None:
    """The launcher's cgroup decides where an uncontained session lives and which parent a contained one finds:
    a caller elsewhere must start its session itself."""
    from support.run import CGROUP_PARENT

    from shellper.host.cgroup import find_mount

    mount = find_mount()
    if mount is None or not os.access(CGROUP_PARENT or mount, os.W_OK):
        pytest.skip("no cgroup v2 hierarchy we may write to")
    elsewhere = os.path.join(CGROUP_PARENT or mount, f"launcher-caller-{os.getpid()}")
    os.mkdir(elsewhere)
    try:
        launcher = wd.ensure_launcher()
        code = ("import json, os, sys\n"
                "from shellper.client.launch import launch\n"
                "from shellper.core.config import SessionConfig\n"
                "info = launch(SessionConfig(name='g', argv=['cat'], dir=sys.argv[1], cwd='/', env=dict(os.environ)))\n"
                "print(json.dumps(info.to_dict()))\n")

        def move_in() -> None:  # in the caller, before it execs: it runs in another cgroup than the launcher
            with open(os.path.join(elsewhere, "cgroup.procs"), "w") as procs:
                procs.write(str(os.getpid()))

        done = subprocess.run([sys.executable, "-c", code, str(wd.dir)], capture_output=True, timeout=60,
                              preexec_fn=move_in)
        assert done.returncode == 0, done.stderr
        info = LaunchInfo.from_dict(json.loads(done.stdout))
        wd.started.append(info)
        assert not is_warm(info)
        assert "cold start: the launcher refused: the caller is in another cgroup" in \
            (wd.dir / warmstart.LOG_NAME).read_text()
        assert wd.listening() == launcher
        echoes(wd, "g", b"from-another-cgroup")
        wd.stop("g")
    finally:
        poll_until(lambda: not Path(elsewhere, "cgroup.procs").read_text().split(), what="the cgroup empty")
        os.rmdir(elsewhere)


def test_a_plain_run_is_handed_to_the_launcher_without_argparse(wd: WarmDir) -> None:
    """`shellper run`'s quick path: where a launcher listens, a plain run builds its config without the parser;
    an option the quick path does not read takes the full CLI, with the same outcome."""
    wd.ensure_launcher()
    entry = "import sys; from shellper.cli.entry import entry; entry()"
    for name, options in (("q", ["--cwd", "/"]), ("p", ["--rows", "30"])):
        done = subprocess.run([sys.executable, "-X", "importtime", "-c", entry, "--dir", str(wd.dir), "run", "--json",
                               name, *options, "--", "cat"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        info = LaunchInfo.from_dict(json.loads(done.stdout))
        wd.started.append(info)
        assert is_warm(info)
        parsed = re.search(r"\| +argparse$", done.stderr, re.M) is not None
        assert parsed == (name == "p"), (name, parsed)
        echoes(wd, name, name.encode())
        wd.stop(name)
    done = subprocess.run([sys.executable, "-c", entry, "--dir", str(wd.dir), "run", "--json", "bad/name", "--",
                           "cat"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and done.stderr.startswith("shellper: ") and "Traceback" not in done.stderr


_QUICK_RUN = """
import os, sys
from shellper.cli.entry import entry
real_exit = os._exit

def leave(code):
    with open(os.environ["MODULES_OUT"], "w") as f:
        f.write("\\n".join(sorted(sys.modules)))
    real_exit(code)

os._exit = leave
entry()
"""
QUICK_RUN_NEVER = {"socket", "selectors", "array", "shlex", "shellper.daemon", "shellper.daemon.prefork",
                   "shellper.host.cgroup", "shellper.host.identity", "argparse", "shellper.cli.main",
                   "shellper.cli.argtree", "subprocess", "hashlib", "typing"}
"""What a warm `shellper run --dir D NAME --containment none -- cat` (the quick path) does without: socket.py
(shellper.host.trust.connect_session_plain), the prefork's module and the cgroup code (a launch that starts no
prefork and needs no scope), shlex (a --dir that needs no quotes), the parser."""


def test_a_warm_quick_run_loads_nothing_it_does_not_use(wd: WarmDir, tmp_path: Path) -> None:
    wd.ensure_launcher()
    out = tmp_path / "modules"
    done = subprocess.run([sys.executable, "-c", _QUICK_RUN, "--dir", str(wd.dir), "run", "--json", "quick",
                           "--containment", "none", "--", "cat"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "MODULES_OUT": str(out)})
    assert done.returncode == 0, done.stderr
    info = LaunchInfo.from_dict(json.loads(done.stdout))
    wd.started.append(info)
    assert is_warm(info)
    loaded = set(out.read_text().split())
    assert "shellper.client.warm" in loaded
    assert loaded & QUICK_RUN_NEVER == set()
    echoes(wd, "quick", b"quick")
    wd.stop("quick")


def test_the_quick_path_fails_as_the_full_cli_does(wd: WarmDir) -> None:
    """Bad input to a plain `run` where a launcher listens (the quick path, no parser) gives the exit status,
    the stderr and the --json line the full CLI gives (SHELLPER_LAUNCHER=off: argparse and a cold start)."""
    wd.ensure_launcher()
    entry = "import sys; from shellper.cli.entry import entry; entry()"
    running = wd.start("dup", ["cat"])
    cases = (["bad/name", "--", "cat"], ["--json", "bad/name"], ["x1", "--cwd", "/nonexistent-l29", "--", "cat"],
             ["--json", "x2", "--containment", "bogus", "--", "cat"], ["x3", "--", "/nonexistent-l29/prog"],
             ["--json", "x4", "--", "/nonexistent-l29/prog"], ["dup", "--", "cat"], ["--json", "dup"])
    for case in cases:
        got = []
        for launcher in ("on", "off"):
            done = subprocess.run([sys.executable, "-c", entry, "--dir", str(wd.dir), "run", *case],
                                  capture_output=True, text=True, timeout=60,
                                  env={**os.environ, warmstart.LAUNCHER_ENV: launcher})
            got.append((done.returncode, done.stdout, done.stderr))
        assert got[0] == got[1], case
        assert got[0][0] != 0 and got[0][2].startswith("shellper: ") and "Traceback" not in got[0][2], case
    assert wait_gone(running.pid, 0) is False, "the running one is left alone"
    wd.stop("dup")


def test_ls_json_lists_the_launcher_after_the_sessions(wd: WarmDir) -> None:
    def listed() -> list[dict[str, object]]:
        done = subprocess.run([*SHELLPER_CLI, "--dir", str(wd.dir), "ls", "--json"], capture_output=True, text=True,
                              timeout=30, check=True)
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    launcher = wd.ensure_launcher()
    wd.start("l", ["cat"])
    session, entry = listed()
    assert session["name"] == "l" and "kind" not in session
    assert entry["kind"] == "launcher" and entry["name"] == ".launcher" and entry["pid"] == launcher
    assert entry["current"] is True and entry["socket"] == str(wd.dir / warmstart.SOCKET_NAME)
    os.kill(launcher, signal.SIGKILL)
    assert wait_gone(launcher)
    assert [s["name"] for s in listed()] == ["l"], "a killed launcher is not listed"
    wd.stop("l")


_LOG_BEFORE_LOCK = """
import os, sys
from shellper.daemon import launcher
from shellper.host import warmstart

served = launcher.Launcher(sys.argv[1], "test", "test")
served.watch_code()
assert served.claim()
made = warmstart.log_line
def log_line(directory, text, *, create=False):
    print("lock said", repr(os.pread(served.lock_fd, 4096, 0)), "when the log was made", create)
    return made(directory, text, create=create)
warmstart.log_line = log_line
served.listen()
served.close()
"""


def test_a_launcher_makes_its_log_before_it_says_it_serves(tmp_path: Path) -> None:
    """Whoever sees a launcher serving (warmstart.launcher_status reads its lock file) may remove its directory:
    the launcher makes no file after that, so the removal cannot race one (rmtree failed, "Directory not
    empty", when the log came after)."""
    directory = tmp_path / "run"
    directory.mkdir(mode=0o700)
    done = subprocess.run([sys.executable, "-P", "-c", _LOG_BEFORE_LOCK, str(directory)], capture_output=True,
                          text=True, timeout=60, cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["lock said b'' when the log was made True"]


def test_the_leak_guard_sees_a_launcher_its_test_left() -> None:
    """support.launchers, which conftest's leak guard asks: a launcher started during a test in a directory of
    the test's own is reported until something ends it, and a removed directory's one is gone on its own."""
    from support.launchers import end_launchers, left_by_the_test, pids_now, wait_listening
    from support.run import CGROUP_PARENT, launcher_cgroups
    from support.sessions import private_dir

    from shellper.host.launchercgroup import leaf_name

    before = pids_now()
    kept, removed = private_dir("spk-"), private_dir("spr-")
    leaves = {leaf_name(str(kept)), leaf_name(str(removed))} if CGROUP_PARENT is not None else set()
    try:
        for directory in (kept, removed):
            warm.start_launcher(str(directory))
            wait_listening(directory)
        left = left_by_the_test(before, None)
        assert sorted(left.values()) == sorted([str(kept), str(removed)])
        assert launcher_cgroups() >= leaves
        shutil.rmtree(removed)  # inotify: it exits on its own
        poll_until(lambda: list(left_by_the_test(before, None).values()) == [str(kept)], what="only one left")
        assert [i.pid for i in end_launchers(kept)] == [i.pid for i, d in left.items() if d == str(kept)]
        assert left_by_the_test(before, None) == {}
        assert not launcher_cgroups() & leaves, "each launcher's cgroup goes with it"
        assert not (kept / warmstart.SOCKET_NAME).exists() and not (kept / warmstart.LOCK_NAME).exists()
    finally:
        for directory in (kept, removed):
            end_launchers(directory)
            shutil.rmtree(directory, ignore_errors=True)
