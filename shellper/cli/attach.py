"""``shellper attach``: make this terminal a window onto a session.

Why it looks like this: attach is the path people feel (every keystroke, every screenful) and the
path benchmarked against dtach. So, as tmux's client does, it hands the terminal itself to the
shellper (a fresh open of it, passed over the socket; protocol 7.4): the shellper then reads the keys
and writes the output with no second process in between, and attach only sets the terminal up,
reports resizes, and waits for the end. Where the terminal cannot be handed over (stdin and stdout
are not one terminal, an older shellper, ``--relay``) attach relays: one ``poll`` loop with no timers
(an idle attach never wakes), input forwarded in large reads, and all output the socket has delivered
decoded and written in one ``write`` per wakeup. Either way it does what dtach does not:
replays recent output (with the mode preamble, so a TUI comes back on the right screen), reports
the child's exit and returns its status, and leaves the user's terminal as it found it: cooked mode
restored on every way out (detach, exit, error, SIGTERM, SIGHUP), and any mode the session switched
on (alternate screen, mouse, bracketed paste, ...) switched off again (why: bench/NOTES.md,
"Incidents behind the defaults"), and the pen, character sets and tab stops set as a fresh terminal's
(shellper.core.terminal.restore).
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import socket
import sys
import termios
import tty
from types import FrameType

from shellper.client.blocking import Client
from shellper.core.defaults import SCREEN_SCROLLBACK_LINES, clamp_terminal_size
from shellper.core.detachkeys import NESTED_DETACH_KEY, KeysEnd, give_back, read_keys
from shellper.core.errors import ShellperError
from shellper.core.names import runtime_dir_name, socket_path, validate_name
from shellper.core.signals import signal_number
from shellper.core.states import SessionState
from shellper.core.structs import record
from shellper.daemon.terminal import note, window_size
from shellper.protocol import wire
from shellper.protocol.connection import ClientError, ProtocolViolation, RemoteError, SessionGone, SessionNotFound

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from shellper.core.terminal.modes import ModeTracker

__all__ = [
    "DEFAULT_DETACH_KEY",
    "REPLAY_BYTES",
    "DetachKeyError",
    "attach",
    "describe",
    "exit_status",
    "parse_detach_key",
]

DEFAULT_DETACH_KEY = "^\\"
"""Ctrl-\\ (0x1C), as dtach, abduco and zmx."""
REPLAY_BYTES = 1024 * 1024
"""Most output replayed on attach. The ring may hold 8 MiB; a terminal needs a few screenfuls, and a
multi-megabyte replay makes attach slow (bench/NOTES.md, "Incidents behind the defaults")."""
STDIN_READ = 65536
SOCKET_READ = 1024 * 1024
RECLAIM_TIMEOUT = 2.0
"""Seconds attach waits, when it ends on its own, for the shellper to give the terminal back."""


class DetachKeyError(ShellperError, ValueError):
    """A ``--detach-key`` that is not ``^X`` notation, a single ASCII character or ``none``."""

    def __init__(self, spec: str, problem: str) -> None:
        super().__init__(f"--detach-key {spec!r}: {problem}")
        self.spec = spec


def parse_detach_key(spec: str) -> int | None:
    """The byte a detach key spec stands for: ``^\\`` -> 0x1C, ``^?`` -> 0x7F, ``q`` -> 0x71.

    ``none`` (or an empty string) disables detaching by key: only a signal or the child's exit ends
    the attach then.
    """
    if spec in ("", "none"):
        return None
    if len(spec) == 2 and spec[0] == "^":
        c = spec[1]
        if c == "?":
            return 0x7F
        code = ord(c.upper()) ^ 0x40
        if code >= 0x20:
            raise DetachKeyError(spec, f"^{c} is not a control key (^@, ^A..^Z, ^[, ^\\, ^], ^^, ^_ or ^?)")
        return code
    if len(spec) == 1 and ord(spec) < 0x80:
        return ord(spec)
    raise DetachKeyError(spec, "expected ^X notation (e.g. ^\\ or ^Q), a single ASCII character, or none")


def exit_status(frame: wire.Exit) -> int:
    """What a shell would report for the child: its code, or 128 + the signal that killed it."""
    if frame.code is not None:
        return frame.code
    signum = signal_number(frame.signal) if frame.signal else None
    return 128 + signum if signum is not None else 1


def describe(frame: wire.Exit) -> str:
    """The child's end in one line: the shellper's reason if it gave one, else the code or signal; printable,
    as ``ls`` shows it (a reason may quote what the program wrote)."""
    from shellper.core.terminal.text import printable  # here: only at the end

    return printable(frame.describe())


# ----------------------------------------------------------------------------------------- plumbing


class _Signalled(BaseException):
    """SIGTERM or SIGHUP arrived: unwind to the cleanup, which restores the terminal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _TerminalGone(ShellperError):
    """The user's terminal returned EIO/EPIPE: nothing more can be shown."""


