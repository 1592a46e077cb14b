"""A program writing coloured stdout and stderr lines alternately, in pieces, run with `shellper run`:
with one terminal (the default) and with a stderr of its own (`--stderr pty`, `pipe`), every line
comes back whole (no text or escape sequence of one stream inside a line of the other), each stream
in order."""

from __future__ import annotations

import re
import subprocess

import pytest
from support.frames import collect_output
from support.paths import PY, SHELLPER_CLI
from support.sessions import Sessions

LINES = 300
PROGRAM = f"""
import os
for i in range({LINES}):
    # each line in three writes, so a reader of two descriptors sees them apart
    os.write(1, b"\\x1b[32mout "); os.write(1, b"%d" % i); os.write(1, b" \\xc3\\xa9\\x1b[0m\\n")
    os.write(2, b"\\x1b[31merr "); os.write(2, b"%d" % i); os.write(2, b" \\xe2\\x82\\xac\\x1b[0m\\n")
os.write(1, b"DONE\\n")
"""
LINE = re.compile(rb"\x1b\[32mout (\d+) \xc3\xa9\x1b\[0m|\x1b\[31merr (\d+) \xe2\x82\xac\x1b\[0m")


def _cli(sessions: Sessions, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SHELLPER_CLI, "--dir", str(sessions.dir), *args], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("stderr", [None, "pty", "pipe"])
def test_alternating_coloured_stdout_and_stderr_come_back_in_whole_lines(sessions: Sessions,
                                                                          stderr: str | None) -> None:
    options = [] if stderr is None else ["--stderr", stderr]
    started = _cli(sessions, "run", "colours", *options, "--restart", "no", "--", PY, "-c", PROGRAM)
    assert started.returncode == 0, started.stderr
    try:
        with sessions.connect("colours", role="viewer") as viewer:
            assert viewer.replay is not None
            output = bytearray(viewer.replay.data)
            notice = b"\r\n\x1b[7m[shellper] "  # the session's notice of the child's exit: all output is in
            collect_output(viewer, output, lambda seen: notice in seen, notice, timeout=30)
    finally:
        stopped = _cli(sessions, "stop", "colours")
    assert stopped.returncode == 0, stopped.stderr
    assert output.count(b"DONE\r\n") == 1
    body = bytes(output[:output.index(notice)]).replace(b"DONE\r\n", b"", 1)
    outs, errs = [], []
    for line in body.split(b"\n")[:-1]:
        match = LINE.fullmatch(line.removesuffix(b"\r"))  # a pipe's lines end in LF alone
        assert match is not None, f"a line cut by the other stream: {line!r}"
        (outs if match[1] is not None else errs).append(int(match[1] or match[2]))
    assert outs == list(range(LINES)) and errs == list(range(LINES)), body[:300]
    if stderr is None:  # one terminal: exactly the order the program wrote in
        assert [int(m[1] or m[2]) for m in LINE.finditer(body)] == [i for i in range(LINES) for _ in (0, 1)]
