"""State events over a real shellper: every change of state is an EVENT of its own, after its cause; a
client's attach and detach cost the bounded history nothing."""

from __future__ import annotations

import time

from support.frames import recv_until
from support.sessions import Sessions
from support.waiting import wait_gone

from shellper.client.blocking import Client, SessionGone
from shellper.core.exits import RestartPolicy
from shellper.protocol import wire

FAST = RestartPolicy(backoff_initial=0.1, jitter=0.0)


def events_until(client: Client, done: str, timeout: float = 20.0) -> list[wire.Event]:
    """Numbered events (and EXITs, as kind "EXIT") until a ``state`` event saying ``done``."""
    got: list[wire.Event] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = client.recv(timeout=max(0.0, deadline - time.monotonic()))
        if isinstance(frame, wire.Exit):
            got.append(wire.Event(seq=0, kind="EXIT", data={"state": frame.state}))
        elif isinstance(frame, wire.Event) and frame.seq > 0:
            got.append(frame)
            if frame.kind == "state" and frame.data["state"] == done:
                return got
    raise AssertionError(f"no state {done!r} within {timeout:g} s: {[(e.kind, e.data) for e in got]}")


def said(events: list[wire.Event]) -> list[str]:
    return [f"state:{e.data['state']}" if e.kind == "state" else e.kind for e in events]


def test_every_change_of_state_is_an_event_after_its_cause(sessions: Sessions) -> None:
    info = sessions.start("st", ["sh", "-c", "read line; exit 3"], policy=FAST)
    with sessions.connect("st", replay_bytes=0, events_after=0) as tower:
        history = events_until(tower, "running")
        assert said(history) == ["spawned", "state:running"]
        assert history[-1].data == {"state": "running", "previous": "starting", "reason": ""}
        first_pid = history[0].data["child_pid"]
        tower.write(b"go\n")
        crash = events_until(tower, "running")
        # (the note is the shellper's line in the output saying so, PROTOCOL.md 8.5)
        assert said(crash) == ["EXIT", "exited", "state:backoff", "note", "restart_scheduled", "spawned",
                               "state:running"]
        backoff = crash[2]
        assert backoff.data["previous"] == "running" and backoff.data["reason"]
        assert backoff.data["restart_at"] == crash[4].data["at"]
        assert [e.seq for e in crash[1:]] == list(range(crash[1].seq, crash[1].seq + 6))  # numbered, no holes
        assert crash[5].data["child_pid"] != first_pid
        tower.send(wire.Stop(grace=1.0))
        stopping = events_until(tower, "stopping")
        assert said(stopping) == ["state:stopping"]
        after = []
        while True:
            try:
                frame = tower.recv(timeout=10)
            except SessionGone:
                break
            if isinstance(frame, wire.Event):
                after.append(frame.kind)
        assert "state" not in after  # one stopping event, not another when the child's exit says stopping
    assert wait_gone(info.pid, 10)


def test_a_probe_costs_the_history_nothing(sessions: Sessions) -> None:
    """Connections that come and go (a reconcile probe, `shellper ls`) are not in the held events."""
    sessions.start("probe", ["cat"])
    with sessions.connect("probe", replay_bytes=0) as tower:
        assert tower.welcome is not None
        seq = tower.welcome.event_seq
        for _ in range(5):
            with sessions.connect("probe", "viewer", replay_bytes=0) as probe:
                assert probe.welcome is not None and probe.welcome.event_seq == seq
            # the tower hears of it live, unnumbered
            attached = recv_until(tower, wire.Event, where=lambda e: e.kind == "client_detached")
            assert attached.seq == 0
        with sessions.connect("probe", "viewer", replay_bytes=0, events_after=0) as late:
            assert late.welcome is not None and late.welcome.event_seq == seq
            held = []
            while (frame := late.recv(timeout=0.5)) is not None:
                if isinstance(frame, wire.Event) and frame.seq > 0:
                    held.append(frame.kind)
            assert held == ["spawned", "state"]
    sessions.stop("probe")
