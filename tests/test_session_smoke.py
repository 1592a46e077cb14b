"""The shortest path through a real session: launch, input, output, stop, nothing left."""

from __future__ import annotations

from support.frames import read_until
from support.launchers import forked_by_a_launcher
from support.sessions import Sessions


def test_launch_echo_stop(sessions: Sessions, launches: str) -> None:
    info = sessions.start("smoke", ["cat"])
    assert forked_by_a_launcher(info.pid) == (launches == "warm")
    with sessions.connect("smoke") as client:
        assert client.welcome is not None
        assert client.welcome.shellper_pid == info.pid
        assert client.welcome.child_pid == info.child_pid
        client.write(b"ping-123\n")
        read_until(client, b"ping-123\r\n")
    sessions.stop("smoke")
