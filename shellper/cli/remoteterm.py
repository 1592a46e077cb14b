"""``attach`` and ``tail -f`` on another host: ssh run as a child and watched, not exec'd, so that a lost
connection is said, the terminal given back, and the exit status tells it apart.

An exec'd ssh that loses its connection exits 255 without a word, or, killed, leaves the terminal raw and
in whatever modes the remote session switched on (the remote attach that would have switched them off is
gone with the connection). Here, when ssh exits 255 or by a signal this process did not pass on, the
terminal gets the same restore a detach gives (shellper.core.terminal), its settings from before ssh, and
one line: ``shellper: connection to HOST lost``; the status is shellper.host.ssh.CONNECTION_LOST.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any

PASSED_ON = (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP)
"""Signals sent to this process: passed on to ssh, and then its end is theirs, not a lost connection."""


def run_watched(command: list[str], host: str, terminal: bool) -> int:
    """Run ``command`` (ssh) on this process's terminal or stdio and return its status, or CONNECTION_LOST
    (the terminal restored, the loss said) when the connection was lost. ``terminal``: ssh has a tty (-t)."""
    import subprocess
    import termios

    from shellper.host.ssh import CONNECTION_LOST, SSH_UNREACHABLE

    saved: list[Any] | None = None
    if terminal:
        with contextlib.suppress(termios.error, OSError):
            saved = termios.tcgetattr(0)
    try:
        proc = subprocess.Popen(command)
    except OSError as exc:
        print(f"shellper: cannot run {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    received: list[int] = []

    def pass_on(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    old = {signum: signal.signal(signum, pass_on) for signum in PASSED_ON}
    try:
        status = proc.wait()
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)
    if received:
        return 128 + received[0]
    if status >= 0 and status != SSH_UNREACHABLE:
        return status  # the remote command's own (a detach, the session's exit, tail's end)
    if saved is not None:
        restore_terminal(saved)
    lead = "\r\n" if saved is not None else ""  # off the remote line the cursor may have been left on
    print(f"{lead}shellper: connection to {host} lost", file=sys.stderr)
    return CONNECTION_LOST


def restore_terminal(saved: list[Any]) -> None:
    """What a detach does to the terminal when it does not know the session's modes (they were the remote
    attach's to know): everything a session can switch on, off; a fresh terminal's pen, character sets and
    tab stops; then the settings from before ssh set it raw. Never raises: the terminal may be gone."""
    import termios

    from shellper.core.terminal.modes import FULL_RESET_SEQUENCE
    from shellper.core.terminal.restore import restore_sequence

    if os.isatty(1):
        try:
            columns: int | None = os.get_terminal_size(1).columns
        except OSError:
            columns = None
        with contextlib.suppress(OSError):
            os.write(1, FULL_RESET_SEQUENCE + restore_sequence(columns))
    with contextlib.suppress(termios.error, OSError):
        termios.tcsetattr(0, termios.TCSADRAIN, saved)
