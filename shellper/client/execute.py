"""Run a command in a session's shell and wait for it (``shellper exec``; ``tower_client.execute``): its output
by ring offsets and its exit status. What is typed and how the output is found is shellper.core.execmark's;
:class:`ExecRun` is one run without the I/O, which the blocking :func:`execute` here and tower_client's
asyncio ``execute_async`` drive."""

from __future__ import annotations

import secrets
import time

from shellper.core.execmark import (
    INTERRUPT,
    LOOKBACK,
    ExecError,
    ExecRefusal,
    ExecResult,
    MarkScanner,
    check_command,
    shell_kind,
    typed_line,
)
from shellper.core.states import SessionState
from shellper.host.shellstate import foreground, here, program_argv
from shellper.protocol import wire
from shellper.protocol.connection import ClientError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable

    from shellper.client.blocking import Client

INTERRUPT_WAIT = 2.0
"""Seconds a timed-out command is given, after Ctrl-C, to give the shell its prompt back."""
POLL = 0.05
"""Seconds between looks at the shell's foreground while it is given them (a local session)."""

__all__ = ["INTERRUPT_WAIT", "ExecError", "ExecRefusal", "ExecResult", "ExecRun", "execute"]


def check_timeout(timeout: float | None) -> float | None:
    """``timeout`` as seconds > 0, or None for none (0 too, as timeout(1) reads it)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0 \
            or timeout == float("inf"):
        raise ExecError(ExecRefusal.BAD_COMMAND, f"timeout must be a finite number of seconds >= 0, got {timeout!r}")
    return float(timeout) or None


class ExecRun:
    """One command run in a session's shell, as values: :meth:`prepare` (after the handshake) checks the
    session and says what to type, :meth:`feed` takes each frame received after it, and :meth:`result` says
    what happened. Output goes to ``on_output`` as it is known, else it is kept for the result."""

    def __init__(self, command: str, timeout: float | None, on_output: Callable[[bytes], None] | None) -> None:
        self.command = check_command(command)
        self.timeout = check_timeout(timeout)
        self.nonce = secrets.token_hex(8)
        self.on_output = on_output
        self.kept: list[bytes] = []
        self.scanner: MarkScanner | None = None
        self.child_pid: int | None = None
        self.local = False
        self.timed_out = False
        self.interrupted: bool | None = None
        self.cut: int | None = None
        """Where the output handed out ended when Ctrl-C was typed (a timeout)."""
        self.name = "?"

    def prepare(self, welcome: wire.Welcome, recent: bytes, status: wire.StatusReply, peer_pid: int | None,
                role: str) -> bytes:
        """What to type, once the session is seen to run a shell at its prompt; ExecError if not."""
        self.name = welcome.name
        if role == wire.Role.VIEWER:
            raise ExecError(ExecRefusal.LOST, f"session {welcome.name!r}: a viewer may not type: connect as a terminal")
        if status.state != SessionState.RUNNING or status.info.get("child_pid") is None:
            raise ExecError(ExecRefusal.NOT_RUNNING, f"session {welcome.name!r} has no running program (state "
                            f"{status.state})")
        self.child_pid = int(status.info["child_pid"])
        self.local = here(welcome.boot_id, welcome.shellper_pid, peer_pid)
        argv = program_argv(self.child_pid) if self.local else None
        if argv is None:
            argv = [str(word) for word in status.info.get("argv") or ()]
        try:
            kind = shell_kind(argv, recent)
        except ExecError as exc:
            raise ExecError(exc.reason, f"session {welcome.name!r}: {exc}") from None
        if self.local and (busy := foreground(self.child_pid)) is not None:
            raise ExecError(ExecRefusal.BUSY, f"session {welcome.name!r} is busy: {busy.name} (pid {busy.pid}) runs "
                            "in the foreground, not the shell's prompt")
        self.scanner = MarkScanner(kind, self.nonce)
        return typed_line(kind, self.command, self.nonce)

    @property
    def done(self) -> bool:
        return self.scanner is not None and self.scanner.done

    def feed(self, frame: wire.Frame | None, next_offset: int) -> None:
        """A frame received (``next_offset``: the connection's output offset after it)."""
        scanner = self.scanner
        assert scanner is not None, "prepare() first"
        if isinstance(frame, wire.Data):
            out = scanner.feed(next_offset - len(frame.data), frame.data)
            if out and not self.timed_out:  # after Ctrl-C only the end is looked for: the rest is ^C and a prompt
                if self.on_output is not None:
                    self.on_output(out)
                else:
                    self.kept.append(out)
        elif isinstance(frame, wire.Gap):
            scanner.gap(frame.offset, frame.missed)
        elif isinstance(frame, wire.Exit):
            why = f" ({frame.reason})" if frame.reason else ""
            raise ExecError(ExecRefusal.ENDED, f"session {self.name!r}: its program ended before the command did{why}")
        elif isinstance(frame, wire.Error):
            raise ExecError(ExecRefusal.LOST, f"session {self.name!r} refused: {frame.message} ({frame.code})")

    def interrupt(self) -> bytes:
        """The deadline passed: what to type (Ctrl-C). Output after this point is not the command's."""
        self.timed_out = True
        scanner = self.scanner
        assert scanner is not None
        self.cut = scanner.position if scanner.start is not None else None
        return INTERRUPT

    def shell_back(self) -> bool | None:
        """After Ctrl-C: whether the shell holds its terminal again (None: cannot be told from here)."""
        if self.done:
            return True
        if not self.local or self.child_pid is None:
            return None
        return foreground(self.child_pid) is None

    def result(self) -> ExecResult:
        scanner = self.scanner
        assert scanner is not None
        ended = scanner.done and not self.timed_out
        return ExecResult(status=scanner.status if ended else None, output=b"".join(self.kept),
                          start=scanner.start, end=scanner.end if ended else self.cut, timed_out=self.timed_out,
                          interrupted=self.interrupted, missed=scanner.missed)


def lost(exc: ClientError) -> ExecError:
    return ExecError(ExecRefusal.LOST, f"the connection to the session failed: {exc}")


def execute(client: Client, command: str, *, timeout: float | None = None,
            on_output: Callable[[bytes], None] | None = None) -> ExecResult:
    """Type ``command`` into the shell of ``client``'s session and wait for it to end: its output and exit
    status (ExecResult). ``client``: a terminal's (a tower's replaces the Tower's own connection), connected
    here if it is not yet (asking for the recent output, to see whether the shell marks its commands itself).
    ``timeout``: seconds, then Ctrl-C is typed and, once the shell is back (at most INTERRUPT_WAIT), the result
    says ``timed_out``. ``on_output``: called with the output as it comes (then the result keeps none).
    ExecError when the command could not be run or its end not seen (ExecRefusal says why); docs/EXEC.md."""
    run = ExecRun(command, timeout, on_output)
    try:
        if client.sock is None:
            client.connect(replay_bytes=LOOKBACK)
        assert client.welcome is not None
        recent = client.replay.data if client.replay is not None else b""
        typed = run.prepare(client.welcome, recent, client.status(), client.peer_pid(), client.role)
        client.write(typed)
        deadline = None if run.timeout is None else time.monotonic() + run.timeout
        while not run.done:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                _interrupt(client, run)
                break
            frame = client.recv(timeout=left)
            if frame is not None:
                run.feed(frame, client.output.next_offset)
    except ClientError as exc:
        raise lost(exc) from None
    return run.result()


def _interrupt(client: Client, run: ExecRun) -> None:
    client.write(run.interrupt())
    until = time.monotonic() + INTERRUPT_WAIT
    while (back := run.shell_back()) is not True and (left := until - time.monotonic()) > 0:
        frame = client.recv(timeout=min(left, POLL) if back is False else left)
        if frame is not None:
            run.feed(frame, client.output.next_offset)
    run.interrupted = run.shell_back()
