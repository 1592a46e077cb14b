"""Sessions driven through the ``shellper`` command from real terminals (pexpect), as a person drives them."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pexpect
import psutil

from support.launchers import MADE, end_launchers
from support.paths import ROOT, SHELLPER_CLI
from support.sessions import left_in, private_dir

TIMEOUT = 10.0
PROMPT = b"psh> "
BASH = ["bash", "--norc", "--noprofile", "-i"]
GRACE = "0.1"
SESSION_OPTS = ["--env", "PS1=psh> ", "--env", "HISTFILE=", "--grace", GRACE]
DETACH = b"\x1c"


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("SHELLPER_DIR", None)
    return env


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_all_gone(pids: list[int], timeout: float = TIMEOUT) -> list[int]:
    deadline = time.monotonic() + timeout
    left = [p for p in pids if not gone(p)]
    while left and time.monotonic() < deadline:
        with contextlib.suppress(psutil.Error):
            psutil.wait_procs([psutil.Process(p) for p in left if not gone(p)], timeout=0.2)
        left = [p for p in left if not gone(p)]
    return left


@dataclass
class Terminals:
    """A runtime directory, the sessions (name -> pids) started in it, and the terminals spawned."""

    dir: str
    env: dict[str, str]
    started: dict[str, list[int]] = field(default_factory=dict)
    spawned: list[pexpect.spawn] = field(default_factory=list)
    attach_opts: tuple[str, ...] = ()
    """Options every ``attach`` gets: ``--relay`` in the relay runs of the tests (fixture ``how``)."""

    def cli_args(self, *args: str) -> list[str]:
        return [*SHELLPER_CLI, "--dir", self.dir, *args]

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(self.cli_args(*args), capture_output=True, text=True, env=self.env,
                              cwd=ROOT, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        if check:
            assert proc.returncode == 0, f"shellper {' '.join(args)}: rc={proc.returncode} {proc.stderr}"
        return proc

    def run(self, name: str, *argv: str, opts: tuple[str, ...] = ()) -> dict[str, Any]:
        proc = self.cli("run", "--json", *SESSION_OPTS, *opts, name, "--", *argv)
        info: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        self.started[name] = [info["pid"]] + ([info["child_pid"]] if info.get("child_pid") else [])
        return info

    def shell(self, name: str, *opts: str) -> None:
        self.run(name, *BASH, opts=opts)

    def spawn(self, argv: list[str], dimensions: tuple[int, int] = (24, 80)) -> pexpect.spawn:
        child = pexpect.spawn(argv[0], argv[1:], env=self.env, cwd=str(ROOT), dimensions=dimensions,
                              timeout=TIMEOUT)
        child.ptyproc.delayafterclose = 0  # we wait for the exit ourselves (finish, discard)
        child.delaybeforesend = None  # no echo-timing guesswork: every test expects what it waits for
        self.spawned.append(child)
        return child

    def attach(self, name: str, *opts: str, dimensions: tuple[int, int] = (24, 80)) -> pexpect.spawn:
        return self.spawn(self.cli_args("attach", name, *self.attach_opts, *opts), dimensions)

    def follow(self, name: str) -> pexpect.spawn:
        """``tail --follow --plain``: a watcher to expect() a session's output on."""
        return self.spawn(self.cli_args("tail", name, "--follow", "--plain"))

    def type_line(self, name: str, text: str) -> None:
        self.cli("send", name, text, "--enter")

    def stop(self, name: str) -> None:
        pids = self.started.pop(name)
        self.cli("stop", name, "--grace", GRACE)
        left = wait_all_gone(pids)
        assert not left, f"still running after stop {name}: {left}"

    def close_terminals(self) -> None:
        for child in self.spawned:
            discard(child)
        self.spawned.clear()

    def teardown(self) -> None:
        """Stop every session, then check that nothing is left behind."""
        self.close_terminals()
        problems: list[str] = []
        for name, pids in list(self.started.items()):
            try:
                self.stop(name)
            except (AssertionError, subprocess.SubprocessError) as exc:
                problems.append(str(exc))
                for pid in pids:  # by pid only, and only what this test started
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        end_launchers(self.dir)  # not left to the removal below: one still starting would write into it meanwhile
        leftovers = left_in(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)
        MADE.pop(self.dir, None)
        assert not problems, problems
        assert not leftovers, f"files left in the runtime dir: {leftovers}"


def discard(child: pexpect.spawn) -> None:
    """End a terminal's program now (SIGKILL by pid) and reap it, without pexpect's polite delays."""
    if not child.closed:
        if child.isalive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
            child.wait()
        child.close()


def finish(child: pexpect.spawn) -> int:
    """Wait for the program in a terminal to end by itself; its exit status."""
    child.expect(pexpect.EOF)
    child.wait()
    child.close()
    assert child.exitstatus is not None, f"died by signal {child.signalstatus}"
    return int(child.exitstatus)


def adopt(sessions: Terminals, name: str) -> dict[str, Any]:
    """A session the CLI started under test (not through Terminals.run): its ls entry, and its pids noted for
    the teardown's stop and leak check."""
    (entry,) = (s for s in json.loads(sessions.cli("ls", "--json").stdout) if s["name"] == name)
    sessions.started[name] = [entry["pid"]] + ([entry["child_pid"]] if entry.get("child_pid") else [])
    return dict(entry)


def shell_terminals(prefix: str) -> Iterator[Terminals]:
    """A module's ``terminals`` fixture (``yield from`` it): a private runtime directory under /tmp named
    ``prefix``..., the CLI's environment with the shell prompt the tests expect, torn down after."""
    s = Terminals(str(private_dir(prefix)), {**cli_env(), "PS1": "psh> ", "HISTFILE": ""})
    try:
        yield s
    finally:
        s.teardown()