def _write_all(fd: int, data: bytes) -> None:
    """Write everything, also to a descriptor someone else set non-blocking."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [])
            continue
        except OSError as exc:
            raise _TerminalGone(str(exc)) from None
        view = view[n:]


def _own_terminal(stdin_fd: int, stdout_fd: int) -> int | None:
    """A fresh open of the terminal on stdin and stdout (both must be that one terminal), to hand over.

    Fresh, so the shellper may make it non-blocking without touching the descriptor the user's shell
    shares with us. None where there is no such terminal or it cannot be opened: attach relays then.
    """
    try:
        if not (os.isatty(stdin_fd) and os.isatty(stdout_fd)):
            return None
        if os.fstat(stdin_fd).st_rdev != os.fstat(stdout_fd).st_rdev:
            return None
        flags = os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC
        try:
            return os.open(os.ttyname(stdin_fd), flags)
        except OSError:  # no /dev/pts name in this mount namespace: the same device through /proc
            return os.open(f"/proc/self/fd/{stdin_fd}", flags)
    except OSError:
        return None


@record
class _Outcome:
    status: int
    message: str = ""  # printed on its own line once the terminal is restored
    to_stderr: bool = False


class _Attachment:
    """One attach: the connection, the user's terminal, and the loop between them."""

    def __init__(self, client: Client, *, detach_byte: int | None, read_only: bool,
                 stdin_fd: int, stdout_fd: int) -> None:
        self.client = client
        self.detach_byte = detach_byte
        self.read_only = read_only
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd
        self.stdin_is_tty = os.isatty(stdin_fd)
        self.stdin_open = True
        self.saved_tty: list[Any] | None = None
        self.modes: ModeTracker | None = None  # relaying only: what the session switched on
        self.rbuf = memoryview(bytearray(SOCKET_READ))  # reused: a fresh one per recv costs an mmap and a munmap
        self.modes_known = True  # False once output was skipped: the terminal's modes are unknown then
        self.fed = 0
        self.cleaning = False
        self.late_signal: int | None = None
        self.old_handlers: dict[int, Any] = {}
        self.old_wakeup = -1
        self.wake_r = self.wake_w = -1
        self.winch_pending = False
        self.typed_after = b""
        """What was read after the detach key: the keys typed right after detaching, given back on the way out."""
        self.handed = False
        """The shellper took the terminal (WELCOME.terminal): it writes output and reads keys itself."""
        self.released: wire.Release | None = None

    # ------------------------------------------------------------------------------- terminal

    def setup(self) -> None:
        """Signals first (so a SIGTERM from now on restores), then raw mode."""
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self.old_wakeup = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        except ValueError:  # not the main thread (a test's): no signal handling, as with no terminal
            os.close(wake_r)
            os.close(wake_w)
        else:
            self.wake_r, self.wake_w = wake_r, wake_w
            for signum in (signal.SIGTERM, signal.SIGHUP):
                self.old_handlers[signum] = signal.signal(signum, self._on_fatal_signal)
            self.old_handlers[signal.SIGWINCH] = signal.signal(signal.SIGWINCH, self._on_winch)
        if self.stdin_is_tty:
            self.saved_tty = termios.tcgetattr(self.stdin_fd)
            tty.setraw(self.stdin_fd, termios.TCSADRAIN)

    def _on_fatal_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.cleaning:
            self.late_signal = self.late_signal or signum
            return
        raise _Signalled(signum)

    def fresh_terminal_sequence(self) -> bytes:
        """The modes the session switched on, switched off, then the pen, character sets and tab stops of a
        fresh terminal as wide as this one (shellper.core.terminal.restore)."""
        from shellper.core.terminal.restore import restore_sequence  # here: only at the end or a restart

        size = window_size(self.stdout_fd)
        return self.reset_sequence() + restore_sequence(size[0] if size else None)

    def restore(self, reset: bool) -> None:
        """Undo setup; with ``reset``, switch off what the session's output switched on, and set the pen,
        character sets and tab stops as a fresh terminal's (shellper.core.terminal.restore). Never raises:
        the terminal may already be gone."""
        self.cleaning = True
        if reset:
            with contextlib.suppress(_TerminalGone):
                _write_all(self.stdout_fd, self.fresh_terminal_sequence())
        if self.saved_tty is not None:
            with contextlib.suppress(termios.error, OSError):
                termios.tcsetattr(self.stdin_fd, termios.TCSADRAIN, self.saved_tty)
            self.saved_tty = None
        if self.wake_w >= 0:
            for signum, handler in self.old_handlers.items():
                signal.signal(signum, handler)
            signal.set_wakeup_fd(self.old_wakeup)
            os.close(self.wake_r)
            os.close(self.wake_w)
            self.wake_r = self.wake_w = -1
        self.old_handlers.clear()

    def reset_sequence(self) -> bytes:
        if self.handed and self.released is not None:  # the shellper knows what the terminal was shown
            return self.released.reset
        if not self.handed and self.modes is not None and self.modes_known:
            return self.modes.reset_sequence()
        from shellper.core.terminal.modes import FULL_RESET_SEQUENCE  # here: a handed-over attach never needs re

        return FULL_RESET_SEQUENCE

    def terminal_size(self) -> tuple[int, int] | None:
        """This terminal's size for the session (None for a viewer, or input that is no terminal)."""
        if self.read_only or not self.stdin_is_tty:
            return None
        size = window_size(self.stdin_fd)
        return None if size is None else clamp_terminal_size(*size)

    def send_size(self) -> None:
        size = self.terminal_size()
        if size is None:
            return
        try:
            cols, rows = size
            self.client.send(wire.Resize(cols=cols, rows=rows))
        except SessionGone:
            if not self.handed:
                raise
            # The shellper may have given the terminal back and closed already (a detach key typed at
            # once): the RELEASE that says so is still to be read, and the socket's end after it.

    # ------------------------------------------------------------------------------- output

    def show(self, data: bytes) -> None:
        """Session output to the terminal, noting the modes it switches."""
        if data:
            assert self.modes is not None
            self.modes.feed(self.fed, data)
            self.fed += len(data)
            _write_all(self.stdout_fd, data)

    def note(self, text: str) -> None:
        """A dim line of our own between session output (it is not part of the session's stream)."""
        _write_all(self.stdout_fd, note(text))

    def start_output(self) -> None:
        """The replay: its queries taken out (this terminal would answer them again, into the session's
        input), and, when this terminal's size is not the one the output was drawn for, the scroll region
        reset as a terminal does on a resize (shellper.core.ring.Scrollback.shown, for a handed-over one)."""
        from shellper.core.terminal.queries import strip_queries

        replay, welcome = self.client.conn.replay, self.client.conn.welcome
        assert replay is not None and self.modes is not None
        if replay.gap:
            self.modes_known = False
        self.show(replay.preamble + strip_queries(replay.data))
        size = window_size(self.stdin_fd) if self.stdin_is_tty else None
        if welcome is not None and size is not None and size != (welcome.cols, welcome.rows):
            self.show(self.modes.current().resize_sequence())
        if replay.gap:
            self.note(f"[shellper: {replay.gap} bytes skipped]")

    def receive(self) -> int | None:
        """Read what the socket has into ``rbuf``: the byte count, 0 once the shellper has closed the
        connection, None if nothing was there after all."""
        client = self.client
        assert client.sock is not None
        try:
            return client.sock.recv_into(self.rbuf)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as exc:
            if exc.errno != errno.ECONNRESET:
                raise SessionGone(client.path, f"connection lost: {exc.strerror or exc}") from None
            return 0

    def on_socket(self) -> _Outcome | None:
        """Take what the socket has, then act on every frame it completed."""
        conn = self.client.conn
        n = self.receive()
        if n is None:
            return None
        if not n:
            return _Outcome(1, "[session closed]")
        echo = conn.sole_data(self.rbuf[:n])
        if echo is not None:  # one whole DATA frame (an echo): what on_frames would do, without the decoder
            self.show(bytes(echo))
            return None
        conn.receive_data(self.rbuf[:n])
        return self.on_frames()

    def on_frames(self) -> _Outcome | None:
        """Every complete frame buffered: output written in one go, control frames acted on in order.

        Also called before the first poll: frames that came in the same read as WELCOME and REPLAY
        (a late EXIT, say) are already in the connection, and the socket may never be readable again.
        """
        conn = self.client.conn
        batch: list[bytes] = []
        try:
            while (event := conn.next_output(batch)) is not None:
                self.show(b"".join(batch))
                batch.clear()
                if isinstance(event, wire.Frame):  # attach sends no requests: nothing else comes
                    outcome = self.on_control(event)
                    if outcome is not None:
                        return outcome
        except ProtocolViolation as exc:
            self.show(b"".join(batch))
            return _Outcome(1, f"shellper: protocol error from {conn.path}: {exc.message}", to_stderr=True)
        self.show(b"".join(batch))
        return None

    def on_control(self, frame: wire.Frame) -> _Outcome | None:
        """A frame other than DATA, already delivered (its offset, gap or exit noted by the connection)."""
        if isinstance(frame, wire.Gap):
            self.note(f"[shellper: {frame.missed} bytes skipped]")
            if frame.preamble is not None:  # a full reset, then the screen drawn or the modes: known again
                self.show(frame.preamble)
            else:
                self.modes_known = False
        elif isinstance(frame, wire.Exit):
            if frame.state == SessionState.BACKOFF:
                # The shellper restarts the child: the new one starts on a fresh terminal, as the first did.
                from shellper.core.terminal.modes import ModeTracker

                _write_all(self.stdout_fd, self.fresh_terminal_sequence())
                self.modes = ModeTracker()
                self.modes_known = True
                self.note(frame.restart_note())
                return None
            return _Outcome(exit_status(frame), f"[exited: {describe(frame)}]")
        elif isinstance(frame, wire.Error):
            if frame.fatal:
                return _Outcome(1, f"shellper: {frame.message}", to_stderr=True)
            self.note(f"shellper: {frame.message}")
        return None

    # ------------------------------------------------------------------------------- input

    def on_stdin(self) -> _Outcome | None:
        try:
            data = os.read(self.stdin_fd, STDIN_READ)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as exc:
            raise _TerminalGone(str(exc)) from None
        # A SIGWINCH sent before these bytes were typed may be delivered only as this read (or the poll
        # before it) returns: its wake byte is in the pipe although poll did not report it. The resize
        # must reach the child first, or a program reads the old size after the user's next key.
        self.take_signals()
        if not data:
            if self.read_only:  # a viewer needs no input: keep watching
                self.stdin_open = False
                return None
            return _Outcome(0, "[detached]")
        data, end, self.typed_after = read_keys(data, self.detach_byte)
        if data and not self.read_only:
            self.client.write(data)
        return _Outcome(0, "[detached]") if end is KeysEnd.DETACH else None

    def _on_winch(self, _signum: int, _frame: FrameType | None) -> None:
        # Python runs this right after the system call the signal interrupted (a poll or a read)
        # returns, so a flag is as current as the wakeup pipe and costs no read per keystroke.
        self.winch_pending = True

    def take_signals(self, drain: bool = False) -> None:
        """Act on a SIGWINCH noted by its handler; ``drain`` empties the wakeup pipe that woke the poll."""
        if drain:
            with contextlib.suppress(BlockingIOError):
                os.read(self.wake_r, 256)
        if self.winch_pending:
            self.winch_pending = False
            self.send_size()

    # ------------------------------------------------------------------------------- handed over

    def on_handed_frames(self) -> _Outcome | None:
        """The terminal is the shellper's: only the end of the attach comes over the socket."""
        conn = self.client.conn
        try:
            for event in conn.events():
                conn.deliver(event)
                if isinstance(event, wire.Release):
                    self.released = event
                    if event.reason == "detach":
                        self.typed_after = event.typed or b""
                        return _Outcome(0, "[detached]")
                    if event.reason == "hangup":
                        raise _TerminalGone(event.reason)
                    # exit or closing: the EXIT or ERROR that says why follows, or the connection ends
                elif isinstance(event, wire.Exit):
                    if event.state != SessionState.BACKOFF:  # a restart is shown on the terminal by the shellper
                        return _Outcome(exit_status(event), f"[exited: {describe(event)}]")
                elif isinstance(event, wire.Error) and event.fatal:
                    return _Outcome(1, f"shellper: {event.message}", to_stderr=True)
        except ProtocolViolation as exc:
            return _Outcome(1, f"shellper: protocol error from {conn.path}: {exc.message}", to_stderr=True)
        return None

    def on_handed_socket(self) -> _Outcome | None:
        n = self.receive()
        if n is None:
            return None
        if not n:
            return _Outcome(1, "[session closed]")
        self.client.conn.receive_data(self.rbuf[:n])
        return self.on_handed_frames()

    def run_handed(self) -> _Outcome:
        outcome = self.on_handed_frames()  # what came with WELCOME and REPLAY
        if outcome is not None:
            return outcome
        self.send_size()
        return self.wait(self.on_handed_socket, keys=False)

    def reclaim(self) -> None:
        """Take the terminal back before restoring it: ask (our end of the socket stops sending), then wait
        for RELEASE or the end of the connection, for at most RECLAIM_TIMEOUT. Never raises."""
        sock, conn = self.client.sock, self.client.conn
        if not self.handed or self.released is not None or sock is None:
            return
        with contextlib.suppress(OSError, ClientError):
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(RECLAIM_TIMEOUT)
            while self.released is None:
                n = sock.recv_into(self.rbuf)
                if not n:
                    return
                conn.receive_data(self.rbuf[:n])
                for event in conn.events():
                    if isinstance(event, wire.Release):
                        self.released = event

    # ------------------------------------------------------------------------------- loop

    def run(self) -> _Outcome:
        if self.handed:
            return self.run_handed()
        from shellper.core.terminal.modes import ModeTracker

        self.modes = ModeTracker()
        self.start_output()
        self.send_size()
        outcome = self.on_frames()
        if outcome is not None:
            return outcome
        return self.wait(self.on_socket, keys=True)

    def wait(self, on_socket: Callable[[], _Outcome | None], keys: bool) -> _Outcome:
        """Poll the socket, the signal pipe and, with ``keys``, the terminal's input, until an outcome."""
        sock_fd = self.client.fileno()
        poller = select.poll()
        poller.register(sock_fd, select.POLLIN)
        if keys:
            poller.register(self.stdin_fd, select.POLLIN)
        if self.wake_r >= 0:
            poller.register(self.wake_r, select.POLLIN)
        while True:
            ready = dict(poller.poll())
            if self.wake_r in ready:
                self.take_signals(drain=True)
            if sock_fd in ready:
                outcome = on_socket()
                if outcome is not None:
                    return outcome
            if keys and self.stdin_fd in ready:
                outcome = self.on_stdin()
                if outcome is not None:
                    return outcome
                if not self.stdin_open:
                    poller.unregister(self.stdin_fd)


