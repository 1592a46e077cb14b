"""The ten annoyances of issue 31, driven as a person meets them: a real terminal (pexpect's PTY), the real
console script, real sessions in a private runtime directory."""

from __future__ import annotations

import html.parser
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pexpect
import pytest
from support.terminals import BASH, DETACH, PROMPT, TIMEOUT, Terminals, finish, shell_terminals, wait_all_gone
from support.waiting import poll_until


@pytest.fixture
def terminals() -> Iterator[Terminals]:
    yield from shell_terminals("shph-")


def _wait_state(terminals: Terminals, name: str, states: tuple[str, ...]) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        status: dict[str, Any] = json.loads(terminals.cli("status", name, "--json").stdout)
        return status if status["state"] in states else None

    found: dict[str, Any] = poll_until(reached, TIMEOUT, interval=0.05, what=f"{name} in {states}")
    return found


def _at_prompt(terminals: Terminals, name: str) -> None:
    poll_until(lambda: "psh>" in terminals.cli("tail", name, "--plain").stdout, TIMEOUT, interval=0.05,
               what=f"{name}'s prompt")


# ------------------------------------------------------------------------------------ 3: stop


def test_stop_hangs_up_shells_at_once_and_all_together(terminals: Terminals) -> None:
    names = ("m1", "m2", "m3")
    for name in names:  # the session's own grace, 5 s: bash ignores SIGTERM, so only SIGHUP ends it at once
        terminals.shell(name, "--grace", "5")
    for name in names:
        _at_prompt(terminals, name)
    began = time.monotonic()
    term = terminals.spawn(terminals.cli_args("stop", *names))
    for name in names:
        term.expect(f"stopped {name}".encode())
    assert finish(term) == 0
    took = time.monotonic() - began
    assert took < 3.0, f"stop of three shells took {took:.1f} s"
    for name in names:
        assert not wait_all_gone(terminals.started.pop(name))


def test_a_slow_stop_says_what_it_waits_for(terminals: Terminals) -> None:
    terminals.run("stubborn", "sh", "-c", "trap '' HUP TERM; echo ready; while :; do sleep 1; done",
                  opts=("--grace", "3"))
    poll_until(lambda: "ready" in terminals.cli("tail", "stubborn", "--plain").stdout, TIMEOUT, interval=0.05,
               what="the trap set")
    terminals.shell("quick")
    term = terminals.spawn(terminals.cli_args("stop", "stubborn", "quick"))
    term.expect(rb"stopping stubborn\.\.\. 1 s")  # quick is done by then, and not named
    term.expect(b"stopped stubborn")
    term.expect(b"stopped quick")  # in the order named
    assert finish(term) == 0
    for name in ("stubborn", "quick"):
        assert not wait_all_gone(terminals.started.pop(name))


# ------------------------------------------------------------------------------------ 5: detach


@pytest.mark.parametrize("relay", [False, True], ids=["handoff", "relay"])
def test_detach_is_at_once_and_what_is_typed_after_it_reaches_the_shell(terminals: Terminals, relay: bool) -> None:
    terminals.shell("d")
    local = terminals.spawn(["bash", "--norc", "--noprofile", "-i"])
    local.sendline("PS1='lsh> '")
    local.expect(b"lsh> ")
    inside = " ".join([*terminals.cli_args("attach", "d"), *(("--relay",) if relay else ())])
    local.send(f"{inside}\r".encode())
    local.expect(PROMPT)
    local.send(b"echo in-$((2*4))\r")
    local.expect(b"in-8")
    local.send(DETACH + b"echo AFTER-$((5*5))\r")  # one write: the attach reads the key and the line together
    local.expect(rb"\[detached\]")
    local.expect(b"AFTER-25")  # run by the local shell, not lost and not sent into the session
    local.expect(b"lsh> ")
    assert "AFTER" not in terminals.cli("tail", "d", "--plain").stdout


# ------------------------------------------------------------------------------------ 2: attach -c


def test_attach_c_starts_a_finished_session_again_saying_so(terminals: Terminals) -> None:
    terminals.run("fin", "sh", "-c", "echo first-run", opts=("--restart", "no"))
    _wait_state(terminals, "fin", ("exited", "fatal"))
    term = terminals.spawn(terminals.cli_args("attach", "-c", "fin", "--", *BASH))
    term.expect(rb"session 'fin' had ended \(clean exit.*?\); started it again: pid (\d+) runs bash")
    pid = int(term.match.group(1))
    term.expect(PROMPT)  # the new shell, attached
    term.send(b"echo again-$((7*6))\r")
    term.expect(b"again-42")
    term.send(DETACH)
    term.expect(rb"\[detached\]")
    assert finish(term) == 0
    status = _wait_state(terminals, "fin", ("running",))
    assert status["child_pid"] == pid
    terminals.started["fin"].append(pid)


