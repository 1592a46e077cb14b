"""``shellper exec``'s pure half: which shells it can type into, the line it types, and where in the output
the command's own bytes begin and end (issue 31, docs/EXEC.md).

Two ways to find the command's output in the session's output:

* A shell whose syntax is known (the POSIX family: sh, bash, dash, zsh, ksh, ...) gets the command, quoted for
  ``eval``, between two ``printf`` s of OSC 133 marks carrying a random nonce: ``ESC]133;C;NONCE BEL`` just
  before the command runs and ``ESC]133;D;STATUS;NONCE BEL`` just after. The echo of the typed line holds
  ``\\033`` as text, not the ESC byte, so only the ``printf`` s produce the marks, and output cannot fake one
  without the nonce. The marks are part of the typed line, so the shell runs them; a command that reads stdin
  never sees them.
* Another shell is driven by the OSC 133 marks it emits itself (FinalTerm's ``C``: output starts, ``D;STATUS``:
  it ended), when its recent output shows it emits them. Output that prints such a mark can fool this way.

Terminals ignore OSC 133 or use it to mark commands, so the marks are invisible to a person attached.
"""

from __future__ import annotations

import re
from enum import StrEnum

from shellper.core.errors import ShellperError
from shellper.core.structs import record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Sequence


class ShellKind(StrEnum):
    """How a session's shell is driven."""

    POSIX = "posix"
    """A shell of the sh family: the command wrapped in marks of our own, with a nonce."""
    ZSH = "zsh"
    """The same, but for how zsh's ``command`` differs (see typed_line)."""
    MARKS = "marks"
    """Another shell that emits OSC 133 marks itself: the command typed as it is, its marks read."""


class ExecRefusal(StrEnum):
    """Why a command could not be run (``shellper exec`` exits with COULD_NOT_RUN for each)."""

    BAD_COMMAND = "bad_command"
    """Empty, or holds control characters a line editor would take as keys."""
    NOT_RUNNING = "not_running"
    """The session has no program running (exited, fatal, restarting)."""
    NOT_A_SHELL = "not_a_shell"
    """Its program is no interactive shell that exec can type into."""
    BUSY = "busy"
    """The shell is running something in the foreground (it is not at its prompt)."""
    ENDED = "ended"
    """The session's program ended before the command finished (``exit``, a crash)."""
    LOST = "lost"
    """The connection to the session was lost, or it may not type (a viewer)."""


