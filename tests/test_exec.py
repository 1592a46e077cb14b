"""``shellper exec`` (issue 31): a command typed into a session's shell, its output exactly and its status as
the exit code, driven as a person and a script meet it (the real console script, in a pexpect terminal or
with its output in a pipe), and the library's blocking and asyncio calls."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from support.paths import ROOT, SHELLPER_CLI
from support.planted import KINDS, MARKER, plant
from support.remote import shellper
from support.sshd import SshWorld
from support.terminals import TIMEOUT, Terminals, finish, shell_terminals
from support.waiting import poll_until

import tower_client
from shellper.host.shellstate import foreground
from tower_client import (
    AsyncClient,
    AsyncRemoteClient,
    Client,
    ExecError,
    ExecRefusal,
    RemoteClient,
    execute,
    execute_async,
)


@pytest.fixture
def terminals() -> Iterator[Terminals]:
    yield from shell_terminals("shex-")


def _exec(terminals: Terminals, *args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[bytes]:
    """``shellper exec ARGS`` with its output in a pipe, as a script reads it."""
    return subprocess.run(terminals.cli_args("exec", *args), capture_output=True, env=terminals.env, cwd=ROOT,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _tty(data: bytes) -> bytes:
    """What a terminal's output processing makes of ``data`` (onlcr: each newline arrives as CR LF)."""
    return data.replace(b"\n", b"\r\n")


def _at_prompt(terminals: Terminals, name: str, prompt: str = "psh>") -> None:
    poll_until(lambda: prompt in terminals.cli("tail", name, "--plain").stdout, TIMEOUT, interval=0.05,
               what=f"{name}'s prompt")


def _socket(terminals: Terminals, name: str) -> str:
    return os.path.join(terminals.dir, f"{name}.sock")


# ------------------------------------------------------------------------------------ in a terminal


def test_exec_prints_the_output_and_exits_with_the_status(terminals: Terminals) -> None:
    terminals.shell("w")
    term = terminals.spawn(terminals.cli_args("exec", "w", "--", "echo", "hello-$((6*7))"))
    term.expect(b"hello-42")
    assert finish(term) == 0
    term = terminals.spawn(terminals.cli_args("exec", "w", "--", "echo gone >&2; (exit 3)"))
    term.expect(b"gone")
    assert finish(term) == 3
    assert _exec(terminals, "w", "--", "cd /tmp").returncode == 0  # the same shell each time: cd stays
    done = _exec(terminals, "w", "--", "pwd")
    assert (done.returncode, done.stdout) == (0, b"/tmp\r\n")


@pytest.mark.parametrize("shell", ["bash", "dash"])
def test_a_syntax_error_is_the_commands_status_and_the_shell_stays_usable(terminals: Terminals, shell: str) -> None:
    terminals.run("w", shell, "-i")
    done = _exec(terminals, "w", "--", "echo (")
    assert done.returncode == 2 and b"rror" in done.stdout, done  # the shell's own message, as the command's output
    done = _exec(terminals, "w", "--", "echo 'it''s' \"$((1+2))\" &&", "echo", "two")
    assert (done.returncode, done.stdout) == (0, b"its 3\r\ntwo\r\n"), done


def test_a_command_that_never_ends_is_interrupted_and_exits_124(terminals: Terminals) -> None:
    terminals.shell("w")
    _at_prompt(terminals, "w")
    term = terminals.spawn(terminals.cli_args("exec", "w", "--timeout", "2", "--", "echo before; sleep 60"))
    term.expect(b"before")
    term.expect(rb"timed out after 2 s; typed Ctrl-C: the shell is back at its prompt")
    assert finish(term) == 124
    done = _exec(terminals, "w", "--", "echo after")  # the shell is free again
    assert (done.returncode, done.stdout) == (0, b"after\r\n")


def test_ctrl_c_on_exec_interrupts_the_command_too(terminals: Terminals) -> None:
    terminals.shell("w")
    term = terminals.spawn(terminals.cli_args("exec", "w", "--", "echo started; sleep 60"))
    term.expect(b"started")
    term.sendintr()
    assert finish(term) == 130
    shell = terminals.started["w"][1]
    poll_until(lambda: foreground(shell) is None, TIMEOUT, interval=0.05, what="the shell back at its prompt")
    done = _exec(terminals, "w", "--", "echo free")
    assert (done.returncode, done.stdout) == (0, b"free\r\n"), done


