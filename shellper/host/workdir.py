"""A session's working directory as the kernel has it: ``/proc/PID/cwd`` of the terminal's foreground process
group leader (the program a person is running, else the shell), taken only from a process verifiably in the
session (its session id is the child's: the child leads the PTY's session)."""

from __future__ import annotations

import os


def foreground_cwd(child_pid: int, master_fd: int) -> str | None:
    """The directory of the PTY's foreground process group leader, else of the child itself; None when
    neither can be read (gone, another user's, or not in the child's session: a pid used again)."""
    try:
        leader = os.tcgetpgrp(master_fd)
    except OSError:
        leader = child_pid
    for pid in dict.fromkeys((leader, child_pid)):
        try:
            if os.getsid(pid) != child_pid:
                continue
            path = os.readlink(f"/proc/{pid}/cwd")
            if os.getsid(pid) == child_pid:  # and still: the pid was not used again meanwhile
                return path
        except OSError:
            continue
    return None