def attach(socket_path: str | os.PathLike[str], *, name: str | None = None,
           detach_key: str = DEFAULT_DETACH_KEY, read_only: bool = False, replay: bool = True,
           stdin_fd: int = 0, stdout_fd: int = 1, handoff: bool = True, raw: bool = False) -> int:
    """Attach the terminal on ``stdin_fd``/``stdout_fd`` to a session until detach or exit.

    ``handoff``: hand the terminal to the shellper when it is one (the default); False relays every
    byte through this process. ``raw``: replay the output's bytes instead of the screen drawn from the
    session's screen model (protocol/PROTOCOL.md, 8.6). Returns 0 on detach, the child's status (code,
    or 128 + signal) when it exits, 1 when the session goes away or the connection fails, 2 for a bad
    detach key, 128 + signal on SIGTERM/SIGHUP.
    """
    label = f"session {name!r}" if name else str(socket_path)
    try:
        detach_byte = parse_detach_key(detach_key)
    except DetachKeyError as exc:
        print(f"shellper: {exc}", file=sys.stderr)
        return 2
    client = Client(socket_path, wire.Role.VIEWER if read_only else wire.Role.TERMINAL, client_name="shellper-attach")
    session = _Attachment(client, detach_byte=detach_byte, read_only=read_only,
                          stdin_fd=stdin_fd, stdout_fd=stdout_fd)
    outcome = _Outcome(1)
    reset = True
    bare = False
    try:
        # Raw mode first: a shellper that takes the terminal writes the replay to it at once.
        session.setup()
        tty_fd = _own_terminal(stdin_fd, stdout_fd) if handoff else None
        try:
            welcome = client.connect(replay_bytes=REPLAY_BYTES if replay else 0, terminal_fd=tty_fd,
                                     detach_byte=detach_byte,
                                     rendered=SCREEN_SCROLLBACK_LINES if replay and not raw else None,
                                     size=session.terminal_size() if tty_fd is None else None)
        except ClientError as exc:  # connect() has closed what it opened; nothing was shown
            reset, bare = False, True
            message = exc.error.message if isinstance(exc, RemoteError) else str(exc)  # str: with the path
            if isinstance(exc, SessionNotFound) and name:
                message += sessions_hint(os.path.dirname(exc.path), name)
            outcome = _Outcome(1, f"shellper: {label}: {message}", to_stderr=True)
        else:
            assert client.sock is not None
            client.sock.settimeout(None)  # input waits for a slow child rather than failing after 5 s
            session.handed = bool(welcome.terminal)
            outcome = session.run()
        finally:
            if tty_fd is not None:
                os.close(tty_fd)
    except _Signalled as sig:
        # A SIGHUP need not mean the terminal is gone (a `kill -HUP`, the shell that started attach
        # killed): reset it all the same; a write to a terminal that is gone fails at once (EIO).
        hangup = sig.signum == signal.SIGHUP
        outcome = _Outcome(128 + sig.signum, "" if hangup else "[detached]")
    except _TerminalGone:
        reset = False
        outcome = _Outcome(1)
    except SessionGone:
        outcome = _Outcome(1, "[session closed]")
    except ClientError as exc:
        outcome = _Outcome(1, f"shellper: {label}: {exc.message}", to_stderr=True)
    except (OSError, termios.error) as exc:  # the terminal could not be set up (or the pipe made)
        outcome = _Outcome(1, f"shellper: attach: {exc}", to_stderr=True)
    finally:
        session.reclaim()
        session.restore(reset)
        client.close()
    if outcome.message:
        line = f"{outcome.message}\n" if bare else f"\r\n{outcome.message}\r\n"
        with contextlib.suppress(OSError):
            if outcome.to_stderr:
                sys.stderr.write(line)
                sys.stderr.flush()
            else:
                os.write(stdout_fd, line.encode(errors="replace"))
    if session.typed_after and outcome.message == "[detached]" and session.stdin_is_tty:
        give_back(stdin_fd, session.typed_after)  # the keys typed right after the detach key: the shell's
    if session.late_signal is not None:
        return 128 + session.late_signal
    return outcome.status


