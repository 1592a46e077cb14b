"""The terminal type a session's program is told: the user's own when this machine knows it, as the peers do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.terminals import BASH, DETACH, PROMPT, Terminals, adopt, finish, shell_terminals

from shellper.core.defaults import DEFAULT_TERM
from shellper.host.terminfo import known_terminal, session_term, terminfo_dirs


@pytest.fixture
def terminals() -> Iterator[Terminals]:
    yield from shell_terminals("shpt-")


def _entry(root: Path, name: str, hexdir: bool = False) -> None:
    first = f"{ord(name[0]):x}" if hexdir else name[0]
    (root / first).mkdir(parents=True, exist_ok=True)
    (root / first / name).write_bytes(b"\x1a\x01")  # a terminfo file's magic: only its presence is read


@pytest.mark.parametrize(("term", "where", "expected"), [
    ("my-term", "TERMINFO", "my-term"),
    ("my-term", "HOME", "my-term"),  # ~/.terminfo
    ("my-term", "TERMINFO_DIRS", "my-term"),
    ("my-term", "hex", "my-term"),  # macOS's layout: the first letter's hex code
    ("my-term", None, DEFAULT_TERM),  # no entry anywhere
    ("dumb", "TERMINFO", DEFAULT_TERM),  # known, but nothing can be drawn on it
    ("", None, DEFAULT_TERM),
    ("../x", "TERMINFO", DEFAULT_TERM),  # never a path
])
def test_session_term_is_the_users_when_known(tmp_path: Path, term: str, where: str | None, expected: str) -> None:
    env = {"TERM": term, "HOME": str(tmp_path / "home")}
    if where is not None and term and "/" not in term:
        root = {"TERMINFO": tmp_path / "ti", "HOME": tmp_path / "home" / ".terminfo",
                "TERMINFO_DIRS": tmp_path / "tid", "hex": tmp_path / "ti"}[where]
        _entry(root, term, hexdir=where == "hex")
        if where in ("TERMINFO", "hex"):
            env["TERMINFO"] = str(root)
        elif where == "TERMINFO_DIRS":
            env["TERMINFO_DIRS"] = f"{root}:"
    assert session_term(env) == expected


def test_terminfo_dirs_follow_ncurses_order() -> None:
    env = {"TERMINFO": "/a", "HOME": "/h", "TERMINFO_DIRS": "/b::/c"}
    dirs = terminfo_dirs(env)
    assert dirs[:4] == ["/a", "/h/.terminfo", "/b", "/etc/terminfo"]
    assert dirs.index("/c") < len(dirs) - 4  # before the system's, which close the list
    assert not known_terminal("no-such-terminal-type", {})


@pytest.mark.skipif(not known_terminal("xterm-color", {}), reason="this machine has no terminfo entry for "
                    "xterm-color (ncurses-base's /lib/terminfo/x/xterm-color)")
@pytest.mark.parametrize(("user_term", "expected"), [("xterm-color", "xterm-color"),
                                                      ("no-such-term-here", DEFAULT_TERM)])
def test_a_session_started_from_a_terminal_gets_its_term(terminals: Terminals, user_term: str,
                                                         expected: str) -> None:
    """`attach -c` from a terminal whose TERM is known here passes it on; an unknown one gets the default."""
    terminals.env["TERM"] = user_term
    term = terminals.spawn(terminals.cli_args("attach", "-c", "tt", "--", *BASH))
    term.expect(PROMPT)
    adopt(terminals, "tt")
    term.send(b"echo term=$TERM.\r")
    term.expect(f"term={expected}.".encode())
    term.send(DETACH)
    term.expect(rb"\[detached\]")
    assert finish(term) == 0
    run = terminals.cli("run", "--json", "rr", "--", "sh", "-c", "echo run-term=$TERM.; sleep 60")
    assert run.returncode == 0
    adopt(terminals, "rr")
    shown = terminals.spawn(terminals.cli_args("tail", "rr", "--follow", "--plain"))
    shown.expect(f"run-term={expected}.".encode())