class ExecError(ShellperError):
    """The command could not be run, or its end could not be seen: ``reason`` says which (an ExecRefusal)."""

    def __init__(self, reason: ExecRefusal, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@record(frozen=True)
class ExecResult:
    """What a command run by ``exec`` did.

    ``output``: the session's output from ``start`` to ``end`` (ring offsets), the bytes as the terminal got
    them (so a ``\\n`` arrives as ``\\r\\n`` under the terminal's usual ``onlcr``), without the typed line's
    echo, the marks or the prompt; empty when a callback took it as it came. ``status``: the command's exit
    status; None when it timed out, or its shell's own end mark carried none. ``timed_out``: the deadline
    passed and Ctrl-C was typed; ``interrupted`` then says whether the shell was back at its prompt soon after
    (None: could not be told). ``missed``: output bytes lost to the ring (a reader far behind).
    """

    status: int | None
    output: bytes
    start: int | None
    end: int | None
    timed_out: bool = False
    interrupted: bool | None = None
    missed: int = 0


POSIX_SHELLS = frozenset({"sh", "bash", "dash", "ksh", "ksh93", "mksh", "lksh", "pdksh", "oksh", "yash",
                          "ash", "posh", "busybox", "rbash"})
"""Programs that take the sh family's syntax: ``command eval``, ``printf`` and ``$?`` (zsh too, see ShellKind)."""

VALUE_OPTIONS = frozenset({"--rcfile", "--init-file", "-o", "+o", "-O", "+O"})
"""Shell options followed by a value: that value is not a script's name."""

LOOKBACK = 64 * 1024
"""Bytes of recent output looked at for the shell's own OSC 133 marks."""

_OWN_MARK = re.compile(rb"\x1b\]133;[ABCD]")
_ESC = 0x1B
_HOLD = 256
"""The longest mark looked for: bytes at the end of what came that may be the start of one are held back."""

INTERRUPT = b"\x03"
"""What a terminal sends for Ctrl-C (the INTR character of a terminal's usual settings)."""
CLEAR_LINE = b"\x15"
"""Ctrl-U (KILL): clears anything half typed at the prompt, in a line editor and in the terminal's own
canonical mode alike."""


def program_name(argv: Sequence[str]) -> str:
    """The program's name as a person says it: argv[0]'s last part, without a login shell's ``-``."""
    return argv[0].rsplit("/", 1)[-1].lstrip("-") if argv else ""


def interactive(argv: Sequence[str]) -> bool:
    """Whether a shell started with ``argv`` reads commands from its terminal: not with ``-c``, nor with a
    script's name among its operands."""
    words = list(argv[1:])
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word in ("--", "-"):
            return i >= len(words)  # `sh -- script`: a script; `sh -` alone reads stdin
        if word in VALUE_OPTIONS:
            i += 1
        elif word.startswith("--") or word.startswith("+"):
            continue
        elif word.startswith("-"):
            if "c" in word[1:]:
                return False
        else:
            return False  # a script's name
    return True


def shell_kind(argv: Sequence[str], recent: bytes) -> ShellKind:
    """How to drive the program started with ``argv`` (its current argv, as /proc shows it, when known),
    given its ``recent`` output; ExecError(NOT_A_SHELL) when it cannot be."""
    name = program_name(argv)
    if name == "zsh":
        kind = ShellKind.ZSH
    elif name in POSIX_SHELLS:
        kind = ShellKind.POSIX
    elif _OWN_MARK.search(recent):
        kind = ShellKind.MARKS
    else:
        raise ExecError(ExecRefusal.NOT_A_SHELL, f"it runs {name or '?'}, not a shell exec can type into (the sh "
                        "family, or a shell that emits OSC 133 marks)")
    if kind is not ShellKind.MARKS and not interactive(argv):  # one that marks its prompts reads commands
        raise ExecError(ExecRefusal.NOT_A_SHELL, f"it runs {' '.join(argv)[:80]!r}, a shell running a script, not "
                        "one reading commands from its terminal")
    return kind


def check_command(command: str) -> bytes:
    """The command as bytes to type; ExecError(BAD_COMMAND) for an empty one, or one with control characters
    other than newlines (a tab would complete, an ESC start a key sequence: in a shell they are keys)."""
    if not isinstance(command, str):
        raise ExecError(ExecRefusal.BAD_COMMAND, f"a command is text, not {type(command).__name__}")
    if not command.strip():
        raise ExecError(ExecRefusal.BAD_COMMAND, "no command")
    for char in command:
        if (char < " " and char != "\n") or char == "\x7f" or "\x80" <= char < "\xa0":
            raise ExecError(ExecRefusal.BAD_COMMAND, f"the command holds the control character {char!r}: a shell "
                            "takes it as a key (write it as $'\\t', $'\\033' ...)")
    try:
        return command.encode()
    except UnicodeEncodeError as exc:
        raise ExecError(ExecRefusal.BAD_COMMAND, f"the command is not valid text: {exc.reason}") from None


def typed_line(kind: ShellKind, command: bytes, nonce: str) -> bytes:
    """What is typed into the shell. POSIX: the command, single-quoted, to ``eval`` between the two marks'
    printfs: run in this shell (``cd`` stays), and its own syntax error, unclosed quote, trailing ``&`` or
    ``# comment`` is eval's failure (status 2) rather than one of the whole line, which would lose the end mark.
    ``command eval``: a syntax error in eval, a special built-in, would otherwise abandon the rest of the line
    (dash); zsh's ``command`` runs only external programs, so there it is plain ``eval``. A leading space
    keeps the line out of a history that ignores such lines."""
    if kind is ShellKind.MARKS:
        return CLEAR_LINE + command + b"\r"
    evaluate = b"eval" if kind is ShellKind.ZSH else b"command eval"
    quoted = b"'" + command.replace(b"'", b"'\\''") + b"'"
    return (CLEAR_LINE + b" printf '\\033]133;C;%s\\007' " + nonce.encode() + b"; " + evaluate + b" " + quoted
            + b"; printf '\\033]133;D;%s;%s\\007' \"$?\" " + nonce.encode() + b"\n")


class MarkScanner:
    """The command's output found in the session's output, fed in order as it comes (``feed``).

    Before the start mark everything is dropped (the echo of the typed line, continuation prompts); after it,
    ``feed`` returns the bytes now known to be the command's, holding back what may be the start of the end
    mark; once the end mark is seen, ``done`` is True, with ``status``, ``start`` and ``end`` (ring offsets).
    """

    def __init__(self, kind: ShellKind, nonce: str) -> None:
        token = re.escape(nonce.encode())
        if kind is not ShellKind.MARKS:
            self._start = re.compile(rb"\x1b\]133;C;" + token + rb"\x07")
            self._end = re.compile(rb"\x1b\]133;D;(\d{1,3});" + token + rb"\x07")
        else:  # the shell's own: parameters of at most _HOLD bytes, ended by BEL or ST
            self._start = re.compile(rb"\x1b\]133;C(?:;[^\x07\x1b]{0,200})?(?:\x07|\x1b\\)")
            self._end = re.compile(rb"\x1b\]133;D(?:;(\d{1,3}))?(?:;[^\x07\x1b]{0,200})?(?:\x07|\x1b\\)")
        self._buf = bytearray()
        self._offset = 0  # the ring offset of _buf[0]
        self.start: int | None = None
        self.end: int | None = None
        self.status: int | None = None
        self.done = False
        self.missed = 0

    def gap(self, offset: int, missed: int) -> None:
        """``missed`` bytes were lost before ``offset``: what was held cannot continue into what follows."""
        if self.start is not None and not self.done:
            self.missed += missed
        self._buf.clear()
        self._offset = offset

    def feed(self, offset: int, data: bytes) -> bytes:
        """The output ``data`` at ring offset ``offset``; returns the command's bytes it completes."""
        if self.done or not data:
            return b""
        if not self._buf:
            self._offset = offset
        self._buf += data
        if self.start is None:
            found = self._start.search(self._buf)
            if found is None:
                self._trim(len(self._buf) - _HOLD)
                return b""
            self._trim(found.end())
            self.start = self._offset
        found = self._end.search(self._buf)
        if found is not None:
            out = bytes(self._buf[:found.start()])
            self.end = self._offset + found.start()
            self.status = int(found.group(1)) if found.group(1) is not None else None
            self.done = True
            self._buf.clear()
            return out
        keep = self._held()
        out = bytes(self._buf[:keep])
        self._trim(keep)
        return out

    def _held(self) -> int:
        """Where what may be the start of the end mark begins: the first ESC of the last _HOLD bytes (any
        mark begins with ESC and is shorter than that), else the end."""
        window = max(0, len(self._buf) - _HOLD)
        at = self._buf.find(_ESC, window)
        return len(self._buf) if at < 0 else at

    def _trim(self, upto: int) -> None:
        if upto > 0:
            del self._buf[:upto]
            self._offset += upto

    @property
    def position(self) -> int:
        """The offset up to which output has been handed out (the start of what is held back)."""
        return self._offset


COULD_NOT_RUN = 125
"""``shellper exec``'s exit status when the command could not be run or its end not seen (as timeout(1) and
``docker run`` use 125 for their own failures)."""
TIMED_OUT = 124
"""``shellper exec``'s exit status when the command did not end in time (as timeout(1)'s)."""
