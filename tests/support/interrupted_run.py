"""The run tests/test_interrupted_run.py starts and then interrupts (not a test module of the suite: it is collected
only when given by path): one test that starts a session, says so, and waits to be interrupted.

``INTERRUPTED_REPORT`` names the file the session's identities are written to (JSON, by rename: whole or absent).
"""

from __future__ import annotations

import json
import os
import select
from pathlib import Path

from support.sessions import Sessions


def test_a_session_left_running_until_the_run_is_interrupted(sessions: Sessions) -> None:
    info = sessions.start("held", ["sleep", "300"], containment=os.environ.get("INTERRUPTED_CONTAINMENT", "auto"))
    report = Path(os.environ["INTERRUPTED_REPORT"])
    partial = report.with_suffix(".partial")
    partial.write_text(json.dumps({"boot_id": info.boot_id, "pid": info.pid, "start_time": info.start_time,
                                   "child_pid": info.child_pid, "dir": str(sessions.dir)}))
    partial.rename(report)
    select.select([], [], [], 120)  # the run is interrupted here; a run that is not fails the outer test's deadline
