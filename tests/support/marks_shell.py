"""A shell outside the sh family that marks its prompt and each command with OSC 133 (FinalTerm), as fish 4
and shells with a terminal's integration do: ``shellper exec`` drives such a shell by its own marks
(tests/test_exec.py). It reads a line, runs it with ``sh -c``, and reports its status in the ``D`` mark."""

from __future__ import annotations

import subprocess
import sys


def main() -> None:
    out = sys.stdout.buffer
    while True:
        out.write(b"\x1b]133;A\x07marks> \x1b]133;B\x07")
        out.flush()
        line = sys.stdin.buffer.readline()
        if not line:
            return
        out.write(b"\x1b]133;C\x07")
        out.flush()
        status = subprocess.run(["sh", "-c", line.decode(errors="replace")], check=False).returncode
        out.write(b"\x1b]133;D;%d\x07" % (status & 0xFF))
        out.flush()


if __name__ == "__main__":
    main()
