"""The peers' habits (dtach, abduco, tmux) in shellper's CLI, driven as a person would: a real terminal
(pexpect's PTY), the real console script, real sessions in a private runtime directory."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from support.launchers import forked_by_a_launcher
from support.paths import SHELLPER_CLI
from support.sessions import left_in
from support.terminals import (
    BASH,
    DETACH,
    PROMPT,
    TIMEOUT,
    Terminals,
    adopt,
    finish,
    shell_terminals,
    wait_all_gone,
)
from support.waiting import poll_until


@pytest.fixture
def terminals() -> Iterator[Terminals]:
    yield from shell_terminals("shph-")


# ------------------------------------------------------------------------------------ create and attach


def test_attach_c_starts_the_session_then_attaches_and_later_only_attaches(terminals: Terminals, launches: str) -> None:
    term = terminals.spawn(terminals.cli_args("attach", "-c", "mk", "--", *BASH))
    term.expect(PROMPT)
    assert forked_by_a_launcher(adopt(terminals, "mk")["pid"]) == (launches == "warm")
    term.send(b"echo made-$((6*7))\r")
    term.expect(b"made-42")
    term.send(DETACH)
    term.expect(rb"\[detached\]")
    assert finish(term) == 0
    again = terminals.spawn(terminals.cli_args("attach", "-c", "mk", "--", "false"))  # running: the command is unused
    again.expect(b"made-42")  # the replay of the same shell
    again.send(b"echo still-$((2*3))\r")
    again.expect(b"still-6")
    again.send(DETACH)
    again.expect(rb"\[detached\]")
    assert finish(again) == 0


def test_without_a_command_attach_c_and_run_start_the_users_shell(terminals: Terminals) -> None:
    terminals.env["SHELL"] = "/bin/sh"
    term = terminals.spawn(terminals.cli_args("attach", "-c", "dflt"))
    term.expect(PROMPT)
    adopt(terminals, "dflt")
    term.send(DETACH)
    assert finish(term) == 0
    terminals.cli("run", "plain")
    adopt(terminals, "plain")
    for name in ("dflt", "plain"):
        assert json.loads(terminals.cli("status", name, "--json").stdout)["argv"] == ["/bin/sh"]
    del terminals.env["SHELL"]
    terminals.cli("run", "nosh")
    adopt(terminals, "nosh")
    assert json.loads(terminals.cli("status", "nosh", "--json").stdout)["argv"] == ["/bin/sh"]


def test_a_command_without_c_is_refused_with_the_line_that_would_work(terminals: Terminals) -> None:
    proc = terminals.cli("attach", "nope", "--", "top", check=False)
    assert proc.returncode == 1
    assert "shellper attach -c nope -- top" in proc.stderr, proc.stderr


# ------------------------------------------------------------------------------------ finished sessions


def _wait_state(terminals: Terminals, name: str, states: tuple[str, ...]) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        status: dict[str, Any] = json.loads(terminals.cli("status", name, "--json").stdout)
        return status if status["state"] in states else None

    found: dict[str, Any] = poll_until(reached, TIMEOUT, interval=0.05, what=f"{name} in {states}")
    return found


def test_run_over_a_finished_session_says_so_and_replace_starts_anew(terminals: Terminals) -> None:
    terminals.run("fin", "sh", "-c", "exit 0", opts=("--restart", "no"))
    _wait_state(terminals, "fin", ("exited", "fatal"))
    term = terminals.spawn(terminals.cli_args("run", "fin", "--", "cat"))
    term.expect(rb"session 'fin' exited \d+ s ago: clean exit.*; --replace to start anew, or `shellper restart fin`")
    assert finish(term) == 1
    term = terminals.spawn(terminals.cli_args("run", "fin", "-f", "--", "cat"))
    assert finish(term) == 0
    adopt(terminals, "fin")
    assert _wait_state(terminals, "fin", ("running",))["argv"] == ["cat"]
    refused = terminals.cli("run", "fin", "--replace", "--", "cat", check=False)  # running: not replaced
    assert refused.returncode == 1 and "already running" in refused.stderr, refused.stderr


def test_restart_runs_the_command_again(terminals: Terminals) -> None:
    terminals.run("again", "sh", "-c", "echo ran-$((40+2))", opts=("--restart", "no"))
    _wait_state(terminals, "again", ("exited", "fatal"))
    term = terminals.spawn(terminals.cli_args("restart", "again"))
    term.expect(b"restarted again")
    assert finish(term) == 0
    poll_until(lambda: terminals.cli("tail", "again", "--plain").stdout.count("ran-42") >= 2, TIMEOUT,
               interval=0.05, what="the command's second run")
    adopt(terminals, "again")


# ------------------------------------------------------------------------------------ the peers' options


def test_r_attaches_read_only_and_e_sets_the_detach_key(terminals: Terminals) -> None:
    terminals.shell("ro")
    term = terminals.attach("ro", "-r", "-e", "^Q")
    term.expect(PROMPT)
    term.send(b"echo typed-$((1+1))\r")  # a viewer's keys go nowhere
    terminals.type_line("ro", "echo sent-$((2+2))")
    term.expect(b"sent-4")
    assert b"typed-2" not in term.before
    term.send(DETACH)  # not the detach key now: a viewer's Ctrl-\\ is dropped like any key
    term.send(b"\x11")
    term.expect(rb"\[detached\]")
    assert finish(term) == 0


def test_global_options_after_the_command(terminals: Terminals) -> None:
    term = terminals.spawn([*SHELLPER_CLI, "run", "late", "--dir", terminals.dir, "--", "cat"])
    assert finish(term) == 0
    adopt(terminals, "late")
    listed = terminals.spawn([*SHELLPER_CLI, "ls", "--dir", terminals.dir])
    listed.expect(rb"late\s+running")
    assert finish(listed) == 0


def test_signal_takes_a_number(terminals: Terminals) -> None:
    terminals.run("num", "sleep", "300", opts=("--restart", "no"))
    term = terminals.spawn(terminals.cli_args("signal", "num", "9"))
    assert finish(term) == 0
    status = _wait_state(terminals, "num", ("exited", "fatal"))
    assert status["last_exit"]["signal"] in ("SIGKILL", "KILL"), status["last_exit"]
    bad = terminals.spawn(terminals.cli_args("signal", "num", "99"))
    bad.expect(b"'99' is not one of")
    assert finish(bad) == 1


def test_stop_several_and_all(terminals: Terminals) -> None:
    for name in ("a1", "a2", "a3", "a4"):
        terminals.run(name, "cat")
    term = terminals.spawn(terminals.cli_args("stop", "a1", "nosuch", "a2"))
    term.expect(b"stopped a1")
    term.expect(b"nosuch")  # reported, and the rest still stopped
    term.expect(b"stopped a2")
    assert finish(term) == 1
    everything = terminals.spawn(terminals.cli_args("stop", "--all"))
    everything.expect(b"stopped a3")
    everything.expect(b"stopped a4")
    assert finish(everything) == 0
    for name in ("a1", "a2", "a3", "a4"):
        assert not wait_all_gone(terminals.started.pop(name))
    assert left_in(terminals.dir) == []  # a stopped session's log is kept in logs/


def test_send_dash_reads_stdin(terminals: Terminals) -> None:
    terminals.run("in", "cat")
    term = terminals.spawn(terminals.cli_args("send", "in", "-"))
    term.send(b"from-stdin\n")
    term.sendeof()
    assert finish(term) == 0
    poll_until(lambda: "from-stdin" in terminals.cli("tail", "in", "--plain").stdout, TIMEOUT, interval=0.05,
               what="what send read from stdin")


# ------------------------------------------------------------------------------------ run's line


def test_run_prints_a_line_for_people_and_json_for_programs(terminals: Terminals) -> None:
    term = terminals.spawn(terminals.cli_args("run", "hu", "--", "cat"))
    term.expect(rb"started hu \(pid (\d+), child pid (\d+)\): `shellper --dir (\S+) attach hu` to attach, "
                rb"Ctrl-\\ to detach\r\n")
    pid, child, directory = term.match.groups()
    assert finish(term) == 0
    assert directory.decode() == terminals.dir
    assert adopt(terminals, "hu")["pid"] == int(pid) and int(child) > 0
    term = terminals.spawn(terminals.cli_args("run", "js", "--json", "--", "cat"))
    term.expect(rb"(\{.*\})\r\n")
    info = json.loads(term.match.group(1))
    assert finish(term) == 0
    assert adopt(terminals, "js")["pid"] == info["pid"] and info["name"] == "js"


# ------------------------------------------------------------------------------------ mistakes


def test_an_unknown_option_shows_its_commands_usage_and_a_missing_double_dash_gets_a_hint(
        terminals: Terminals) -> None:
    term = terminals.spawn(terminals.cli_args("stop", "x", "--bogus"))
    term.expect(rb"usage: shellper stop \[-h\]")
    term.expect(b"shellper stop: error: unrecognized arguments: --bogus")
    assert finish(term) == 2
    term = terminals.spawn(terminals.cli_args("run", "lsl", "ls", "-la", "/tmp"))
    term.expect(rb"usage: shellper run \[-h\]")
    term.expect(b"unrecognized arguments: -la /tmp")
    term.expect(b"hint: put -- before the command, so its own options are not taken for shellper's: "
                b"shellper run lsl -- ls -la /tmp")
    assert finish(term) == 2
    assert os.listdir(terminals.dir) == []  # nothing started


@pytest.mark.parametrize("command", ["attach", "status", "send"])
def test_a_mistyped_name_lists_the_sessions_of_the_directory_searched(terminals: Terminals, command: str) -> None:
    term = terminals.spawn(terminals.cli_args(command, "nothere", *(["x"] if command == "send" else [])))
    term.expect_exact(f"no such session socket; there are no sessions in {terminals.dir}".encode())
    assert finish(term) == 1
    terminals.run("builder", "cat")
    terminals.run("other", "cat")
    term = terminals.spawn(terminals.cli_args(command, "bulder", *(["x"] if command == "send" else [])))
    term.expect_exact(f"sessions in {terminals.dir}: builder, other (did you mean 'builder'?)".encode())
    assert finish(term) == 1


# ------------------------------------------------------------------------------------ nested attach


@pytest.mark.parametrize("relay", [False, True], ids=["handoff", "relay"])
def test_nested_attach_says_so_and_detaches_on_its_own_key(terminals: Terminals, relay: bool) -> None:
    terminals.shell("outer")
    terminals.shell("inner")
    opts = ("--relay",) if relay else ()
    term = terminals.attach("outer", *opts)
    term.expect(PROMPT)
    inner = " ".join([*SHELLPER_CLI, "--dir", terminals.dir, "attach", "inner", *opts])
    term.send(f"{inner}\r".encode())
    term.expect(b"attaching from inside session 'outer'")
    term.expect(rb"Ctrl-\] detaches from 'inner' \(Ctrl-\\ from 'outer'")
    term.send(b"echo in-$((3*3))\r")
    term.expect(b"in-9")
    term.send(b"\x1d")  # Ctrl-]: through the outer attach, which does not take it, to the inner one
    term.expect(rb"\[detached\]")
    term.send(b"echo out-$((4*4))\r")  # still attached to the outer shell
    term.expect(b"out-16")
    term.send(DETACH)  # the outer attach detaches
    term.expect(rb"\[detached\]")
    assert finish(term) == 0