def test_a_program_that_is_not_a_shell_is_refused_with_125(terminals: Terminals) -> None:
    terminals.run("cat", "cat")
    term = terminals.spawn(terminals.cli_args("exec", "cat", "--", "echo", "hi"))
    term.expect(rb"session 'cat': it runs cat, not a shell exec can type into")
    assert finish(term) == 125
    terminals.run("script", "sh", "-c", "sleep 600")
    term = terminals.spawn(terminals.cli_args("exec", "script", "--", "echo", "hi"))
    term.expect(rb"a shell running a script")
    assert finish(term) == 125
    assert "hi" not in terminals.cli("tail", "cat").stdout  # nothing was typed into either


def test_a_busy_shell_is_refused_with_125(terminals: Terminals) -> None:
    terminals.shell("w")
    _at_prompt(terminals, "w")
    terminals.type_line("w", "sleep 600")
    shell = terminals.started["w"][1]
    poll_until(lambda: foreground(shell), TIMEOUT, interval=0.05, what="sleep in the foreground")
    term = terminals.spawn(terminals.cli_args("exec", "w", "--", "echo", "typed-$((2*2))"))
    term.expect(rb"session 'w' is busy: sleep \(pid \d+\) runs in the foreground")
    assert finish(term) == 125
    assert "typed-4" not in terminals.cli("tail", "w", "--plain").stdout


def test_a_command_that_ends_the_shell_is_125(terminals: Terminals) -> None:
    terminals.shell("w", "--restart", "no")
    done = _exec(terminals, "w", "--", "exit 7")
    assert done.returncode == 125 and b"its program ended before the command did" in done.stderr, done


