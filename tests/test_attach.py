"""``shellper attach`` driven as a person would: a real session, a real terminal (pexpect's PTY), keys.

Every session is started with the CLI in a short runtime directory under /tmp (the socket path limit is
108 bytes) and stopped in teardown, which then checks that nothing is left: no socket, record or lock
file, no shellper and no child process. Synchronisation is always an expect() with a deadline.
Frame sequences a real session produces only by chance (an EXIT in the same read as WELCOME) come
from a scripted fake shellper on a real Unix socket instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pexpect
import psutil
import pytest
from support.frames import wait_output
from support.paths import SHELLPER_CLI
from support.terminals import BASH, DETACH, PROMPT, TIMEOUT, Terminals, cli_env, finish, wait_all_gone
from support.waiting import poll_until

from shellper.cli.attach import DetachKeyError, attach, describe, exit_status, parse_detach_key
from shellper.protocol import wire

REPO = Path(__file__).resolve().parents[1]
# A full-screen program: enters the alternate screen, writes more than the ring keeps (so a replay
# starts after the ?1049h and only the preamble can restore it), draws its screen and waits.
ALT_SCREEN_PROGRAM = r"""
import sys
w = sys.stdout.write
w("\x1b[?1049h\x1b[H\x1b[2J")
for i in range(1500):
    w("filler %05d %s\r\n" % (i, "x" * 60))
