"""What a plain ``shellper run NAME -- CMD`` loads, in the CLI's process and in the daemon's, held exactly.

Every session is a daemon of its own, so a module it loads is paid per session in start-up time and private
memory (CONTRIBUTING.md, "Start-up cost"). Each process runs under an audit hook (a sitecustomize) that notes
every module it loads, including those a fork inherits, so what the daemon loads later (serving a Tower, a
SCREEN request, an attach, a version-1 client) is seen too, and so is what ``shellper ls`` and ``shellper stop``
load. A module added to a list below is a decision: measure it (``python -m bench.startup``) and say so in
bench/NOTES.md. What the daemon loads on first use the warm launcher imports ahead (its PREWARM), so a session it
forks shares those modules instead of loading them privately: the last test holds the two together.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support.legacy import V1Client
from support.paths import ROOT
from support.sessions import Sessions
from support.waiting import poll_until, wait_gone

from shellper.client import warm
from shellper.client.blocking import Client
from shellper.host import warmstart
from shellper.protocol import wire

_PROBE = """
import os, sys
OUT = os.environ.get("IMPORT_PROBE_DIR")
if OUT:
    seen = set(sys.modules)

    def note(names):
        with open(os.path.join(OUT, str(os.getpid())), "a") as f:
            f.write("".join(name + "\\n" for name in names))

    def hook(event, args):
        if event == "import":
            seen.add(args[0])
            note([args[0]])

    os.register_at_fork(after_in_child=lambda: note(seen))  # a child starts with what its parent had
    note(seen)
    sys.addaudithook(hook)
"""
"""A sitecustomize: every Python process started with it on its path, and IMPORT_PROBE_DIR in its environment,
notes what it loads in that directory, in a file named by its pid (and so does each fork of it)."""

_BOTH = {"shellper", "shellper.cli", "shellper.cli.argscan", "shellper.cli.entry", "shellper.core",
         # the option table, read by the console script's scan before it forks the prefork (shellper.cli.argscan)
         "shellper.cli.options", "shellper.cli.commands", "shellper.cli.commands.run",
         "shellper.core.config", "shellper.core.containment", "shellper.core.defaults", "shellper.core.errors",
         "shellper.core.execve", "shellper.core.exitrecord", "shellper.core.exits", "shellper.core.launchfailure",
         "shellper.core.names", "shellper.core.owner", "shellper.core.signals", "shellper.core.states",
         "shellper.core.structs", "shellper.core.terminal", "shellper.core.terminal.text", "shellper.core.trust",
         "shellper.daemon",
         "shellper.daemon.prefork", "shellper.host", "shellper.host.cgroup", "shellper.host.identity",
         "shellper.host.logfile", "shellper.host.paths", "shellper.host.record"}

CLI = _BOTH - {"shellper.host.logfile"} | {
    "shellper.cli.main", "shellper.cli.onhost", "shellper.cli.argtree", "shellper.cli.connect", "shellper.client",
    "shellper.client.launch", "shellper.host.prelaunch", "shellper.host.terminfo"}
"""The package's modules ``shellper run`` loads: the parser and the launch; none of the server, nor another
command's module. (The launch moved from shellper.daemon.launch to shellper.client.launch, its checks to
shellper.host.prelaunch, in issue 28; the log file is now the daemon's alone, which imports it.)"""

DAEMON = _BOTH | {
    "shellper.core.detachkeys", "shellper.core.merge", "shellper.core.terminal.modes", "shellper.core.ring",
    "shellper.core.peertext",  # 29 lines, no imports: a peer's string quoted for the log (issue 27)
    "shellper.daemon.clientconn", "shellper.daemon.files", "shellper.daemon.inputqueue", "shellper.daemon.journal",
    "shellper.daemon.lifecycle", "shellper.daemon.main", "shellper.daemon.output", "shellper.daemon.pacing",
    "shellper.daemon.reactor", "shellper.daemon.registry", "shellper.daemon.screenfeed", "shellper.daemon.session",
    "shellper.daemon.starved", "shellper.daemon.terminal", "shellper.daemon.transport", "shellper.daemon.tree",
    "shellper.host.child", "shellper.host.reaper", "shellper.host.shellpers", "shellper.protocol",
    "shellper.protocol.firstframe", "shellper.protocol.wire",
    # issue 28: the parts of a connection, out of clientconn (its pump, terminal sink, codec, and protocol rules)
    "shellper.daemon.pump", "shellper.daemon.terminalsink", "shellper.daemon.wirecodec", "shellper.protocol.server",
    "shellper.host.shellstate"}  # what /proc says of the session's program, where it is now (issue 31)
