"""shellper.core.execmark: which programs exec types into, what it types, and the output found between marks
however the output is cut into pieces."""

from __future__ import annotations

import pytest

from shellper.core.execmark import (
    ExecError,
    ExecRefusal,
    MarkScanner,
    ShellKind,
    check_command,
    interactive,
    shell_kind,
    typed_line,
)

NONCE = "0123456789abcdef"
START = b"\x1b]133;C;" + NONCE.encode() + b"\x07"


def end(status: int) -> bytes:
    return b"\x1b]133;D;%d;" % status + NONCE.encode() + b"\x07"


def scan(stream: bytes, cut: int, kind: ShellKind = ShellKind.POSIX) -> tuple[bytes, MarkScanner]:
    scanner = MarkScanner(kind, NONCE)
    out = b""
    for at in range(0, len(stream), cut):
        out += scanner.feed(1000 + at, stream[at:at + cut])
    return out, scanner


OUTPUT = b"a\x1b[1mb\x1b]133;D;0;fedcba9876543210\x07\x1b]133;D;0\x07\r\n" + b"x" * 600 + b"\x1b"


@pytest.mark.parametrize("cut", [1, 2, 3, 7, 64, 10_000])
def test_the_output_between_the_marks_whatever_the_pieces(cut: int) -> None:
    echo = b" printf '\\033]133;C;%s\\007' " + NONCE.encode() + b"; { cmd\r\n> }\r\n"
    stream = echo + START + OUTPUT + end(42) + b"psh> "
    out, scanner = scan(stream, cut)
    assert out == OUTPUT
    assert (scanner.done, scanner.status) == (True, 42)
    assert scanner.start == 1000 + len(echo) + len(START)
    assert scanner.end == scanner.start + len(OUTPUT)


def test_the_shells_own_marks() -> None:
    stream = b"cmd\r\n\x1b]133;C\x07out\r\n\x1b]133;D;3\x1b\\\x1b]133;A\x07> "
    out, scanner = scan(stream, 1, ShellKind.MARKS)
    assert (out, scanner.status) == (b"out\r\n", 3)
    out, scanner = scan(b"\x1b]133;C;x=1\x07o\x1b]133;D\x07", 2, ShellKind.MARKS)
    assert (out, scanner.done, scanner.status) == (b"o", True, None)


def test_nothing_before_the_start_mark_and_no_end_without_the_nonce() -> None:
    out, scanner = scan(b"\x1b]133;C;other\x07" + b"y" * 1000 + end(0).replace(b"0123", b"3210"), 5)
    assert (out, scanner.done, scanner.start) == (b"", False, None)


@pytest.mark.parametrize(("argv", "expected"), [
    (["bash"], True), (["-bash"], True), (["bash", "--norc", "--noprofile", "-i"], True),
    (["bash", "--rcfile", "rc"], True), (["zsh", "-o", "vi"], True), (["sh", "-"], True),
    (["sh", "-c", "echo"], False), (["bash", "-lc", "x"], False), (["bash", "script.sh"], False),
    (["sh", "--", "script"], False),
])
def test_interactive(argv: list[str], expected: bool) -> None:
    assert interactive(argv) is expected


def test_shell_kind() -> None:
    assert shell_kind(["/usr/bin/dash"], b"") is ShellKind.POSIX
    assert shell_kind(["-zsh"], b"") is ShellKind.ZSH
    assert shell_kind(["nu"], b"x\x1b]133;A\x07") is ShellKind.MARKS
    for argv in (["python3"], ["sh", "-c", "sleep 9"], []):
        with pytest.raises(ExecError) as caught:
            shell_kind(argv, b"")
        assert caught.value.reason is ExecRefusal.NOT_A_SHELL


@pytest.mark.parametrize("command", ["", "  ", "a\tb", "a\x1bb", "\x03", "a\x7f", "x\x9b"])
def test_commands_a_shell_would_take_as_keys_are_refused(command: str) -> None:
    with pytest.raises(ExecError) as caught:
        check_command(command)
    assert caught.value.reason is ExecRefusal.BAD_COMMAND


def test_the_typed_line() -> None:
    line = typed_line(ShellKind.POSIX, check_command("ls &\necho 'é' # c"), NONCE)
    assert line == (b"\x15 printf '\\033]133;C;%s\\007' " + NONCE.encode()
                    + b"; command eval 'ls &\necho '\\''\xc3\xa9'\\'' # c'; "
                    b"printf '\\033]133;D;%s;%s\\007' \"$?\" " + NONCE.encode() + b"\n")
    assert b"\x1b" not in line  # the marks are printed by the shell, never typed: the echo holds none
    assert b"; eval 'true';" in typed_line(ShellKind.ZSH, b"true", NONCE)  # zsh's `command` is for programs
    assert typed_line(ShellKind.MARKS, b"ls", NONCE) == b"\x15ls\r"