def sessions_hint(directory: str, name: str) -> str:
    """For a name with no session: the sessions the directory does have, the likeliest meant first."""
    from shellper.host.paths import session_names

    names = session_names(directory)
    if not names:
        return f"; there are no sessions in {directory}"
    if name in names:  # its files without its socket: not a name to suggest to itself
        return (f"; its other files are in {directory}: it is starting or stopping, or its shellper is gone "
                f"(`shellper stop {name}` then ends what it left running and removes them)")
    import difflib

    close = difflib.get_close_matches(name, names, n=1)
    meant = f" (did you mean {close[0]!r}?)" if close else ""
    return f"; sessions in {directory}: {', '.join(names)}{meant}"


def _attachable(directory: str | None, name: str, detach_key: str) -> bool:
    """The attach could go ahead (a valid detach key, a socket there, not a symlink): only then is a missing
    terminal the thing to report; otherwise attach's own error says what is wrong."""
    try:
        parse_detach_key(detach_key)
    except DetachKeyError:
        return False
    import stat

    try:
        return stat.S_ISSOCK(os.lstat(socket_path(runtime_dir_name(directory), name)).st_mode)
    except OSError:
        return False


def _key_name(spec: str) -> str:
    return f"Ctrl-{spec[1]}" if len(spec) == 2 and spec[0] == "^" else spec