# ------------------------------------------------------------------------------------ 9: restart


def test_restart_reports_once_the_new_child_runs(terminals: Terminals) -> None:
    terminals.run("slow", "sh", "-c", "trap '' HUP TERM; echo ready; while :; do sleep 1; done",
                  opts=("--grace", "2"))
    poll_until(lambda: "ready" in terminals.cli("tail", "slow", "--plain").stdout, TIMEOUT, interval=0.05,
               what="the trap set")
    term = terminals.spawn(terminals.cli_args("restart", "slow"))
    term.expect(b"restarting slow: waiting for its old program to end")
    term.expect(rb"restarted slow: pid (\d+) runs sh -c")
    pid = int(term.match.group(1))
    assert json.loads(terminals.cli("status", "slow", "--json").stdout)["child_pid"] == pid  # running already
    assert finish(term) == 0
    terminals.started["slow"].append(pid)


def test_restart_says_why_the_new_child_did_not_start(terminals: Terminals) -> None:
    where = tempfile.mkdtemp(prefix="shph-cwd-", dir="/tmp")
    terminals.run("nowhere", "sleep", "600", opts=("--cwd", where))
    os.rmdir(where)
    term = terminals.spawn(terminals.cli_args("restart", "nowhere"))
    term.expect(where.encode())
    assert finish(term) == 1
    assert json.loads(terminals.cli("status", "nowhere", "--json").stdout)["state"] == "running"  # left alone


# ------------------------------------------------------------------------------------ 10: paper cuts


def _said(terminals: Terminals, *args: str) -> tuple[int, str]:
    """What a command prints in a terminal, and its exit status."""
    term = terminals.spawn(terminals.cli_args(*args))
    term.expect(pexpect.EOF)
    said = term.before.decode()
    return finish(term), said


def test_attach_without_a_name_asks_for_the_name_alone(terminals: Terminals) -> None:
    status, said = _said(terminals, "attach")
    assert status == 2 and "required: name\r\n" in said, said


def test_bare_shellper_lists_the_sessions(terminals: Terminals) -> None:
    terminals.run("listed", "cat")
    status, said = _said(terminals)
    assert status == 0 and re.search(r"listed +running", said), said


def test_a_mistyped_command_gets_a_did_you_mean(terminals: Terminals) -> None:
    status, said = _said(terminals, "atach", "x")
    assert status == 2 and "unknown command 'atach'; did you mean 'attach'?" in said, said


def test_attach_with_input_that_is_no_terminal_is_refused(terminals: Terminals) -> None:
    terminals.shell("piped")
    term = terminals.spawn(["sh", "-c", 'echo | "$@"', "sh", *terminals.cli_args("attach", "piped")])
    term.expect(b"input is not a terminal")
    term.expect(pexpect.EOF)
    assert b"\x1b[" not in term.before  # nothing drawn on the terminal
    assert finish(term) == 1
    clients = json.loads(terminals.cli("status", "piped", "--json").stdout)["clients"]
    assert [c["client"] for c in clients] == ["shellper-cli:status"]  # no attach ever connected


def test_tail_n_ends_its_last_line(terminals: Terminals) -> None:
    terminals.run("prompt", "sh", "-c", "printf 'one\\ntwo\\nprompt> '; exec sleep 600")
    poll_until(lambda: "prompt>" in terminals.cli("tail", "prompt").stdout, TIMEOUT, interval=0.05,
               what="the prompt")
    status, said = _said(terminals, "tail", "prompt", "-n", "2")
    assert status == 0 and said.endswith("two\r\r\nprompt> \r\n"), repr(said)  # ONLCR made the \r\n \r\r\n
    assert terminals.cli("tail", "prompt", "-n", "1").stdout == "prompt> \n"  # a pipe: lines end too


# ------------------------------------------------------------------------------------ 4: ls


LONG_ERROR = "RuntimeError: CUDA out of memory while allocating a tensor of a size nobody expected"
JSON_KEYS = {"name", "state", "reason", "pid", "child_pid", "uptime", "clients", "ring_bytes", "last_exit", "command",
             "next_restart_at", "owner", "containment", "cgroup", "working_dir", "labels", "locked", "answers",
             "status"}


