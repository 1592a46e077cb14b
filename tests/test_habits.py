"""The peers' habits (dtach, abduco, tmux) in shellper's CLI, driven as a person would: a real terminal
(pexpect's PTY), the real console script, real sessions in a private runtime directory."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from test_attach import BASH, DETACH, PROMPT, Sessions, _env, _finish


@pytest.fixture
def sessions() -> Iterator[Sessions]:
    s = Sessions(tempfile.mkdtemp(prefix="shph-", dir="/tmp"), {**_env(), "PS1": "psh> ", "HISTFILE": ""})
    try:
        yield s
    finally:
        s.teardown()


def _adopt(sessions: Sessions, name: str) -> dict[str, Any]:
    """A session the CLI started under test (not through Sessions.run): its ls entry, and its pids noted for
    the teardown's stop and leak check."""
    (entry,) = (s for s in json.loads(sessions.cli("ls", "--json").stdout) if s["name"] == name)
    sessions.started[name] = [entry["pid"]] + ([entry["child_pid"]] if entry.get("child_pid") else [])
    return dict(entry)


# ------------------------------------------------------------------------------------ create and attach


def test_attach_c_starts_the_session_then_attaches_and_later_only_attaches(sessions: Sessions) -> None:
    term = sessions.spawn(sessions.cli_args("attach", "-c", "mk", "--", *BASH))
    term.expect(PROMPT)
    _adopt(sessions, "mk")
    term.send(b"echo made-$((6*7))\r")
    term.expect(b"made-42")
    term.send(DETACH)
    term.expect(rb"\[detached\]")
    assert _finish(term) == 0
    again = sessions.spawn(sessions.cli_args("attach", "-c", "mk", "--", "false"))  # running: the command is unused
    again.expect(b"made-42")  # the replay of the same shell
    again.send(b"echo still-$((2*3))\r")
    again.expect(b"still-6")
    again.send(DETACH)
    again.expect(rb"\[detached\]")
    assert _finish(again) == 0


def test_without_a_command_attach_c_and_run_start_the_users_shell(sessions: Sessions) -> None:
    sessions.env["SHELL"] = "/bin/sh"
    term = sessions.spawn(sessions.cli_args("attach", "-c", "dflt"))
    term.expect(PROMPT)
    _adopt(sessions, "dflt")
    term.send(DETACH)
    assert _finish(term) == 0
    sessions.cli("run", "plain")
    _adopt(sessions, "plain")
    for name in ("dflt", "plain"):
        assert json.loads(sessions.cli("status", name, "--json").stdout)["argv"] == ["/bin/sh"]
    del sessions.env["SHELL"]
    sessions.cli("run", "nosh")
    _adopt(sessions, "nosh")
    assert json.loads(sessions.cli("status", "nosh", "--json").stdout)["argv"] == ["/bin/sh"]


def test_a_command_without_c_is_refused_with_the_line_that_would_work(sessions: Sessions) -> None:
    proc = sessions.cli("attach", "nope", "--", "top", check=False)
    assert proc.returncode == 1
    assert "shellper attach -c nope -- top" in proc.stderr, proc.stderr