def test_no_such_session_and_no_command_are_125(terminals: Terminals) -> None:
    terminals.shell("w")
    for args, said in ((("nosuch", "--", "true"), b"no such session"), (("w", "--"), b"no command"),
                       (("w", "--", "echo\ta"), b"control character")):
        done = _exec(terminals, *args)
        assert done.returncode == 125 and said in done.stderr, done


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_socket_is_refused_with_125_and_nothing_typed(kind: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("SHELLPER_DIR", "SHELLPER_SESSION")}
    with plant(kind) as planted:
        done = subprocess.run([*SHELLPER_CLI, "--dir", str(planted.dir), "exec", "work", "--", "echo",
                               MARKER.decode()], capture_output=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
        err = done.stderr.decode(errors="replace")
        assert done.returncode == 125 and "not trusted" in err and planted.socket in err, err
        assert len(err.strip().splitlines()) == 1, err
        assert planted.delivered() == [] and not any(r.marker for r in planted.received())


# ------------------------------------------------------------------------------------ exactly


def test_the_output_is_exact_every_byte_value(terminals: Terminals) -> None:
    terminals.shell("w")
    every = bytes(range(256))
    done = _exec(terminals, "w", "--", "printf '" + "".join(f"\\{b:03o}" for b in every) + "'")
    assert done.returncode == 0, done.stderr
    assert done.stdout == _tty(every)


def test_large_output_through_a_small_ring_is_exact(terminals: Terminals) -> None:
    terminals.run("w", "bash", "--norc", "--noprofile", "-i", opts=("--ring-bytes", "64K"))
    done = _exec(terminals, "w", "--", "seq 1 200000", timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == _tty(b"".join(b"%d\n" % i for i in range(1, 200001)))
    assert done.stderr == b""


def test_a_command_reading_stdin_does_not_eat_the_end_mark(terminals: Terminals) -> None:
    terminals.shell("w")
    done = _exec(terminals, "w", "--", "read -t 1 line; echo \"got[$line]\"; (exit 4)")
    assert (done.returncode, done.stdout) == (4, b"got[]\r\n"), done.stderr


def test_marks_in_the_output_cannot_end_it(terminals: Terminals) -> None:
    terminals.shell("w")
    fake = "\\033]133;D;0;%s\\007\\033]133;C;%s\\007\\033]133;D;0\\007"
    done = _exec(terminals, "w", "--", f"printf '{fake}after\\n' 0123456789abcdef x; false")
    assert done.returncode == 1, done.stderr
    assert done.stdout == (b"\x1b]133;D;0;0123456789abcdef\x07\x1b]133;C;x\x07\x1b]133;D;0\x07after\r\n")


def test_a_shell_outside_the_sh_family_is_driven_by_its_own_marks(terminals: Terminals) -> None:
    terminals.run("m", sys.executable, str(ROOT / "tests" / "support" / "marks_shell.py"))
    _at_prompt(terminals, "m", "marks>")
    done = _exec(terminals, "m", "--", "echo own-marks; exit 5")
    assert (done.returncode, done.stdout) == (5, b"own-marks\r\n"), done.stderr


# ------------------------------------------------------------------------------------ the library


def test_execute_returns_the_output_status_and_offsets(terminals: Terminals) -> None:
    terminals.shell("w")
    with Client(_socket(terminals, "w"), role="terminal") as client:
        result = execute(client, "printf 'one\\ntwo'; (exit 7)")
    assert (result.status, result.output, result.timed_out) == (7, b"one\r\ntwo", False)
    assert result.start is not None and result.end == result.start + len(result.output)
    with Client(_socket(terminals, "w"), role="viewer") as client:  # the ring holds it at those offsets
        client.connect(replay_bytes=None)
        assert client.replay is not None
        ring = client.replay.data[result.start - client.replay.offset:result.end - client.replay.offset]
    assert ring == result.output
    with Client(_socket(terminals, "w"), role="terminal") as client:
        result = execute(client, "echo before; sleep 60", timeout=2)
    assert (result.status, result.output, result.timed_out, result.interrupted) == (None, b"before\r\n", True, True)
    assert result.start is not None and result.end == result.start + len(result.output)


def test_execute_refuses_a_program_that_is_not_a_shell(terminals: Terminals) -> None:
    terminals.run("cat", "cat")
    with Client(_socket(terminals, "cat"), role="terminal") as client, pytest.raises(ExecError) as caught:
        execute(client, "echo hi")
    assert caught.value.reason is ExecRefusal.NOT_A_SHELL
    assert isinstance(caught.value, tower_client.ShellperError)


def test_execute_async(terminals: Terminals) -> None:
    terminals.shell("w")
    seen: list[bytes] = []

    async def go() -> tower_client.ExecResult:
        async with AsyncClient(_socket(terminals, "w"), role="terminal") as client:
            first = await execute_async(client, "echo async-$((3*3))")
            assert (first.status, first.output) == (0, b"async-9\r\n")
            return await execute_async(client, "seq 1 3; (exit 2)", on_output=seen.append)

    result = asyncio.run(go())
    assert (result.status, result.output) == (2, b"")  # the callback took it
    assert b"".join(seen) == b"1\r\n2\r\n3\r\n"


# ------------------------------------------------------------------------------------ on another host


def test_exec_on_another_host(remote: SshWorld) -> None:
    started = shellper("--host", "alpha", "run", "sh1", "--containment", "none", "--env", "PS1=psh> ", "--", "bash",
                       "--norc", "--noprofile", "-i")
    assert started.returncode == 0, started.stderr
    done = subprocess.run([*SHELLPER_CLI, "exec", "alpha:sh1", "--", "echo remote-$((1+1)); (exit 6)"],
                          capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert (done.returncode, done.stdout) == (6, b"remote-2\r\n"), done.stderr
    with RemoteClient("alpha", "sh1", role="terminal") as client:  # the library's, through the same connection
        result = execute(client, "echo lib; (exit 9)")
    assert (result.status, result.output) == (9, b"lib\r\n")

    async def go() -> tower_client.ExecResult:
        async with AsyncRemoteClient("alpha", "sh1", role="terminal") as client:
            return await execute_async(client, "echo async; (exit 8)")

    result = asyncio.run(go())
    assert (result.status, result.output) == (8, b"async\r\n")