def test_ls_fits_the_terminal_and_l_shows_everything(terminals: Terminals) -> None:
    terminals.shell("work")
    terminals.run("train", "sh", "-c", f"echo '{LONG_ERROR}' >&2; exit 3", opts=("--backoff-initial", "0.05"))
    terminals.run("notes", "sh", "-c", "exit 0", opts=("--restart", "no"))
    _wait_state(terminals, "train", ("fatal",))
    _wait_state(terminals, "notes", ("exited",))
    listed = terminals.spawn(terminals.cli_args("ls"), dimensions=(24, 80))
    listed.expect(pexpect.EOF)
    lines = listed.before.decode().splitlines()
    assert finish(listed) == 0
    assert lines[0].split() == ["NAME", "STATE", "UPTIME", "CLIENTS", "COMMAND", "LAST", "EXIT"], lines
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)  # nothing wraps
    assert re.search(r"^\+  train +fatal .* crash: exit 3, \d+ s ago$", "\n".join(lines), re.M), lines
    everything = terminals.spawn(terminals.cli_args("ls", "-l"), dimensions=(24, 80))
    everything.expect(pexpect.EOF)
    long = everything.before.decode()
    assert finish(everything) == 0
    assert "PID" in long and "CONTAINMENT" in long and LONG_ERROR in long, long  # in full, wrapping
    listed_json = json.loads(terminals.cli("ls", "--json").stdout)
    assert {key for s in listed_json for key in s} == JSON_KEYS


def test_a_session_started_again_no_longer_says_not_restarted(terminals: Terminals) -> None:
    with tempfile.TemporaryDirectory(prefix="shph-flag-") as where:
        flag = os.path.join(where, "ran-once")
        terminals.run("again", "sh", "-c", f"test -e {flag} && exec sleep 600; touch {flag}",
                      opts=("--restart", "no"))
        _wait_state(terminals, "again", ("exited",))
        terminals.cli("restart", "again")
        pid = _wait_state(terminals, "again", ("running",))["child_pid"]
        terminals.started["again"].append(pid)
    listed = terminals.spawn(terminals.cli_args("ls", "-l"), dimensions=(24, 200))
    listed.expect(rb"again +running .*not restarted \(restart mode no\); started again since\r\n")
    assert finish(listed) == 0


# ------------------------------------------------------------------------------------ labels


def test_labels_are_set_listed_found_and_kept_in_the_record(terminals: Terminals) -> None:
    terminals.run("web", "cat")
    terminals.run("db", "cat")
    status, said = _said(terminals, "set", "web", "team=infra", "task=T-42")
    assert status == 0 and said == "", said
    assert _said(terminals, "set", "db", "team=data") == (0, "")
    status, said = _said(terminals, "ls", "--where", "team=infra")
    assert status == 0 and re.search(r"^ +web +running", said, re.M) and "db" not in said, said
    listed = terminals.spawn(terminals.cli_args("ls", "-l"), dimensions=(24, 200))
    listed.expect(rb"web +running .* task=T-42,team=infra ")
    assert finish(listed) == 0
    assert _said(terminals, "set", "web", "task=") == (0, "")  # KEY= removes it
    (web,) = (s for s in json.loads(terminals.cli("ls", "--json").stdout) if s["name"] == "web")
    assert web["labels"] == {"team": "infra"}
    with open(os.path.join(terminals.dir, "web.json")) as f:
        assert json.load(f)["labels"] == {"team": "infra"}  # what a Tower reads, and ls of a dead shellper
    assert _said(terminals, "set", "web") == (0, "team=infra\r\n")
    status, said = _said(terminals, "status", "web")
    assert status == 0 and "labels team=infra" in said, said
    status, said = _said(terminals, "set", "web", "bad key=x", "ok=1")
    assert status == 1 and "label key 'bad key'" in said, said
    status, said = _said(terminals, "set", "web", "k=\x1b[2J")
    assert status == 1 and "control character" in said, said
    assert json.loads(terminals.cli("status", "web", "--json").stdout)["labels"] == {"team": "infra"}  # unchanged


# ------------------------------------------------------------------------------------ the working directory


def _long_listing(terminals: Terminals) -> str:
    listed = terminals.spawn(terminals.cli_args("ls", "-l"), dimensions=(24, 250))
    listed.expect(pexpect.EOF)
    said = listed.before.decode()
    assert finish(listed) == 0
    return said


