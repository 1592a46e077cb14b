"""Tables for the Fleet's pure parts: events to state changes, the agent's command line from a verdict,
inotify's event buffer, the journal's and the registry file's formats."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from shellper.protocol import wire
from tower_client.agent import AgentCommand, AgentCommandError, command_for
from tower_client.holders import Verdict
from tower_client.inotify import Mask, parse_events
from tower_client.progress import JournalPosition, ProgressError, ProgressJournal
from tower_client.reconcile import RegistryBadName, RegistryNotJSON, RegistryShapeError
from tower_client.registry_file import RegistryFile
from tower_client.stream import FleetState, SessionEvent, StateChange, StateTracker

EXIT = {"code": 3, "signal": None, "core": False, "uptime": 1.0, "class": "crash", "reason": "exit 3",
        "state": "backoff", "restart_in": 2.0, "time": 100.0, "stderr_tail": ""}


@pytest.mark.parametrize(("before", "kind", "data", "state", "reason", "extra"), [
    (None, "spawned", {"child_pid": 42, "argv": ["x"]}, FleetState.RUNNING, "spawned", {"child_pid": 42}),
    (FleetState.RUNNING, "exited", EXIT, FleetState.BACKOFF, "exit 3", {"restart_at": 102.0, "exit.code": 3}),
    (FleetState.RUNNING, "exited", {**EXIT, "state": "fatal", "restart_in": None}, FleetState.FATAL, "exit 3", {}),
    (FleetState.RUNNING, "exited", {**EXIT, "state": "stopping", "class": "requested"}, FleetState.STOPPING,
     "exit 3", {}),
    (FleetState.RUNNING, "exited", {**EXIT, "state": "someday"}, FleetState.EXITED, "exit 3", {}),
    (FleetState.RUNNING, "restart_scheduled", {"delay": 1.0, "at": 101.0}, FleetState.BACKOFF, "restart scheduled",
     {"restart_at": 101.0}),
    (FleetState.RUNNING, "gave_up", {"reason": "5 crashes in 60 s"}, FleetState.FATAL, "5 crashes in 60 s", {}),
])
def test_events_that_change_the_state(before: FleetState | None, kind: str, data: dict[str, Any],
                                      state: FleetState, reason: str, extra: dict[str, Any]) -> None:
    tracker = StateTracker("s", "i", before)
    item = tracker.take(wire.Event(seq=4, kind=kind, time=100.0, data=data))
    assert isinstance(item, StateChange)
    assert (item.session, item.instance_id, item.state, item.reason, item.seq) == ("s", "i", state, reason, 4)
    for key, value in extra.items():
        got: Any = item
        for part in key.split("."):
            got = getattr(got, part)
        assert got == value
    assert tracker.state is state


def test_the_first_state_event_switches_to_announced_states() -> None:
    tracker = StateTracker("s", "i", None)
    assert isinstance(tracker.take(wire.Event(seq=1, kind="spawned", time=1.0, data={"child_pid": 5})), StateChange)
    again = tracker.take(wire.Event(seq=2, kind="state", time=1.0, data={"state": "running", "reason": ""}))
    assert isinstance(again, SessionEvent) and tracker.state_events  # said already: not twice
    exited = tracker.take(wire.Event(seq=3, kind="exited", time=2.0, data=EXIT))
    assert isinstance(exited, SessionEvent)  # from now on only state events change the state
    change = tracker.take(wire.Event(seq=4, kind="state", time=2.0, data={"state": "backoff", "reason": "exit 3"}))
    assert isinstance(change, StateChange) and change.state is FleetState.BACKOFF and change.exit is not None


def test_announced_states_protocol_3() -> None:
    """With ``state`` events only they change the state; spawned and exited lend it the pid and the exit."""
    tracker = StateTracker("s", "i", FleetState.STARTING, state_events=True)
    kinds = []
    for seq, kind, data in [
        (1, "spawned", {"child_pid": 42, "argv": ["x"]}),
        (2, "state", {"state": "running", "previous": "starting", "reason": ""}),
        (3, "exited", EXIT),
        (4, "state", {"state": "backoff", "previous": "running", "reason": "exit 3", "restart_at": 102.0}),
        (5, "restart_scheduled", {"delay": 2.0, "at": 102.0}),
        (6, "gave_up", {"reason": "x"}),
        (7, "state", {"state": "fatal", "previous": "backoff", "reason": "gave up"}),
    ]:
        kinds.append(tracker.take(wire.Event(seq=seq, kind=kind, time=float(seq), data=data)))
    changes = [k for k in kinds if isinstance(k, StateChange)]
    assert [(c.seq, c.state, c.reason) for c in changes] == [
        (2, FleetState.RUNNING, ""), (4, FleetState.BACKOFF, "exit 3"), (7, FleetState.FATAL, "gave up")]
    assert changes[0].child_pid == 42 and changes[0].exit is None
    assert changes[1].exit is not None and changes[1].exit.code == 3 and changes[1].restart_at == 102.0
    assert changes[2].exit is None  # the exit was lent to the state it caused, once
    assert [k.seq for k in kinds if isinstance(k, SessionEvent)] == [1, 3, 5, 6]
    assert tracker.state is FleetState.FATAL


@pytest.mark.parametrize(("before", "kind"), [
    (FleetState.RUNNING, "resized"), (FleetState.RUNNING, "client_attached"),
    (FleetState.BACKOFF, "restart_scheduled"),  # the exit said backoff already: one state change, not two
    (FleetState.FATAL, "gave_up"), (None, "a_kind_from_the_future"),
])
def test_events_that_do_not(before: FleetState | None, kind: str) -> None:
    item = StateTracker("s", "i", before).take(wire.Event(seq=9, kind=kind, time=1.0, data={"reason": "x"}))
    assert isinstance(item, SessionEvent) and item.seq == 9 and item.kind == kind


AGENT = AgentCommand(("claude", "--model", "x"), "abc")


@pytest.mark.parametrize(("verdict", "argv", "action"), [
    (Verdict("resume", "abc", "free"), ["claude", "--model", "x", "--resume", "abc"], "resume"),
    (Verdict("reclaim", "abc", "ours, ended"), ["claude", "--model", "x", "--resume", "abc"], "reclaim"),
    (Verdict("mint", "abc", "foreign"), ["claude", "--model", "x", "--session-id", "NEW"], "mint"),
    (None, ["claude", "--model", "x", "--session-id", "NEW"], "mint"),
])
def test_the_command_line_follows_the_verdict(verdict: Verdict | None, argv: list[str], action: str) -> None:
    resolved = command_for(AGENT, verdict, new_id=lambda: "NEW")
    assert (resolved.argv, resolved.action) == (argv, action)
    assert resolved.conversation_id == argv[-1]


@pytest.mark.parametrize("bad", [
    lambda: AgentCommand(()), lambda: AgentCommand(("x", "")), lambda: AgentCommand(("x",), ""),
    lambda: AgentCommand(("x",), "a", resume_flag="resume"),
    lambda: command_for(AGENT, Verdict("resume", "other", "")), lambda: command_for(AGENT, Verdict("?", "abc", "")),
    lambda: AgentCommand.from_column({"argv": "claude"}),
])
def test_bad_agent_commands(bad: Any) -> None:
    with pytest.raises(AgentCommandError):
        bad()


def test_agent_column_round_trip() -> None:
    assert AgentCommand.from_column(AGENT.to_column()) == AGENT


def _event(mask: int, name: bytes) -> bytes:
    padded = name + b"\0" * (16 - len(name)) if name else b""
    return struct.pack("iIII", 1, mask, 0, len(padded)) + padded


def test_inotify_buffers() -> None:
    buf = _event(0x200, b"a.sock") + _event(0x80, b"b.json") + _event(0x4000, b"") + _event(0x400, b"")
    changes = parse_events(buf)
    assert [(c.name, c.removed, c.written, c.overflow, c.directory_gone) for c in changes] == [
        ("a.sock", True, False, False, False), ("b.json", False, True, False, False),
        ("", False, False, True, False), ("", False, False, False, True)]
    assert changes[1].mask == Mask.MOVED_TO


@pytest.mark.parametrize(("content", "words"), [
    (b"nope", "not valid JSON"), (b"[]", "expected"), (b'{"version": 2, "sessions": {}}', "version 2"),
    (b'{"version": 1, "sessions": {"../x": {}}}', "session"),
    (b'{"version": 1, "sessions": {"a": {"instance_id": "i", "offset": true, "event_seq": 0}}}', "integers"),
])
def test_bad_journals(tmp_path: Path, content: bytes, words: str) -> None:
    (tmp_path / "j").write_bytes(content)
    with pytest.raises(ProgressError, match=words):
        ProgressJournal.load(tmp_path / "j")


def test_journal_positions_only_move_forward_within_an_instance(tmp_path: Path) -> None:
    j = ProgressJournal(tmp_path / "j")
    j.start("a", "one")
    j.ack_output("a", "one", 10)
    j.ack_output("a", "one", 5)
    j.ack_event("a", "one", 3)
    j.start("a", "one", 99)  # the same instance: kept
    assert j.get("a") == JournalPosition("one", 10, 3)
    j.start("a", "two")  # a new instance starts over
    assert j.get("a") == JournalPosition("two", 0, 0)
    j.save()
    assert ProgressJournal.load(tmp_path / "j").get("a") == JournalPosition("two", 0, 0)


def test_journal_encodes_only_moved_rows_as_json_dumps_would(tmp_path: Path) -> None:
    """encode() keeps each row's text with its position: after rows move, come and go, the bytes are still
    those of json.dumps over every row (odd names and ids, a stop, a non-finite one, an int subclass)."""
    j = ProgressJournal(tmp_path / "j")

    def dumps() -> bytes:
        rows: dict[str, Any] = {}
        for name, p in sorted(j.acked.items()):
            rows[name] = {"instance_id": p.instance_id, "offset": p.offset, "event_seq": p.event_seq}
            if p.stop is not None:
                rows[name]["stop"] = p.stop
        return json.dumps({"version": 1, "sessions": rows}, separators=(",", ":")).encode()

    assert j.encode() == dumps()
    for i in range(5):
        j.start(f"s{i}", f"i\u00e9\"{i}\u2028")
    j.ack_output("s1", 'i\u00e9"1\u2028', 10)
    j.intend_stop("s2", 'i\u00e9"2\u2028', 2.5)
    j.intend_stop("s3", 'i\u00e9"3\u2028', float("inf"))
    assert j.encode() == dumps()
    j.ack_output("s1", 'i\u00e9"1\u2028', 20)
    j.forget("s0")
    j.acked["s4"] = JournalPosition("x", True, 3)  # a bool is an int: json.dumps writes true
    assert j.encode() == dumps()
    assert json.loads(j.encode())["sessions"]["s1"]["offset"] == 20


@pytest.mark.parametrize(("content", "error"), [
    (b"{", RegistryNotJSON), (b'{"sessions": {}}', RegistryShapeError),
    (b'{"sessions": [{"name": "../etc"}]}', RegistryBadName), (b'{"sessions": [], "x": NaN}', RegistryNotJSON),
])
def test_bad_registry_files(tmp_path: Path, content: bytes, error: type[Exception]) -> None:
    (tmp_path / "r").write_bytes(content)
    with pytest.raises(error, match="r:"):
        RegistryFile.load(tmp_path / "r")


def test_registry_file_keeps_the_towers_columns(tmp_path: Path) -> None:
    path = tmp_path / "r"
    path.write_text('{"tower": {"port": 1}, "sessions": [{"name": "a", "instance_id": null, "team": "blue"}]}')
    reg = RegistryFile.load(path)
    reg.put("a", "i1", launch={"cwd": "/"})
    reg.put("b", None)
    reg.save()
    back = RegistryFile.load(path)
    assert back.top == {"tower": {"port": 1}}
    assert back.get("a") == {"name": "a", "instance_id": "i1", "team": "blue", "launch": {"cwd": "/"}}
    assert [r.name for r in back.registry().rows] == ["a", "b"]
    with pytest.raises((ValueError, TypeError)):
        reg.put("a", None, **{"instance_id": "b"})  # type: ignore[misc]
    assert RegistryFile.load(tmp_path / "missing").rows == {}