w("\x1b[H\x1b[2J" + "SCREEN-" + "A")
sys.stdout.flush()
sys.stdin.readline()
"""


@pytest.fixture(scope="module", params=["handoff", "relay"])
def how(request: pytest.FixtureRequest) -> str:
    """Each terminal test runs twice: the terminal handed to the shellper (the default), and relayed.
    Module-scoped, so each way gets its own shared shell (a test's markers must be new to its replay)."""
    return str(request.param)


@pytest.fixture
def terminals(how: str) -> Iterator[Terminals]:
    """A runtime directory of its own, for tests that end or change their sessions."""
    s = Terminals(tempfile.mkdtemp(prefix="shpa-", dir="/tmp"), cli_env())
    s.attach_opts = ("--relay",) if how == "relay" else ()
    try:
        yield s
    finally:
        s.teardown()


@pytest.fixture(scope="module")
def _shared(how: str) -> Iterator[Terminals]:
    s = Terminals(tempfile.mkdtemp(prefix="shps-", dir="/tmp"), cli_env())
    s.attach_opts = ("--relay",) if how == "relay" else ()
    try:
        s.shell("sh")
        yield s
    finally:
        s.teardown()


@pytest.fixture
def shared(_shared: Terminals) -> Iterator[Terminals]:
    """One long-lived shell session ``sh`` for the tests that only attach, type and detach.

    Each test types its own markers (computed by the shell, so the echo of the typed line never matches).
    """
    try:
        yield _shared
    finally:
        _shared.close_terminals()


# ------------------------------------------------------------------------------------------- pure logic


@pytest.mark.parametrize(("spec", "byte"), [
    ("^\\", 0x1C), ("^Q", 0x11), ("^q", 0x11), ("^A", 0x01), ("^@", 0x00), ("^[", 0x1B), ("^]", 0x1D),
    ("^_", 0x1F), ("^?", 0x7F), ("^", 0x5E), ("q", ord("q")), ("~", ord("~")), ("\x1d", 0x1D),
    ("none", None), ("", None),
])
def test_parse_detach_key(spec: str, byte: int | None) -> None:
    assert parse_detach_key(spec) == byte


@pytest.mark.parametrize("spec", ["^1", "^ ", "^é", "ab", "é", "C-a", "^\\\\"])
def test_parse_detach_key_rejects(spec: str) -> None:
    with pytest.raises(DetachKeyError) as info:
        parse_detach_key(spec)
    assert info.value.spec == spec


@pytest.mark.parametrize(("fields", "status", "text"), [
    ({"code": 3, "signal": None}, 3, "code 3"),
    ({"code": 0, "signal": None}, 0, "code 0"),
    ({"code": None, "signal": "SIGKILL"}, 137, "killed by SIGKILL"),
    ({"code": None, "signal": "TERM"}, 143, "killed by TERM"),
    ({"code": None, "signal": "SIGSEGV", "core": True}, 139, "killed by SIGSEGV (core dumped)"),
    ({"code": None, "signal": None, "reason": "exec failed: ENOENT"}, 1, "exec failed: ENOENT"),
    ({"code": 1, "signal": None, "reason": "crash: exit 1 after 2 s"}, 1, "crash: exit 1 after 2 s"),
])
def test_exit_status_and_description(fields: dict[str, Any], status: int, text: str) -> None:
    frame = wire.Exit(**fields)
    assert exit_status(frame) == status
    assert describe(frame) == text


# ------------------------------------------------------------------------------------------- scripted shellper
# A fake shellper on a real Unix socket sends a fixed byte string right after HELLO, in one write: frames
# that arrive together with WELCOME and REPLAY are the case a real session produces only by chance.

WELCOME = wire.Welcome(version=wire.PROTOCOL_VERSION, name="fake", shellper_pid=1, shellper_start_time=1,
                       boot_id="b", instance_id="i", state="running", cols=80, rows=24, ring_start=0, ring_end=6)
HANDSHAKE = wire.encode(WELCOME) + wire.encode(wire.Replay(offset=0, data=b"hello\n"))


def _exit(**fields: Any) -> bytes:
    return wire.encode(wire.Exit(**{"code": None, "signal": None, **fields}))


def _data(data: bytes) -> bytes:
    return wire.encode_data(data)


def _serve_once(path: str, script: bytes, hold: float) -> threading.Thread:
    """Accept one client, answer its HELLO with ``script``, keep the connection ``hold`` s at most."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def serve() -> None:
        with server:
            conn, _ = server.accept()
            with conn:
                decoder = wire.Decoder()
                while not any(isinstance(e, wire.Hello) for e in decoder.events()):
                    decoder.feed(conn.recv(65536))
                conn.sendall(script)
                conn.settimeout(hold)
                with contextlib.suppress(OSError):
                    while conn.recv(65536):
                        pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def _attach_with_pipes(path: str, runner: Callable[[Callable[[], int]], int] = lambda run: run()) -> tuple[int, bytes]:
    """Attach to the fake at ``path`` with pipes as the terminal: (exit status, everything shown)."""
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        status = runner(lambda: attach(path, name="fake", stdin_fd=stdin_r, stdout_fd=out_w))
        os.close(out_w)
        return status, b"".join(iter(lambda: os.read(out_r, 65536), b""))
    finally:
        for fd in (stdin_r, stdin_w, out_r):
            os.close(fd)
        with contextlib.suppress(OSError):
            os.close(out_w)


@pytest.mark.parametrize(("script", "status", "shown", "err"), [
    (_exit(code=5), 5, [b"hello", b"[exited: code 5]"], ""),
    (_exit(signal="SIGSEGV", core=True), 139, [b"[exited: killed by SIGSEGV (core dumped)]"], ""),
    (wire.encode(wire.Gap(offset=106, missed=100)) + _data(b"later") + _exit(code=0),
     0, [b"hello", b"[shellper: 100 bytes skipped]", b"later", b"[exited: code 0]"], ""),
    (_data(b"\x1b[?1049h\x1b[?1000hTUI") + _exit(code=1),
     1, [b"TUI", b"\x1b[?1000l", b"\x1b[?1049l", b"[exited: code 1]"], ""),
    (_exit(code=1, state="backoff", restart_in=0.5, reason="crash") + _data(b"again") + _exit(code=2),
     2, [b"[exited: crash; restarting in 0.5 s]", b"again", b"[exited: code 2]"], ""),
    (wire.encode(wire.Error(code="x", message="not now")) + wire.HEADER.pack(0x7E, 2) + b"??" + _exit(code=0),
     0, [b"shellper: not now", b"[exited: code 0]"], ""),
    (wire.encode(wire.Error(code="replaced", message="go away", fatal=True)), 1, [b"hello"], "shellper: go away"),
    (b"", 1, [b"hello", b"[session closed]"], ""),
], ids=["exit", "signal", "gap", "modes-reset", "backoff", "error-unknown-frame", "fatal-error", "closed"])
def test_frames_after_the_handshake(tmp_path: Path, capsys: pytest.CaptureFixture[str], script: bytes,
                                    status: int, shown: list[bytes], err: str) -> None:
    path = str(tmp_path / "fake.sock")
    # The fake closes after 3 s: an attach that missed a frame then ends with "[session closed]", status 1.
    server = _serve_once(path, HANDSHAKE + script, hold=3.0 if script else 0.0)
    got, out = _attach_with_pipes(path)
    server.join(timeout=TIMEOUT)
    assert got == status
    pos = 0
    for piece in shown:  # each in order
        found = out.find(piece, pos)
        assert found >= 0, f"{piece!r} not after offset {pos} in {out!r}"
        pos = found + len(piece)
    assert err in capsys.readouterr().err


def test_attach_off_the_main_thread_runs_without_signal_handling(tmp_path: Path) -> None:
    """Signal handlers can only be set on the main thread: elsewhere attach goes on without them."""
    path = str(tmp_path / "fake.sock")
    fds_before = len(os.listdir("/proc/self/fd"))
    server = _serve_once(path, HANDSHAKE + _exit(code=4), hold=0.0)
    before = signal.getsignal(signal.SIGWINCH)

    def on_a_worker_thread(run: Callable[[], int]) -> int:
        box: list[int] = []
        worker = threading.Thread(target=lambda: box.append(run()))
        worker.start()
        worker.join(timeout=TIMEOUT)
        return box[0]

    status, out = _attach_with_pipes(path, on_a_worker_thread)
    server.join(timeout=TIMEOUT)
    assert status == 4 and b"[exited: code 4]" in out
    assert signal.getsignal(signal.SIGWINCH) == before
    assert len(os.listdir("/proc/self/fd")) == fds_before, "the wakeup pipe is closed again"


# ------------------------------------------------------------------------------------------- attach


def test_attach_replays_forwards_input_and_detaches(shared: Terminals) -> None:
    shared.type_line("sh", "echo pre-$((2*3))")
    watch = shared.follow("sh")
    watch.expect("pre-6")

    term = shared.attach("sh")
    term.expect("pre-6")  # from the replay
    term.send(b"echo hi-$((6*7))\r")
    term.expect("hi-42")
    term.send(DETACH)
    term.expect(re.escape(b"[detached]"))
    assert finish(term) == 0

    # The session did not notice: the same shell runs on, and a later attach replays it all.
    shared.type_line("sh", "echo still-$((3*3))")
    watch.expect("still-9")
    again = shared.attach("sh")
    again.expect("hi-42")
    again.expect("still-9")
    again.send(DETACH)
    again.expect(re.escape(b"[detached]"))
    assert finish(again) == 0


def _log_has(path: str, pattern: str, timeout: float = TIMEOUT) -> str:
    """The session log's text once ``pattern`` (a regex) is in it; polled with a deadline."""
    poll_until(lambda: re.search(pattern, Path(path).read_text(errors="replace")), timeout,
               what=f"{pattern!r} in {path}")
    return Path(path).read_text(errors="replace")


def test_the_log_records_attach_and_detach_with_role_and_pid(shared: Terminals) -> None:
    term = shared.attach("sh")
    term.expect(re.escape(PROMPT))
    log = os.path.join(shared.dir, "sh.log")
    attached = rf"client (\d+) attached: terminal, pid {term.pid} "
    assert re.search(attached, _log_has(log, attached))
    term.send(DETACH)
    term.expect(re.escape(b"[detached]"))
    assert finish(term) == 0
    detached = rf"client (\d+) detached: terminal, pid {term.pid} \("
    text = _log_has(log, detached)
    assert re.search(detached, text), text[-2000:]
    ids = {m.group(1) for m in re.finditer(rf"client (\d+) (?:at|de)tached: terminal, pid {term.pid} ", text)}
    assert len(ids) == 1  # one client id in both lines


def test_detach_key_is_never_forwarded(shared: Terminals) -> None:
    term = shared.attach("sh", "--detach-key", "^A")
    term.expect(re.escape(PROMPT))
    # Ctrl-\ is an ordinary key now: it reaches the program (cat -v shows it as ^\), no detach.
    term.send(b"stty -isig; echo go-$((1+1)); cat -v\r")
    term.expect("go-2")  # the terminal no longer turns ^\ into SIGQUIT
    term.send(b"a\x1cb\r")
    term.expect(re.escape(b"a^\\b"))
    term.send(b"\x04")
    term.send(b"stty isig; echo k-$((8*8))\r")
    term.expect("k-64")
    # The detach key and whatever follows it in the same read stay here.
    term.send(b"echo lost-$((9*9))\x01\r")
    term.expect(re.escape(b"[detached]"))
    assert finish(term) == 0
    shared.type_line("sh", "\x15echo after-$((5*5))")  # ^U clears the half-typed line
    watch = shared.follow("sh")
    watch.expect("after-25")
    assert b"lost-81" not in watch.before


def test_a_detach_key_typed_ahead_detaches(shared: Terminals) -> None:
    """Typed as soon as the replay shows (attach set raw mode before connecting): the shellper may act
    on it before attach has even reported the window size; that must read as a detach, never as a
    closed session."""
    for _ in range(5):
        term = shared.attach("sh")
        term.expect(re.escape(PROMPT))
        term.send(DETACH)
        term.expect(re.escape(b"[detached]"))
        assert finish(term) == 0


def test_bad_detach_key_is_one_line_and_status_2(shared: Terminals) -> None:
    proc = shared.cli("attach", "sh", "--detach-key", "^1", check=False)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "--detach-key" in proc.stderr


def test_no_replay_shows_only_new_output(shared: Terminals) -> None:
    shared.type_line("sh", "echo old-$((4*4))")
    shared.follow("sh").expect("old-16")
    term = shared.attach("sh", "--no-replay")
    term.send(b"echo new-$((5*5))\r")
    term.expect("new-25")
    assert b"old-16" not in term.before
    term.send(DETACH)
    assert finish(term) == 0


def test_read_only_does_not_forward_input(shared: Terminals) -> None:
    shared.type_line("sh", "echo mark-$((1+1))")
    term = shared.attach("sh", "--read-only")
    term.expect("mark-2")  # attached: the replay arrived
    term.send(b"echo ro-$((3*4))\r")
    term.send(DETACH)
    term.expect(re.escape(b"[detached]"))
    assert b"shellper:" not in term.before  # it did not even try (no 'viewer may not send input')
    assert finish(term) == 0
    # Had the input been forwarded, the shell would have run it before this later line.
    shared.type_line("sh", "echo after-$((7*8))")
    watch = shared.follow("sh")
    watch.expect("after-56")
    assert b"ro-12" not in watch.before
    assert "ro-12" not in shared.cli("tail", "sh", "--plain").stdout


_STTY = rb"([0-9a-f]+(?::[0-9a-f]+){8,})\r\n"


def _wrapped_attach(terminals: Terminals, name: str) -> pexpect.spawn:
    """attach between two ``stty -g``: what the terminal was before, and what it is after."""
    attach_cmd = " ".join(shlex.quote(a) for a in terminals.cli_args("attach", name))
    script = f"stty -g; {attach_cmd}; echo rc=$?; stty -g"
    return terminals.spawn(["bash", "--norc", "--noprofile", "-c", script])


def test_terminal_restored_after_detach(shared: Terminals) -> None:
    term = _wrapped_attach(shared, "sh")
    term.expect(_STTY)
    before = term.match.group(1)
    term.send(b"echo raw-$((2*21))\r")
    term.expect("raw-42")
    term.send(DETACH)  # in cooked mode this byte would be SIGQUIT (rc 131), not a detach
    term.expect(re.escape(b"[detached]"))
    term.expect(rb"rc=(\d+)")
    assert term.match.group(1) == b"0"
    term.expect(_STTY)
    assert term.match.group(1) == before
    assert finish(term) == 0


def test_sigterm_restores_terminal(shared: Terminals) -> None:
    term = _wrapped_attach(shared, "sh")
    term.expect(_STTY)
    before = term.match.group(1)
    term.send(b"echo up-$((3*11))\r")
    term.expect("up-33")  # attached and in raw mode
    attach_pid = next(p.pid for p in psutil.Process(term.pid).children() if "attach" in p.cmdline())
    os.kill(attach_pid, signal.SIGTERM)
    term.expect(rb"rc=(\d+)")
    assert term.match.group(1) == b"143"
    term.expect(_STTY)
    assert term.match.group(1) == before
    assert finish(term) == 0
    shared.type_line("sh", "echo alive-$((6*6))")  # the session is unaffected
    shared.follow("sh").expect("alive-36")


def test_resize_follows_the_terminal(shared: Terminals) -> None:
    term = shared.attach("sh", dimensions=(30, 100))
    term.send(b"stty size\r")
    term.expect(rb"30 100\r\n")
    term.setwinsize(40, 120)
    term.send(b"stty size\r")
    term.expect(rb"40 120\r\n")
    term.send(DETACH)
    assert finish(term) == 0


def test_send_tail_and_ls(shared: Terminals) -> None:
    shared.type_line("sh", "echo x-$((4*4))")
    shared.follow("sh").expect("x-16")
    tail = shared.cli("tail", "sh", "--plain").stdout
    assert "x-16" in tail and "\x1b" not in tail and "\r" not in tail
    rows = [line.split() for line in shared.cli("ls", "-l").stdout.splitlines()]
    assert rows[0][0] == "NAME"
    row = next(r for r in rows if r[0] == "sh")
    assert row[1] == "running" and int(row[2]) == shared.started["sh"][0]
    listed = json.loads(shared.cli("ls", "--json").stdout)
    assert [s["name"] for s in listed if s.get("kind") != "launcher"] == ["sh"]


def test_alternate_screen_replayed_with_preamble_and_reset_on_detach(terminals: Terminals) -> None:
    terminals.run("alt", sys.executable, "-c", ALT_SCREEN_PROGRAM, opts=("--ring-bytes", "64K"))
    watch = terminals.follow("alt")
    watch.expect("SCREEN-A")
    for _ in range(2):  # attach, detach, reattach: both times the program's screen comes back
        term = terminals.attach("alt")
        term.expect(re.escape(b"\x1b[?1049h"))  # the ring no longer holds it: this is the preamble
        term.expect("SCREEN-A")
        term.send(DETACH)
        term.expect(re.escape(b"\x1b[?1049l"))  # back to the user's own screen before the message
        term.expect(re.escape(b"[detached]"))
        assert finish(term) == 0


@pytest.mark.parametrize(("command", "status", "shown"), [
    ("exit 3", 3, rb"\[exited: [^\]]*3"),
    ("kill -KILL $$", 137, rb"\[exited: [^\]]*KILL"),
])
def test_child_exit_ends_attach_with_its_status(terminals: Terminals, command: str, status: int,
                                                shown: bytes) -> None:
    terminals.shell("ex", "--restart", "no")
    term = terminals.attach("ex")
    term.expect(re.escape(PROMPT))
    term.send(command.encode() + b"\r")
    term.expect(shown)
    assert finish(term) == status


def test_restarting_child_keeps_attach_going(terminals: Terminals) -> None:
    terminals.shell("bo", "--restart", "on-failure", "--backoff-initial", "0.1", "--jitter", "0")
    term = terminals.attach("bo")
    term.expect(re.escape(PROMPT))
    term.send(b"exit 5\r")
    term.expect(rb"\[exited: [^\]]*restarting")
    term.expect(re.escape(PROMPT))  # the new shell
    term.send(b"echo back-$((5*5))\r")
    term.expect("back-25")
    term.send(DETACH)
    assert finish(term) == 0


def test_attach_to_an_exited_session_reports_the_exit(terminals: Terminals) -> None:
    terminals.run("husk", "bash", "--norc", "--noprofile", "-c", "echo bye-$((2+2)); exit 4",
                 opts=("--restart", "no"))
    watch = terminals.follow("husk")
    watch.expect(r"\[shellper\] child exit 4")  # the shellper's exit notice, which it writes after the EXIT
    watch.expect(pexpect.EOF)  # tail -f ended with the session: it is a husk now
    term = terminals.attach("husk")
    term.expect("bye-4")
    term.expect(rb"\[exited: [^\]]*4")
    assert finish(term) == 4


def _wait_for_output(terminals: Terminals, name: str, needle: str) -> None:
    """Polled in this process (support.frames.ring_tail), not with `shellper tail`: a command per poll, back to
    back for the whole flood, was most of these tests' CPU."""
    wait_output(Path(terminals.dir) / f"{name}.sock", needle.encode(), TIMEOUT, nbytes=256)


@pytest.mark.parametrize("replay", ["rendered", "raw"])
def test_output_lost_by_a_slow_terminal_is_reported(terminals: Terminals, how: str, replay: str) -> None:
    # 3 MB: 46 times the ring, past what the transport, the socket, attach and the terminal hold between them
    flood = "import sys; sys.stdin.readline(); sys.stdout.write('y' * 3_000_000 + '\\nDONE-' + 'X\\n'); " \
            "sys.stdout.flush(); sys.stdin.readline()"
    terminals.run("slow", sys.executable, "-c", flood, opts=("--ring-bytes", "64K"))
    term = terminals.attach("slow", *(("--raw",) if replay == "raw" else ()))
    term.maxread = 65536
    term.send(b"\r")  # start the flood, then read nothing until it is all in the ring
    _wait_for_output(terminals, "slow", "DONE-X")
    term.expect(rb"\[shellper: \d+ bytes skipped\]")
    # a full reset at the gap (it includes ?1049l), then the screen drawn again (rendered) or the modes at the
    # gap's end (raw); relayed, both come in the GAP (its preamble), so attach knows the terminal's modes again
    term.expect(re.escape(b"\x1b[?1049l"))
    term.expect("DONE-X")
    term.send(DETACH)
    term.expect(re.escape(b"[detached]"))
    assert finish(term) == 0


def test_session_stopped_while_attached(terminals: Terminals) -> None:
    terminals.shell("gone")
    term = terminals.attach("gone")
    term.expect(re.escape(PROMPT))
    terminals.stop("gone")
    which = term.expect([rb"\[exited: [^\]]*\]", re.escape(b"[session closed]")])
    status = finish(term)
    if which == 0:  # the shell ends by a signal: the shellper's SIGTERM, or SIGKILL after the grace
        assert status in (128 + signal.SIGHUP, 128 + signal.SIGTERM, 128 + signal.SIGKILL)
    else:
        assert status == 1


def test_shellper_killed_while_attached(terminals: Terminals) -> None:
    info = terminals.run("k9", *BASH)
    term = terminals.attach("k9")
    term.expect(re.escape(PROMPT))
    os.kill(info["pid"], signal.SIGKILL)
    term.expect(re.escape(b"[session closed]"))
    assert finish(term) == 1
    # A SIGKILLed shellper cannot clean up after itself; its shell goes with the hung-up terminal.
    assert not wait_all_gone(terminals.started.pop("k9"))
    terminals.cli("stop", "k9")  # a dead session's files (and its cgroup) go as a person would remove them


def test_attach_to_unknown_session(terminals: Terminals) -> None:
    proc = terminals.cli("attach", "nosuch", check=False)
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "nosuch" in lines[0], proc.stderr


def test_attach_in_a_terminal_to_unknown_session(terminals: Terminals) -> None:
    term = terminals.attach("nosuch")
    term.expect(pexpect.EOF)
    lines = [line for line in term.before.split(b"\r\n") if line.strip()]
    assert len(lines) == 1 and b"nosuch" in lines[0], term.before
    term.close()
    assert term.exitstatus == 1


# ------------------------------------------------------------------------------------ the quick path


@pytest.mark.parametrize(("argv", "taken"), [
    (["attach", "s"], True),
    (["--dir", "/tmp/d", "attach", "s"], True),
    (["--dir=/tmp/d", "attach", "s", "--read-only"], True),
    (["--dir", "rel/d", "attach", "--no-replay", "s", "--relay"], True),
    (["attach", "s", "--detach-key", "^Q"], True),
    (["attach", "s", "--detach-key=none"], True),
    (["attach", "s", "--detach-key="], True),
    (["attach", "--detach-key", "q", "s", "--detach-key", "^A"], True),  # the last one counts
    (["--dir", "attach", "attach", "s"], True),  # a directory named attach
    (["attach", "run"], True),
    (["attach"], False),
    (["attach", "s", "t"], False),
    (["attach", "s", "--read"], False),  # argparse's abbreviation: the full CLI decides
    (["attach", "s", "--detach-key"], False),
    (["attach", "s", "--detach-key", "-x"], False),
    (["attach", "-h"], False),
    (["attach", "s", "--bogus"], False),
    (["attach", "s", "--"], False),
    (["--dir", "attach"], False),
    (["-v", "attach", "s"], False),
    (["ls", "attach"], False),
    (["run", "attach", "--", "attach"], False),
    (["--dir=", "attach", "s"], False),  # argparse refuses an empty --dir
    (["--di", "/tmp/d", "attach", "s"], False),
    (["attach", "s", "--relay=yes"], False),
    (["attach", "s", "-r", "-e", "^Q"], True),
    (["attach", "--raw", "s"], True),
    (["attach", "s", "--dir", "/tmp/e"], True),  # global options after the command too
    (["--dir", "/tmp/a", "attach", "s", "--dir", "/tmp/b"], True),
    (["attach", "s", "-e", "q", "--detach-key", "^A"], False),  # two spellings: their order decides
])
def test_quick_attach_arguments_mean_what_the_full_cli_makes_of_them(argv: list[str], taken: bool) -> None:
    from shellper.cli.argscan import scan
    from shellper.cli.argtree import build as _parser
    from shellper.cli.commands.attach import quick_args

    quick = quick_args(scan(argv))
    assert (quick is not None) == taken
    if quick is None:
        return
    full = _parser().parse_args(argv)
    assert full.cmd == "attach"
    assert quick == {"dir": full.dir, "name": full.name, "detach_key": full.detach_key,
                     "read_only": full.read_only, "no_replay": full.no_replay, "relay": full.relay,
                     "raw": full.raw}


def test_a_bad_name_on_the_quick_path_gets_the_full_cli_message(tmp_path: Path) -> None:
    proc = subprocess.run([*SHELLPER_CLI, "--dir", str(tmp_path), "attach", "a/b"], capture_output=True,
                          text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1
    assert proc.stderr.startswith("shellper: invalid session name 'a/b'"), proc.stderr


def test_attaching_a_session_from_inside_itself_is_refused(terminals: Terminals) -> None:
    terminals.shell("self")
    env = {**terminals.env, "SHELLPER_SESSION": "self"}
    for argv in (terminals.cli_args("attach", "self"), terminals.cli_args("attach", "self", "--read")):  # quick, full
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        assert proc.returncode == 1
        assert "this terminal is inside it" in proc.stderr and "unset SHELLPER_SESSION" in proc.stderr
