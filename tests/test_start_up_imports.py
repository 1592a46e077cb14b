"""What a plain ``shellper run NAME -- CMD`` loads, in the CLI's process and in the daemon's, held exactly.

Every session is a daemon of its own, so a module it loads is paid per session in start-up time and private
memory (CONTRIBUTING.md, "Start-up cost"). Each process runs under an audit hook (a sitecustomize) that notes
every module it loads, including those a fork inherits, so what the daemon loads later (serving a Tower,
meeting a version-1 client) is seen too. A module added to either list below is a decision: measure it
(``python -m bench.startup``) and say so in bench/NOTES.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support.legacy import V1Client
from support.paths import ROOT
from support.waiting import wait_gone

from shellper.client.blocking import Client

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
    "shellper.daemon.pump", "shellper.daemon.terminalsink", "shellper.daemon.wirecodec", "shellper.protocol.server"}
"""The package's modules a session loads to serve a Tower (the console script's, inherited from the prefork's
fork, among them). Not the screen emulator, the version-1 codec, the remote or bridge code, nor argparse."""

NEVER = {"typing", "dataclasses", "pathlib", "argparse", "gettext", "shutil", "subprocess", "tempfile", "shlex",
         "hashlib", "threading", "inspect", "unicodedata", "random"}
"""What the daemon never loads, nor the CLI but for argparse (with gettext): the package avoids ``typing`` and
``dataclasses`` at run time, and the rest is wanted only by other commands or on first use (unicodedata: the
screen emulator)."""

LEGACY = {"shellper.protocol.legacy", "shellper.daemon.legacyconn"}
"""Loaded by the daemon when a version-1 client's first frame arrives."""


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


def test_a_plain_run_loads_these_modules_and_the_daemon_the_rest_on_first_use(cli_runtime_dir: Path,
                                                                             tmp_path: Path) -> None:
    out, env = probed(tmp_path)
    cli = subprocess.Popen([sys.executable, "-c", "from shellper.cli.entry import entry; entry()", "--dir",
                            str(cli_runtime_dir), "run", "--json", "plain", "--", "cat"], cwd=ROOT, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = cli.communicate(timeout=60)
    assert cli.returncode == 0, stderr
    info = json.loads(stdout)
    daemon = int(info["shellper_pid"])
    try:
        cli_modules = loaded(out, cli.pid)
        assert {m for m in cli_modules if m.startswith("shellper")} == CLI
        # argparse stays: the prefork imports the server meanwhile, for longer (bench/NOTES.md, "Lazy imports")
        assert cli_modules & (NEVER - {"argparse", "gettext"} | {"msgpack", "socket"}) == set()

        with Client(info["socket"], "tower", client_name="imports", timeout=30) as tower:  # what a Tower does
            tower.connect(replay_bytes=0)
            assert tower.status().state == "running"
        served = loaded(out, daemon)
        assert {m for m in served if m.startswith("shellper")} == DAEMON
        assert served & NEVER == set()

        with V1Client(Path(info["socket"])) as v1:  # the probe sees what loads on first use
            welcome, _ = v1.hello()
            assert welcome["pid"] == info["child_pid"]
        assert {m for m in loaded(out, daemon) if m.startswith("shellper")} == DAEMON | LEGACY
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
        console_script = {"shellper.cli", "shellper.cli.entry", "shellper.cli.argscan", "shellper.daemon.prefork",
                          "shellper.cli.options", "shellper.cli.commands", "shellper.cli.commands.run"}
        assert {m for m in served if m.startswith("shellper")} == DAEMON - console_script
        assert served & NEVER == set()
    finally:
        subprocess.run([sys.executable, "-m", "shellper", "--dir", str(cli_runtime_dir), "stop", "lib"],
                       capture_output=True, timeout=60)
        assert wait_gone(daemon, 30)