def test_ls_l_and_status_follow_the_sessions_directory(terminals: Terminals) -> None:
    terminals.shell("wd")
    term = terminals.attach("wd")
    term.expect(PROMPT)
    with tempfile.TemporaryDirectory(prefix="shph-wd-") as where:
        term.send(f"cd {where}\r".encode())  # bash announces no directory: the kernel's word (/proc)
        term.expect(PROMPT)
        poll_until(lambda: re.search(rf"^ +wd +running .* {re.escape(where)} +bash", _long_listing(terminals), re.M),
                   TIMEOUT, interval=0.1, what="ls -l showing the directory cd went to")
        status, said = _said(terminals, "status", "wd")
        assert status == 0 and f"now in {where} (the kernel says)" in said, said
        # a shell that announces its directory (zsh, fish, VTE's bash snippet) is believed: OSC 7, its host this one
        term.send(b"printf '\\033]7;file://%s/srv/from%%20osc7\\007' \"$(hostname)\"\r")
        term.expect(PROMPT)
        poll_until(lambda: "now in /srv/from osc7 (its shell says, by OSC 7)" in _said(terminals, "status", "wd")[1],
                   TIMEOUT, interval=0.1, what="status showing the announced directory")
        term.send(b"cd /\r")
        term.expect(PROMPT)
    term.send(DETACH)
    term.expect(rb"\[detached\]")
    assert finish(term) == 0


# ------------------------------------------------------------------------------------ screen --html


class _Page(html.parser.HTMLParser):
    """What a browser would make of the page: its elements, its text, the styles of the text's spans."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text = ""
        self.styled: list[tuple[str, str]] = []
        self._style: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "span":
            self._style.append(dict(attrs).get("style") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "span":
            self._style.pop()

    def handle_data(self, data: str) -> None:
        self.text += data
        if self._style:
            self.styled.append((data, self._style[-1]))


def test_screen_html_is_a_page_with_the_colours_and_no_markup_of_the_programs(terminals: Terminals) -> None:
    terminals.shell("agent")
    term = terminals.attach("agent")
    term.expect(PROMPT)
    term.send(b"for i in $(seq 1 40); do echo early-$i; done\r")
    term.expect(PROMPT)
    hostile = "<script>alert(1)</script></pre><img src=x onerror=alert(2)> & done"
    term.send(f"printf '\\033[1;31mFAILED\\033[0m \\033[38;2;0;128;255m%s\\033[0m\\n' '{hostile}'\r".encode())
    term.expect(b"FAILED")
    term.expect(PROMPT)
    term.send(DETACH)
    term.expect(rb"\[detached\]")
    assert finish(term) == 0
    page = _Page()
    page.feed(terminals.cli("screen", "agent", "--html", "--scrollback", "100").stdout)
    assert set(page.tags) == {"html", "head", "meta", "title", "style", "body", "pre", "span"}, page.tags
    assert hostile in page.text  # as text, whole
    assert ("FAILED", "color:#ff0000;font-weight:bold") in page.styled  # bold red: xterm's bright red
    assert (hostile, "color:#0080ff") in page.styled
    assert "early-1\n" in page.text and "early-40\n" in page.text  # the scrollback, then the screen
    assert page.text.index("early-1\n") < page.text.index("FAILED")
    status, said = _said(terminals, "screen", "agent", "--html", "--json")
    assert status == 1 and "not with --json" in said, said


# ------------------------------------------------------------------------------------ SHELLPER_SESSION in prompts


def _snippets(shell: str) -> str:
    """The code blocks of docs/PROMPT.md's section for ``shell``, as a start-up file."""
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "PROMPT.md")) as f:
        section = f.read().split(f"## {shell} ")[1].split("\n## ")[0]
    return "\n".join(re.findall(rf"```{shell}\n(.*?)```", section, re.S))


def test_the_documented_bash_snippets_name_the_session_and_announce_its_directory(terminals: Terminals) -> None:
    with tempfile.TemporaryDirectory(prefix="shph-rc-") as where:
        rc = os.path.join(where, "bashrc")
        with open(rc, "w") as f:
            f.write("PS1='psh> '\n" + _snippets("bash"))
        terminals.run("docs", "bash", "--rcfile", rc, "--noprofile", "-i")
        term = terminals.attach("docs")
        term.expect(rb"\[docs\] psh> ")
        term.send(f"cd {where}\r".encode())
        term.expect(rb"\[docs\] psh> ")
        poll_until(lambda: f"now in {where} (its shell says, by OSC 7)" in _said(terminals, "status", "docs")[1],
                   TIMEOUT, interval=0.1, what="status showing the directory bash announced")
        term.send(b"cd /\r")
        term.expect(rb"\[docs\] psh> ")
        term.send(DETACH)
        term.expect(rb"\[detached\]")
        assert finish(term) == 0
