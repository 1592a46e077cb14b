"""The launcher (shellper.client.launch) and the daemon (shellper.daemon.prefork, which imports nothing of the
package) spell the readiness variable each on its own side: the same name, or no launch ever hears back."""

from __future__ import annotations

from shellper.client import launch
from shellper.daemon import prefork


def test_the_launcher_and_the_daemon_name_the_same_readiness_variable() -> None:
    assert launch.READY_FD_ENV == prefork.READY_FD_ENV == "SHELLPER_READY_FD"