"""The package's modules a session loads to serve a Tower (the console script's, inherited from the prefork's
fork, among them). Not the screen emulator, the version-1 codec, the remote or bridge code, nor argparse."""

NEVER = {"typing", "dataclasses", "pathlib", "argparse", "gettext", "shutil", "subprocess", "tempfile", "shlex",
         "hashlib", "threading", "inspect", "unicodedata", "random", "asyncio", "logging", "traceback", "locale",
         "textwrap", "urllib", "ipaddress", "fnmatch"}
"""What the daemon never loads, nor the CLI but for argparse (with gettext and locale): the package avoids
``typing`` and ``dataclasses`` at run time, and the rest is wanted only by other commands, by a failure (traceback)
or on first use (unicodedata: the screen emulator)."""

SCREEN = {"shellper.core.terminal.screen", "shellper.core.terminal.parser", "shellper.core.terminal._tables",
          "shellper.core.terminal.commands",
          "shellper.core.terminal.grid", "shellper.core.terminal.pen", "shellper.core.terminal.writer",
          "shellper.core.terminal.flood"}
"""Loaded by the daemon (with unicodedata) when somebody first looks at the screen (a SCREEN request, an
attach), or after 1 MiB of output nobody has seen (shellper.daemon.screenfeed)."""
RENDERED = {"shellper.core.terminal.render"}
"""Loaded by the daemon when a terminal attaches with the replay drawn from the screen model."""
LEGACY = {"shellper.protocol.legacy", "shellper.daemon.legacyconn"}
"""Loaded by the daemon when a version-1 client's first frame arrives."""

COMMAND = {"shellper", "shellper.cli", "shellper.cli.argscan", "shellper.cli.argtree", "shellper.cli.commands",
           "shellper.cli.connect", "shellper.cli.entry", "shellper.cli.main", "shellper.cli.onhost",
           "shellper.cli.options", "shellper.client", "shellper.core", "shellper.core.containment",
           "shellper.core.defaults", "shellper.core.errors", "shellper.core.exitrecord", "shellper.core.names",
           "shellper.core.owner", "shellper.core.signals", "shellper.core.states", "shellper.core.structs",
           "shellper.core.trust", "shellper.host", "shellper.host.paths", "shellper.host.record"}
"""What every command parsed by argparse loads (``shellper.cli.main``): not the prefork's module, which only a
launch that starts one imports (issue 29)."""
_TALKS = {"shellper.client.blocking", "shellper.core.peertext", "shellper.host.trust", "shellper.protocol",
          "shellper.protocol.connection", "shellper.protocol.wire"}
LS = COMMAND | _TALKS | {"shellper.cli.commands.ls", "shellper.cli.show", "shellper.client.sessions",
                         "shellper.core.terminal", "shellper.core.terminal.text"}
"""``shellper ls`` with a session to ask: not the launch, nor the config (a user error's module is looked up only
once loaded: shellper.cli.connect.user_errors)."""
STOP = COMMAND | _TALKS | {"shellper.cli.commands.stop", "shellper.client.stop", "shellper.host.cgroup",
                           "shellper.host.cleanup", "shellper.host.identity", "shellper.host.ownfiles",
                           "shellper.host.reaper", "shellper.host.shellpers", "shellper.host.survivors"}
"""``shellper stop NAME`` of a live session: the stop and the proof it is gone, not the launch."""
COMMAND_NEVER = NEVER - {"argparse", "gettext", "locale"} | {"ctypes"}
"""What ``ls`` and ``stop`` never load (ctypes: prctl, which only a shellper and its child call)."""


CONSOLE_SCRIPT = {"shellper.cli", "shellper.cli.entry", "shellper.cli.argscan", "shellper.daemon.prefork",
                  "shellper.cli.options", "shellper.cli.commands", "shellper.cli.commands.run"}
