"""``shellper run --foreground``: the session served in the caller's own process, until it stops."""

from __future__ import annotations

import json

from shellper.core.config import SessionConfig
from shellper.host.logfile import LogFile
from shellper.host.prelaunch import prepare

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import Any


def run_foreground(config: SessionConfig, announce: bool = True) -> int:
    """Run the session in this process until it stops; print the info line once ready."""
    config, paths = prepare(config)
    log = LogFile(paths.log)

    def ready(info: dict[str, Any]) -> None:
        if announce:
            print(json.dumps(info), flush=True)

    from shellper.daemon.session import serve

    return serve(config, paths, log, ready)
