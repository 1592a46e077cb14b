"""Sessions on other hosts over OpenSSH, against real sshd instances on loopback ports (tests/support/sshd.py):
the CLI's ``--host`` and ``HOST:NAME``, attach from a terminal, a resuming client across a killed ssh
connection, reconcile across two hosts and an unreachable one, and a remote of another version."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import time
from pathlib import Path

import pexpect
import pytest
from support.paths import SHELLPER_CLI
from support.remote import FLOOD, FLOOD_LINES, TIMEOUT, shellper
from support.sshd import DOWN, SshWorld
from support.waiting import poll_until

from shellper import __version__
from shellper.host import ssh
from shellper.protocol import wire
from tower_client.cli import main as tower_main
from tower_client.remote_clients import RemoteClient, RemoteResumingClient
from tower_client.resume import Backoff, Reconnected


def sessions_in(directory: Path) -> set[str]:
    return {p.stem for p in directory.glob("*.sock")}


def test_run_ls_send_tail_stop_on_a_host(remote: SshWorld) -> None:
    alpha, beta = remote.hosts["alpha"].runtime, remote.hosts["beta"].runtime
    done = shellper("--host", "alpha", "run", "work", "--containment", "none", "--", "cat")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("started work (pid ")
    assert sessions_in(alpha) == {"work"} and sessions_in(beta) == set()  # it runs on alpha, only there
    listed = json.loads(shellper("ls", "--host", "alpha", "--json").stdout)
    assert [s["name"] for s in listed] == ["work"] and listed[0]["state"] == "running"
    assert json.loads(shellper("--host", "beta", "ls", "--json").stdout) == []
    assert shellper("send", "alpha:work", "hello: over ssh", "--enter").returncode == 0
    poll_until(lambda: "hello: over ssh" in shellper("tail", "alpha:work", "--plain").stdout, TIMEOUT,
               what="the sent line in alpha:work's output")
    status = json.loads(shellper("status", "alpha:work", "--json").stdout)
    assert status["name"] == "work" and status["argv"] == ["cat"]
    missing = shellper("status", "beta:work")
    assert missing.returncode == 1 and "no such session" in missing.stderr
    assert shellper("stop", "alpha:work").stdout.strip() == "stopped work"
    assert sessions_in(alpha) == set()


def test_names_on_several_hosts_each_go_to_their_own_and_ls_takes_a_host(remote: SshWorld, tmp_path: Path) -> None:
    here = tmp_path / "here"
    here.mkdir(mode=0o700)
    env = {**os.environ, "SHELLPER_DIR": str(here)}
    for where in ("--host=alpha", "--host=beta", f"--dir={here}"):
        done = shellper(where, "run", "two", "--containment", "none", "--", "cat")
        assert done.returncode == 0, done.stderr
    try:
        listed, status = pexpect.run(shlex.join([*SHELLPER_CLI, "ls", "alpha:"]), env=env, timeout=TIMEOUT,
                                     withexitstatus=True)  # in a terminal of its own, closed when it ends
        assert status == 0 and re.search(rb"two +running", listed), listed
        said, status = pexpect.run(shlex.join([*SHELLPER_CLI, "stop", "alpha:two", "two", "beta:two"]), env=env,
                                   timeout=TIMEOUT, withexitstatus=True)
        assert status == 0, said
        assert said.count(b"stopped two") == 3, said  # one per host, none refused or looked for elsewhere
        assert sessions_in(remote.hosts["alpha"].runtime) == sessions_in(remote.hosts["beta"].runtime) == set()
        assert sessions_in(here) == set()
    finally:
        if sessions_in(here):
            shellper(f"--dir={here}", "stop", "two")
    both = shellper("ls", "alpha:", "beta:")
    assert both.returncode == 2 and "one host at a time" in both.stderr


def test_an_unreachable_host_is_one_line(remote: SshWorld) -> None:
    done = shellper("--host", DOWN, "ls")
    assert done.returncode == 1
    assert done.stderr.startswith(f"shellper: host {DOWN}: ") and "refused" in done.stderr
    assert done.stderr.count("\n") == 1


def test_attach_from_a_terminal_with_resize_and_replay(remote: SshWorld) -> None:
    started = shellper("--host", "alpha", "run", "sh", "--containment", "none", "--env", "PS1=rsh> ",
                       "--env", "HISTFILE=", "--", "bash", "--norc", "--noprofile", "-i")
    assert started.returncode == 0, started.stderr
    env = {**os.environ, "TERM": "xterm"}
    term = pexpect.spawn(SHELLPER_CLI[0], [*SHELLPER_CLI[1:], "attach", "alpha:sh"], env=env, timeout=TIMEOUT,
                         dimensions=(24, 80))
    try:
        term.expect_exact("rsh> ")
        term.send("echo sum=$((40+2))\r")
        term.expect_exact("sum=42")
        term.setwinsize(33, 101)  # ssh carries the window change; the remote attach resizes the session
        poll_until(lambda: b"33 101" in _ask(term, "stty size"), TIMEOUT, what="the new size in the session")
        term.send("\x1c")  # Ctrl-\ detaches; the shell runs on
        term.expect(pexpect.EOF)
    finally:
        term.close(force=True)
    again = pexpect.spawn(SHELLPER_CLI[0], [*SHELLPER_CLI[1:], "attach", "--host", "alpha", "sh"], env=env,
                          timeout=TIMEOUT, dimensions=(33, 101))
    try:
        again.expect_exact("sum=42")  # replayed from the ring
        again.send("exit\r")
        again.expect(pexpect.EOF)
    finally:
        again.close(force=True)


def test_a_remote_runs_attach_hint_works_from_here(remote: SshWorld) -> None:
    """``shellper --host alpha run`` says ``shellper attach alpha:NAME`` (not the remote's ``attach NAME``,
    which would look here), and that command, typed here, attaches."""
    started = shellper("--host", "alpha", "--dir", str(remote.hosts["alpha"].runtime), "run", "hint",
                       "--containment", "none", "--env", "PS1=hint> ", "--", "bash", "--norc", "--noprofile", "-i")
    assert started.returncode == 0, started.stderr
    hint = started.stdout.split("`")[1]
    assert hint == f"shellper --dir {remote.hosts['alpha'].runtime} attach alpha:hint", started.stdout
    term = pexpect.spawn(SHELLPER_CLI[0], [*SHELLPER_CLI[1:], *shlex.split(hint)[1:]],
                         env={**os.environ, "TERM": "xterm"}, timeout=TIMEOUT, dimensions=(24, 80))
    try:
        term.expect_exact("hint> ")
        term.send("echo on=$((6*7))\r")
        term.expect_exact("on=42")
        term.send("\x1c")  # Ctrl-\ detaches
        term.expect(pexpect.EOF)
    finally:
        term.close(force=True)


def _ask(term: pexpect.spawn, command: str) -> bytes:
    term.send(f"{command}\r")
    term.expect_exact("rsh> ")
    return bytes(term.before)


def test_resume_after_the_ssh_connection_is_killed_mid_flood(remote: SshWorld) -> None:
    started = shellper("--host", "alpha", "run", "flood", "--containment", "none", "--", "python3", "-c", FLOOD)
    assert started.returncode == 0, started.stderr
    expected = b"go\r\n" + b"".join(b"%07d\r\n" % i for i in range(FLOOD_LINES)) + b"DONE\r\n"
    got = bytearray()
    killed: list[int] = []
    reconnects: list[Reconnected] = []
    backoff = Backoff(initial=0.05, max_delay=0.5, max_attempts=20)
    with RemoteResumingClient("alpha", "flood", backoff=backoff, timeout=TIMEOUT) as client:
        client.connect(resume_from=0)
        client.write(b"go\n")
        deadline = time.monotonic() + 60
        while len(got) < len(expected):
            assert time.monotonic() < deadline, f"{len(got)} of {len(expected)} bytes after 60 s"
            item = client.recv(timeout=5)
            if isinstance(item, Reconnected):
                reconnects.append(item)
            elif isinstance(item, wire.Gap):
                pytest.fail(f"lost {item.missed} bytes at {item.offset}")
            elif isinstance(item, wire.Data):
                got += item.data
            if not killed and len(got) >= 1 << 20:  # mid-flood: the host's one ssh connection dies
                pid = ssh.master_pid("alpha")
                assert pid is not None
                os.kill(pid, signal.SIGKILL)  # the master this test's client started (ssh.ensure_master)
                killed.append(pid)
        assert killed and reconnects, "the connection was never dropped"
        assert reconnects[0].gap == 0
        new = ssh.master_pid("alpha")
        assert new is not None and new != killed[0]  # one new shared connection, made by the reconnect
    assert bytes(got) == expected  # every byte once, in order: 0 lost within the ring


def test_remote_client_reports_a_missing_session(remote: SshWorld) -> None:
    client = RemoteClient("alpha", "nothing", timeout=TIMEOUT)
    with pytest.raises(ssh.ShellperError) as caught:
        client.connect()
    client.close()
    assert "alpha:nothing" in str(caught.value) and "no such session" in str(caught.value)


def _reconcile(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, object]]:
    code = tower_main(list(args))
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else {"stderr": err}


def test_reconcile_across_two_hosts_and_an_unreachable_one(remote: SshWorld, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    alpha, beta = remote.hosts["alpha"].runtime, remote.hosts["beta"].runtime
    for host, name in (("alpha", "keep-a"), ("alpha", "drop-a"), ("beta", "keep-b")):
        done = shellper("--host", host, "run", name, "--containment", "none", "--", "sleep", "300")
        assert done.returncode == 0, done.stderr
    registry = tmp_path / "registry.json"
    registry.write_text(json.dumps({"sessions": [{"name": "keep-a", "host": "alpha"},
                                                 {"name": "keep-b", "host": "beta"},
                                                 {"name": "lost", "host": DOWN}]}))
    code, dry = _reconcile(capsys, "--host-timeout", "20", "reconcile", "--registry", str(registry), "--json")
    assert code == 0, dry
    decided = {(d["host"], d["name"]): (d["action"], d["reason"]) for h in dry["hosts"]  # type: ignore[union-attr]
               for d in h["decisions"]}
    assert decided == {("alpha", "drop-a"): ("terminate", "unregistered"), ("alpha", "keep-a"): ("adopt", "running"),
                       ("beta", "keep-b"): ("adopt", "running"), (DOWN, "lost"): ("leave", "host_unreachable")}
    assert sessions_in(alpha) == {"keep-a", "drop-a"}  # a dry run changes nothing
    code, done = _reconcile(capsys, "reconcile", "--registry", str(registry), "--json", "--apply", "--grace", "0.2")
    assert code == 1  # the unreachable host: nothing there could be done, which the exit status says
    by_host = {h["host"]: h for h in done["hosts"]}  # type: ignore[union-attr]
    assert by_host[DOWN]["reachable"] is False and by_host["alpha"]["ok"] and by_host["beta"]["ok"]
    assert {(o["name"], o["result"]) for o in by_host["alpha"]["outcomes"]} == {("drop-a", "terminated"),
                                                                               ("keep-a", "adopted")}
    assert sessions_in(alpha) == {"keep-a"} and sessions_in(beta) == {"keep-b"}
    code, listed = _reconcile(capsys, "--host", "beta", "ls", "--json")
    assert code == 0 and [o["name"] for o in listed] == ["keep-b"]  # type: ignore[union-attr]


def test_a_remote_of_another_version_is_named(remote: SshWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = remote.base / "old-shellper"
    fake.write_text("#!/bin/sh\necho 'shellper 0.0.1'\n")
    fake.chmod(0o755)
    monkeypatch.setenv(ssh.REMOTE_ENV, str(fake))
    done = shellper("--host", "alpha", "ls")
    assert done.returncode == 1
    assert "host alpha: runs shellper 0.0.1, this is shellper " in done.stderr
    assert f"pip install shellper-pty=={__version__}" in done.stderr  # the index's "shellper" is not ours
    with pytest.raises(ssh.VersionMismatch):
        RemoteClient("alpha", "any").connect()
    monkeypatch.setenv(ssh.REMOTE_ENV, str(remote.base / "no-such-shellper"))
    monkeypatch.setattr(ssh, "_checked", {})
    said, status = pexpect.run(shlex.join([*SHELLPER_CLI, "--host", "alpha", "ls"]), timeout=TIMEOUT,
                               withexitstatus=True)  # as a person meets it, in a terminal
    assert status == 1 and b"host alpha: no shellper there" in said, said
    assert f"`pip install shellper-pty=={__version__}` on it".encode() in said and b"shellper==" not in said, said


def test_hosts_that_do_not_answer_are_waited_for_in_parallel_each_with_its_timeout(
        remote: SshWorld, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two "hosts" whose port accepts connections and never says a word: each is given up after the host
    timeout, both at once, and their sessions are left alone."""
    silent = [socket.socket(), socket.socket()]
    try:
        for s in silent:
            s.bind(("127.0.0.1", 0))
            s.listen(8)  # the kernel completes the connection; nobody ever answers on it
        hosts = [f"ssh://127.0.0.1:{s.getsockname()[1]}" for s in silent]
        registry = tmp_path / "registry.json"
        registry.write_text(json.dumps({"sessions": [{"name": f"s{i}", "host": h} for i, h in enumerate(hosts)]}))
        t0 = time.monotonic()
        code, dry = _reconcile(capsys, "--host-timeout", "3", "reconcile", "--registry", str(registry), "--json")
        elapsed = time.monotonic() - t0
    finally:
        for s in silent:
            s.close()
    assert code == 0
    decided = {(d["host"], d["name"], d["action"], d["reason"]) for h in dry["hosts"]  # type: ignore[union-attr]
               for d in h["decisions"]}
    assert decided == {(hosts[0], "s0", "leave", "host_unreachable"), (hosts[1], "s1", "leave", "host_unreachable")}
    assert 2.5 < elapsed < 5.5, f"{elapsed:.1f} s: not one 3 s timeout for both hosts at once"


def test_tower_client_reap_on_a_host_is_that_hosts_identity_checked_reap(remote: SshWorld,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    done = shellper("--host", "beta", "run", "victim", "--containment", "none", "--", "sleep", "300")
    assert done.returncode == 0, done.stderr
    code, refused = _reconcile(capsys, "--host", "beta", "reap", "nothing", "--json")
    assert code == 1 and refused["reaped"] is False
    code, reaped = _reconcile(capsys, "--host", "beta", "reap", "victim", "--grace", "0.2", "--json")
    assert code == 0 and reaped["reaped"] is True and reaped["method"]
    assert sessions_in(remote.hosts["beta"].runtime) == set()
