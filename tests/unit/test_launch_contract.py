"""The launcher (shellper.client.launch) and the daemon (shellper.daemon.prefork, which imports nothing of the
package) spell the readiness variable each on its own side: the same name, or no launch ever hears back."""

from __future__ import annotations

from shellper.client import launch
from shellper.daemon import prefork


def test_the_launcher_and_the_daemon_name_the_same_readiness_variable() -> None:
    assert launch.READY_FD_ENV == prefork.READY_FD_ENV == "SHELLPER_READY_FD"


def test_the_warm_launchers_names_are_spelt_alike_where_they_are_spelt_again() -> None:
    import inspect

    from shellper.cli import entry
    from shellper.host import warmstart

    for source in (inspect.getsource(entry._launcher_listens), inspect.getsource(launch._launcher_wanted)):
        assert f'"{warmstart.LAUNCHER_ENV}"' in source
        assert '("off", "0", "no", "false")' in source
    assert f'"{warmstart.SOCKET_NAME}"' in inspect.getsource(entry._launcher_listens)
    assert '("off", "0", "no", "false")' in inspect.getsource(warmstart.enabled)