"""What a daemon the console script's prefork forked has from it, and one started otherwise has not."""


def probed(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The directory the probe writes to, and the environment that starts it."""
    out, site = tmp_path / "imports", tmp_path / "site"
    out.mkdir()
    site.mkdir()
    (site / "sitecustomize.py").write_text(_PROBE)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    # The cold path, held here: a warm session is forked from the launcher, which imported all it may need first.
    return out, {**os.environ, "PYTHONPATH": path, "IMPORT_PROBE_DIR": str(out), "SHELLPER_LAUNCHER": "off"}


def loaded(out: Path, pid: int) -> set[str]:
    return set((out / str(pid)).read_text().split())


def cli(runtime_dir: Path, env: dict[str, str], *argv: str) -> tuple[int, bytes]:
    """Run the console script's code in a fresh interpreter; its pid (the probe's file) and its output."""
    command = subprocess.Popen([sys.executable, "-c", "from shellper.cli.entry import entry; entry()", "--dir",
                                str(runtime_dir), *argv], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    stdout, stderr = command.communicate(timeout=60)
    assert command.returncode == 0, stderr
    return command.pid, stdout


def shellper_modules(out: Path, pid: int) -> set[str]:
    return {m for m in loaded(out, pid) if m.startswith("shellper")}


def look_at_the_screen(tower: Client) -> None:
    reply = tower.request(wire.ScreenRequest(format="ansi"), wire.ScreenReply)
    assert isinstance(reply, wire.ScreenReply) and reply.rows > 0


def attach_rendered(path: str | Path) -> None:
    with Client(path, "terminal", client_name="imports", timeout=30) as person:
        person.connect(rendered=1, size=(80, 24))


def meet_a_version_1_client(path: str | Path, child_pid: int | None) -> None:
    with V1Client(Path(path)) as v1:
        welcome, _ = v1.hello()
        assert welcome["pid"] == child_pid


def test_a_plain_run_loads_these_modules_and_the_daemon_the_rest_on_first_use(cli_runtime_dir: Path,
                                                                             tmp_path: Path) -> None:
    out, env = probed(tmp_path)
    run_pid, stdout = cli(cli_runtime_dir, env, "run", "--json", "plain", "--", "cat")
    info = json.loads(stdout)
    daemon = int(info["shellper_pid"])
    try:
        cli_modules = loaded(out, run_pid)
        assert {m for m in cli_modules if m.startswith("shellper")} == CLI
        # argparse stays: the prefork imports the server meanwhile, for longer (bench/NOTES.md, "Lazy imports")
        assert cli_modules & (NEVER - {"argparse", "gettext", "locale"} | {"msgpack", "socket"}) == set()

        with Client(info["socket"], "tower", client_name="imports", timeout=30) as tower:  # what a Tower does
            tower.connect(replay_bytes=0)
            assert tower.status().state == "running"
            served = loaded(out, daemon)
            assert {m for m in served if m.startswith("shellper")} == DAEMON
            assert served & NEVER == set()

            # the probe sees what loads on first use, each at its own
            look_at_the_screen(tower)
            assert shellper_modules(out, daemon) == DAEMON | SCREEN
            assert "unicodedata" in loaded(out, daemon)
        attach_rendered(info["socket"])
        assert shellper_modules(out, daemon) == DAEMON | SCREEN | RENDERED
        meet_a_version_1_client(info["socket"], info["child_pid"])
        assert shellper_modules(out, daemon) == DAEMON | SCREEN | RENDERED | LEGACY

        ls_pid, listing = cli(cli_runtime_dir, env, "ls")
        assert [row.split()[0] for row in listing.decode().splitlines()[1:]] == ["plain"]
        assert shellper_modules(out, ls_pid) == LS
        assert loaded(out, ls_pid) & COMMAND_NEVER == set()

        stop_pid, _ = cli(cli_runtime_dir, env, "stop", "plain")
        assert wait_gone(daemon, 30)
        assert shellper_modules(out, stop_pid) == STOP
        # stop waits on the named sessions in threads, one each, so a slow one holds none of the others up
        assert loaded(out, stop_pid) & (COMMAND_NEVER - {"threading"}) == set()
    finally:
        subprocess.run([sys.executable, "-m", "shellper", "--dir", str(cli_runtime_dir), "stop", "plain"],
                       capture_output=True, timeout=60)
        assert wait_gone(daemon, 30)


_LAUNCH = """
import os, sys
from shellper.core.config import SessionConfig
from shellper.client.launch import launch
info = launch(SessionConfig(name="lib", argv=["cat"], dir=sys.argv[1], cwd="/", env=dict(os.environ)))
print(info.pid)
"""


def test_a_session_a_tower_launches_loads_the_same_server(cli_runtime_dir: Path, tmp_path: Path) -> None:
    """A Tower's fleet launches with shellper.client.launch.launch and no prefork: ``python -m shellper.daemon``,
    a fresh interpreter, which needs none of the console script's modules."""
    out, env = probed(tmp_path)
    done = subprocess.run([sys.executable, "-c", _LAUNCH, str(cli_runtime_dir)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    daemon = int(done.stdout)
    try:
        with Client(cli_runtime_dir / "lib.sock", "tower", client_name="imports", timeout=30) as tower:
            tower.connect(replay_bytes=0)
            assert tower.status().state == "running"
        served = loaded(out, daemon)
        assert {m for m in served if m.startswith("shellper")} == DAEMON - CONSOLE_SCRIPT
        assert served & NEVER == set()
    finally:
        subprocess.run([sys.executable, "-m", "shellper", "--dir", str(cli_runtime_dir), "stop", "lib"],
                       capture_output=True, timeout=60)
        assert wait_gone(daemon, 30)


_PREWARMED = """
import importlib, sys
from shellper.daemon.launcher import PREWARM
for module in PREWARM:
    importlib.import_module(module)
print(" ".join(sys.modules))
"""


def test_the_warm_launcher_imports_ahead_what_a_session_loads_on_first_use() -> None:
    """A session the warm launcher forks shares what the launcher imported and copies what it imports itself, so
    the launcher's one list (PREWARM) holds what a session loads, on first use too; and every name in it exists:
    the launcher passes over one that does not import, and a module renamed would go unseen."""
    done = subprocess.run([sys.executable, "-c", _PREWARMED], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    later = DAEMON - CONSOLE_SCRIPT | SCREEN | RENDERED | LEGACY | {"unicodedata"}
    assert later - set(done.stdout.split()) == set()


def launcher_listening(directory: Path) -> int | None:
    """The launcher's pid once its socket accepts."""
    with contextlib.suppress(OSError, ValueError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.connect(str(directory / warmstart.SOCKET_NAME))
        pid = json.loads((directory / warmstart.LOCK_NAME).read_text()).get("pid")
        return pid if isinstance(pid, int) else None
    return None


def test_what_loads_on_first_use_works_in_a_session_the_warm_launcher_forks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forked from a launcher that imported it all and froze its heap, a session still draws its screen, renders
    an attach's replay and serves a version-1 client."""
    monkeypatch.setenv(warmstart.LAUNCHER_ENV, "on")
    directory = Path(tempfile.mkdtemp(prefix="spw-", dir="/tmp"))
    os.chmod(directory, 0o700)
    sessions = Sessions(directory)
    launcher = None
    try:
        warm.start_launcher(str(directory))
        launcher = poll_until(lambda: launcher_listening(directory), what="a launcher listening")
        info = sessions.start("warm", ["cat"])
        assert b"shellper.daemon.launcher" in Path(f"/proc/{info.pid}/cmdline").read_bytes(), "not forked warm"
        with sessions.connect("warm") as tower:
            look_at_the_screen(tower)
        attach_rendered(info.socket)
        meet_a_version_1_client(info.socket, info.child_pid)
        sessions.stop("warm")
    finally:
        for info in sessions.started:
            if not wait_gone(info.pid, 0):
                with contextlib.suppress(Exception):
                    sessions.stop(info.name, grace=1.0)
        shutil.rmtree(directory, ignore_errors=True)  # the launcher exits when its directory goes
        if launcher is not None:
            assert wait_gone(launcher, 10), f"launcher {launcher} did not exit"
