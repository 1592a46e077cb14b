"""SessionState: one enum for the record, WELCOME, STATUS and EXIT; its values are the wire's strings."""

from __future__ import annotations

import json

import msgpack
import pytest

from shellper.core.states import SessionState
from shellper.host.record import STATES, RecordError, SessionRecord

ENDED = {SessionState.EXITED, SessionState.FATAL}


@pytest.mark.parametrize("state", list(SessionState))
def test_each_state_is_its_wire_string_and_says_whether_the_child_ended_for_good(state: SessionState) -> None:
    assert state == state.value and isinstance(state, str)
    assert msgpack.unpackb(msgpack.packb(state)) == state.value
    assert json.loads(json.dumps(state)) == state.value
    assert state.ended == (state in ENDED)


def test_the_record_takes_exactly_the_states_a_shellper_can_be_in() -> None:
    assert set(STATES) == {s.value for s in SessionState}
    base = SessionRecord(name="s", boot_id="b", shellper_pid=1, shellper_start_time=0, instance_id="a" * 32,
                         command=["sh"], cwd="/", socket="/r/s.sock")
    data = json.loads(base.to_json())
    for state in SessionState:
        assert SessionRecord.from_json(json.dumps({**data, "state": state.value}).encode()).state == state
    with pytest.raises(RecordError, match="state"):  # never written by any shellper: two modules expected it
        SessionRecord.from_json(json.dumps({**data, "state": "stopped"}).encode())