def attach_session(directory: str | None, name: str, *, detach_key: str = DEFAULT_DETACH_KEY,
                   read_only: bool = False, no_replay: bool = False, relay: bool = False, raw: bool = False) -> int:
    """``shellper [--dir DIR] attach NAME ...``: the session's socket found, then :func:`attach`.

    ``raw`` (``--raw``): the replay is the session's recent output bytes (with the mode preamble, queries
    taken out); today every replay is (issue 18 adds a rendered one as the default).

    Raises :class:`~shellper.core.names.BadName` for a name that is not one. Refuses (status 1) to attach a
    session from inside itself: its output would be fed back to it as input without end.
    """
    validate_name(name)
    if os.environ.get("SHELLPER_SESSION") == name:
        print(f"shellper: session {name!r}: this terminal is inside it; attaching would feed its output back "
              "to it (unset SHELLPER_SESSION to attach anyway)", file=sys.stderr)
        return 1
    if not os.isatty(0) and not (read_only and os.isatty(1)) and _attachable(directory, name, detach_key):
        print(f"shellper: attach {name}: input is not a terminal (attach is for a person at one): `shellper send "
              f"{name} TEXT` types into it, `shellper tail -f {name}` follows it", file=sys.stderr)
        return 1
    outer = os.environ.get("SHELLPER_SESSION")
    if outer and detach_key == DEFAULT_DETACH_KEY:  # the outer attach would take Ctrl-\ first
        detach_key = NESTED_DETACH_KEY
        if sys.stderr.isatty():
            print(f"shellper: attaching from inside session {outer!r}: {_key_name(detach_key)} detaches from "
                  f"{name!r} ({_key_name(DEFAULT_DETACH_KEY)} from {outer!r}; -e chooses another key)",
                  file=sys.stderr)
    return attach(socket_path(runtime_dir_name(directory), name), name=name,
                  detach_key=detach_key, read_only=read_only, replay=not no_replay, handoff=not relay, raw=raw)
