"""``shellper tail NAME``: a session's recent output, then (with -f) what follows."""

from __future__ import annotations

from shellper.cli.options import NAME, Flag, Value, size

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse
    from typing import Any

ARGUMENTS = (
    NAME,
    Value("--bytes", type=size, help="at most this much of the end (default: all held)"),
    Value("--lines", "-n", type=int, metavar="N", help="only the last N lines"),
    Flag("--follow", "-f", help="keep printing new output until the session ends for good (exited or fatal) or Ctrl-C"),
    Flag("--plain", help="the text as a person sees it, from the session's screen model: its scrollback and screen "
         "(with -f, then new output without escape sequences)"),
)


def handle(args: argparse.Namespace) -> int:
    """The ring's end, then (with -f) new output until the session ends for good. To a terminal, the modes the
    printed output switched on (alternate screen, hidden cursor, mouse reporting) are switched off at the end, as
    ``attach`` does, so the user's terminal is left as it was."""
    import contextlib
    import sys

    from shellper.cli.connect import ENDED, CliError, connect
    from shellper.client.blocking import SessionGone
    from shellper.core.defaults import SCREEN_SCROLLBACK_LINES
    from shellper.core.terminal.text import PlainStream, last_lines
    from shellper.protocol import wire

    if args.lines is not None and args.lines < 0:
        raise CliError(f"tail: --lines {args.lines}: must be >= 0")
    out = sys.stdout.buffer
    modes = _TailModes(out) if not args.plain and _is_terminal(out) else None
    from_model = args.plain and args.bytes is None  # the text a person sees: from the screen model
    with contextlib.ExitStack() as stack:
        client = stack.enter_context(connect(args, wire.Role.VIEWER, replay_bytes=0 if from_model else args.bytes))
        if from_model and client.welcome is not None and not wire.supports(client.welcome.version, wire.Feature.SCREEN):
            # A shellper of protocol version 2 keeps no screen model: its whole ring, stripped, as before.
            client.close()
            client = stack.enter_context(connect(args, wire.Role.VIEWER, replay_bytes=None))
            from_model = False
        welcome, replay = client.welcome, client.replay
        assert welcome is not None and replay is not None
        if args.follow:
            _end_when_the_reader_goes(out, client)
        end = welcome.ring_end
        seen = 0  # with the screen: the offset it was drawn at (DATA before it is in it already)
        if from_model and wire.supports(welcome.version, wire.Feature.SCREEN):
            from shellper.cli.capture import plain_text, request_screen

            shown = request_screen(client, scrollback=SCREEN_SCROLLBACK_LINES)
            seen = shown.offset
            lines = plain_text(shown)
            if args.lines is not None:
                lines = lines[len(lines) - args.lines:] if args.lines else []
            replay = wire.Replay(offset=end, data="".join(line + "\n" for line in lines).encode())

        plain = PlainStream() if args.plain else None  # a sequence cut between two DATA is still dropped whole

        last = b"\n"  # the last byte written

        def emit(data: bytes) -> None:
            nonlocal last
            if modes is not None:
                modes.feed(data)
            shown = plain.feed(data) if plain is not None else data
            _write_all(out, shown)
            out.flush()
            last = shown[-1:] or last

        try:
            emit(replay.data if args.lines is None else last_lines(replay.data, args.lines))
            if args.follow and welcome.state in ENDED:  # its exit notice was in the output; nothing follows
                print(f"[shellper: session {args.name!r} has {welcome.state}; nothing more will follow]",
                      file=sys.stderr)
                return 0
            final = False
            while args.follow or client.output.next_offset < end:
                try:
                    frame = client.recv()
                except SessionGone:
                    break
                if isinstance(frame, wire.Data):
                    start = client.output.next_offset - len(frame.data)
                    emit(frame.data if start >= seen else frame.data[seen - start:])
                elif isinstance(frame, wire.Exit) and args.follow and frame.state in ENDED and not final:
                    # The shellper appends its exit notice to the output right after the EXIT: a PING's PONG
                    # comes after it, so the notice is shown (once, as any output) before tail ends.
                    final = True
                    client.send(wire.Ping(nonce=1))
                elif isinstance(frame, wire.Pong) and final:
                    break
        finally:
            if last != b"\n" and args.lines is not None:  # lines asked for end with a newline (a prompt's too)
                with contextlib.suppress(OSError, ValueError):
                    _write_all(out, b"\n")
                    out.flush()
            if modes is not None:
                modes.reset()
    return 0


def _write_all(out: Any, data: bytes) -> None:
    """All of ``data``: with PYTHONUNBUFFERED=1, stdout's binary layer is the raw file, whose write() may take
    only part (a pipe takes 64 KiB at a time)."""
    view = memoryview(data)
    while view:
        view = view[out.write(view):]


def _end_when_the_reader_goes(out: Any, client: Any) -> None:
    """On a pipe or socket (an ssh channel's, for ``tail -f --host``), end the follow as soon as its reader
    has gone (a connection dropped, ``| head`` done), not at the session's next output, which may be hours
    away: meanwhile the session would count this as a client. A thread waits for the hangup, then shuts the
    session's socket, which ends the wait for output. A terminal's hangup is a SIGHUP already."""
    import os
    import stat

    try:
        fd = out.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, ValueError, OSError):
        return
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return
    import contextlib
    import select
    import socket
    import threading

    def watch() -> None:
        poller = select.poll()
        poller.register(fd, 0)  # nothing asked: poll reports only POLLERR and POLLHUP, the reader's end
        poller.poll()
        if client.sock is not None:
            with contextlib.suppress(OSError):
                client.sock.shutdown(socket.SHUT_RDWR)

    threading.Thread(target=watch, name="reader-gone", daemon=True).start()


def _is_terminal(out: Any) -> bool:
    import os

    try:
        return os.isatty(out.fileno())
    except (AttributeError, ValueError, OSError):
        return False


class _TailModes:
    """The terminal state the output ``tail`` printed left set, to give back when it is done: the modes it
    switched on, and, once it wrote any escape or shift, the pen, character sets and tab stops too."""

    def __init__(self, out: Any) -> None:
        from shellper.core.terminal.modes import ModeTracker

        self.out = out
        self.tracker = ModeTracker()
        self.fed = 0
        self.escaped = False  # ESC, SO or an 8-bit CSI seen: the pen or the character sets may be changed

    def feed(self, data: bytes) -> None:
        self.tracker.feed(self.fed, data)
        self.fed += len(data)
        self.escaped = self.escaped or b"\x1b" in data or b"\x0e" in data or b"\xc2\x9b" in data

    def reset(self) -> None:
        """Never raises: the terminal may be gone."""
        sequence = self.tracker.reset_sequence()
        if self.escaped:
            import os

            from shellper.core.terminal.restore import restore_sequence

            try:
                columns: int | None = os.get_terminal_size(self.out.fileno()).columns
            except (OSError, ValueError):
                columns = None
            sequence += restore_sequence(columns)
        if sequence:
            try:
                _write_all(self.out, sequence)
                self.out.flush()
            except (OSError, ValueError):
                pass
