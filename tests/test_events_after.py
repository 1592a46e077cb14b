"""HELLO.events_after past the session's last event is refused like resume_from past the end of output:
ERROR bad_offset (fatal). Up to the last event it is accepted, and nothing is held back or invented."""

from __future__ import annotations

import pytest
from support.sessions import Sessions

from shellper.protocol import wire
from shellper.protocol.connection import RemoteError


@pytest.mark.parametrize("role", ["tower", "viewer"])
def test_events_after_past_the_last_event_is_bad_offset(sessions: Sessions, role: str) -> None:
    sessions.start("ev", ["cat"])
    with sessions.connect("ev", role, replay_bytes=0) as probe:
        assert probe.welcome is not None
        last = probe.welcome.event_seq
    assert last > 0  # spawned, state: there is a last event to be past
    with sessions.connect("ev", role, replay_bytes=0, events_after=last) as ok:  # exactly at the end: fine
        assert ok.welcome is not None and ok.welcome.event_seq == last
    for past in (last + 1, 2**63):
        with pytest.raises(RemoteError) as caught:
            sessions.connect("ev", role, replay_bytes=0, events_after=past).close()
        assert caught.value.error.code == "bad_offset" and caught.value.error.fatal
        assert caught.value.error.frame_type == wire.FrameType.HELLO
    sessions.stop("ev")
