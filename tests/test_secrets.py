"""Secrets stay out of every process's command line and out of the logs: what ``ps`` shows every user.

A sentinel value is put in the child's environment (and, for legacy-main, in its arguments), and the
command line (/proc/PID/cmdline) of every process involved is read while it lives: the CLI, the prefork it
starts, the shellper; legacy-main and the image it re-executes. The CLI's own command line, and the first
legacy-main image's, are their callers' choice: they are checked only where the caller kept the secret out.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.legacy import Legacy, config
from support.paths import ROOT, SHELLPER_CLI
from support.waiting import wait_gone

from shellper.client.launch import LaunchInfo
from shellper.daemon.prefork import holds_secrets
from shellper.protocol import legacy


def _sentinel() -> str:
    return f"s3cret-{secrets.token_hex(8)}"


def _cmdline(pid: int) -> bytes | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        with contextlib.suppress(OSError):
            found.update(int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split())
    return found


def watch(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> dict[int, list[bytes]]:
    """Every command line seen of ``proc`` and its descendants until it exits, in order (each pid's, read
    again on every pass: an exec changes it). A busy loop, not a sleep: it must see short-lived processes."""
    seen: dict[int, list[bytes]] = {}
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        todo, done = [proc.pid], set()
        while todo:
            pid = todo.pop()
            if pid in done:
                continue
            done.add(pid)
            line = _cmdline(pid)
            if line and seen.get(pid, [b""])[-1] != line:
                seen.setdefault(pid, []).append(line)
            todo.extend(_children(pid))
    assert proc.poll() is not None, "the command did not end"
    return seen


def _logs(directory: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in directory.rglob("*.log*") if p.is_file()}


def _stop(directory: Path, name: str, pid: int) -> None:
    subprocess.run([*SHELLPER_CLI, "--dir", str(directory), "stop", name], capture_output=True, timeout=60,
                   check=True)
    assert wait_gone(pid, 30)


@pytest.mark.parametrize(("how", "command"), [
    ("KEY=VALUE", SHELLPER_CLI), ("KEY from the environment", SHELLPER_CLI),
    ("KEY=VALUE", [sys.executable, "-m", "shellper"]),  # no prefork: the daemon is started after parsing
], ids=["KEY=VALUE", "KEY", "KEY=VALUE, python -m shellper"])
def test_run_env_is_in_no_long_lived_command_line_nor_log(cli_runtime_dir: Path, how: str,
                                                          command: list[str]) -> None:
    """``shellper run --env KEY=VALUE``: the console script starts the daemon-to-be before parsing; it must
    not keep the CLI's argv (a fork would). With ``--env KEY`` the CLI's own argv is clean too."""
    secret = _sentinel()
    option = f"SECRET_TOKEN={secret}" if how == "KEY=VALUE" else "SECRET_TOKEN"
    env = dict(os.environ)
    if how == "KEY=VALUE":
        env.pop("SECRET_TOKEN", None)
    else:
        env["SECRET_TOKEN"] = secret
    proc = subprocess.Popen([*command, "--dir", str(cli_runtime_dir), "run", "--json", "sec",
                             "--no-inherit-env", "--env", option, "--", "sh", "-c", 'echo "got ${#SECRET_TOKEN}"; cat'],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env)
    seen = watch(proc)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    info = LaunchInfo.from_dict(json.loads(out))
    try:
        lines = [(pid, line) for pid, found in seen.items() for line in found]
        others = [(pid, line) for pid, line in lines if pid != proc.pid]
        assert any(b"shellper" in line for _, line in others), f"the prefork was not seen: {lines}"
        # A spawned child shares the CLI's memory, so its command line, until its exec: that moment is
        # allowed (the CLI's line, then another without the secret); a fork that keeps the CLI's is not.
        cli_line, token = seen[proc.pid][0], secret.encode()
        kept = [(pid, found) for pid, found in seen.items() if pid != proc.pid and any(token in x for x in found)
                and not (len(found) > 1 and found[0] == cli_line and all(token not in x for x in found[1:]))]
        assert not kept
        if how != "KEY=VALUE":
            assert not [x for x in lines if secret.encode() in x[1]]
        daemon = _cmdline(info.pid)
        assert daemon and secret.encode() not in daemon
        assert b"sec" in daemon.split(b"\0") and os.fsencode(str(cli_runtime_dir)) in daemon.split(b"\0")
        child = info.child_pid
        assert child is not None
        assert Path(f"/proc/{child}/environ").read_bytes().count(secret.encode()) == 1  # the child got it
    finally:
        _stop(cli_runtime_dir, "sec", info.pid)
    for path, text in _logs(cli_runtime_dir).items():
        assert secret.encode() not in text, path


def test_legacy_main_keeps_only_the_socket_path_in_its_command_line(legacy_env: Legacy) -> None:
    """The Tower's JSON, env and args included, is argv of the first image only; the long-lived process is
    ``python -P -m shellper.daemon.legacymain shellper-main.js {"socketPath":"…"}``, what the Tower's
    scanners match, and nothing else. The config crossed the exec in a memfd, closed after."""
    secret, arg_secret = _sentinel(), _sentinel()
    s = legacy_env.start("/bin/sh", "-c", 'echo "ready ${#API_KEY}"; exec cat', arg_secret,
                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "API_KEY": secret})
    legacy_env.replay_with(s, b"ready 23")
    argv = (_cmdline(s.pid) or b"").split(b"\0")[:-1]
    assert argv[1:] == [b"-P", b"-m", b"shellper.daemon.legacymain", legacy.MARKER.encode(),
                        json.dumps({"socketPath": str(s.sock)}, separators=(",", ":")).encode()]
    fds = {os.readlink(f"/proc/{s.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{s.pid}/fd")}
    assert not [fd for fd in fds if "shellper-legacy-config" in fd], fds
    s.stop()
    for path, text in _logs(legacy_env.dir).items():
        assert secret.encode() not in text and arg_secret.encode() not in text, path


def test_legacy_main_while_it_runs_and_a_bad_config_leave_no_secret(tmp_path: Path) -> None:
    """The first image re-executes before its socket exists; a config it refuses is reported without
    quoting ``env`` or ``args``."""
    secret = _sentinel()
    sock = tmp_path / "run" / "shellper-bad.sock"
    bad = config(sock, "cat", secret, env={"API_KEY": secret, "COUNT": 1})
    done = subprocess.run([sys.executable, "-m", "shellper", "legacy-main", json.dumps(bad)], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    assert "Invalid config: env must be an object of strings" in done.stderr
    assert secret not in done.stderr
    bad = config(sock, "cat", 7, env={"API_KEY": secret})  # type: ignore[arg-type]
    done = subprocess.run([sys.executable, "-m", "shellper", "legacy-main", json.dumps(bad)], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1 and "Invalid config: args must be an array of strings" in done.stderr
    assert secret not in done.stderr


@pytest.mark.parametrize(("argv", "holds"), [
    (["run", "x", "--", "cat"], False),
    (["--dir", "/d", "run", "x", "--cwd", "/tmp", "--", "cat", "-u"], False),
    (["run", "x", "--env", "K=V", "--", "cat"], True),
    (["run", "x", "--env=K=V"], True),
    (["run", "x", "--en", "K=V"], True),  # argparse takes an abbreviation
    (["run", "x", "--e", "K"], True),
    (["run", "x", "--", "env", "K=V", "prog"], True),  # prog's own command line will not show it
    (["run", "x", "--", "sh", "-c", "K=V prog"], True),
    (["run", "--dir=/d", "x", "--", "cat"], False),  # an = before the -- is an option's, not the child's
    (["run", "x"], False),
])
def test_which_command_lines_hold_secrets(argv: list[str], holds: bool) -> None:
    assert holds_secrets(argv) is holds
