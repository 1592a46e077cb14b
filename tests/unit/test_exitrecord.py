"""shellper.core.exitrecord: one exit record, its one wire form, and what a malformed one raises."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import msgpack
import pytest

from shellper.core.errors import ShellperError
from shellper.core.exitrecord import ExitClass, ExitRecord, ExitRecordError
from shellper.core.exits import ExitEvidence, RestartPolicy, Supervisor, exit_record
from shellper.core.signals import signal_name
from shellper.core.states import SessionState
from shellper.protocol import wire

VECTORS = Path(__file__).resolve().parents[2] / "protocol" / "vectors" / "frames.json"


def _plain(value: Any) -> Any:
    """A vector's JSON value as the decoder gives it: {"float": x} is a float, {"hex": s} bytes (PROTOCOL.md 14)."""
    if isinstance(value, dict):
        if list(value) == ["float"]:
            return float(value["float"])
        if list(value) == ["hex"]:
            return bytes.fromhex(value["hex"])
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


FRAME_VECTORS: list[dict[str, Any]] = _plain(json.loads(VECTORS.read_text(encoding="utf-8")))
EXIT_VECTORS = [v for v in FRAME_VECTORS if v["type"] == "EXIT" and v["fields"]["class"]]
"""The EXIT vectors of real exits (the minimal one has no class, which no shellper sends)."""
NESTED_EXITS = [(v["name"], v["fields"]["exit"] if "exit" in v["fields"] else v["fields"]["info"]["last_exit"])
                for v in FRAME_VECTORS if "exit" in v["fields"] or "last_exit" in v["fields"].get("info", {})]
NESTED_EXITS += [(v["name"], v["fields"]["data"]) for v in FRAME_VECTORS if v["fields"].get("kind") == "exited"]

SEGV = int(signal.SIGSEGV)
NOENT = "ENOENT: No such file or directory: 'nosuchcmd'"
AT = 1767225600.25


def legacy_map(evidence: ExitEvidence, supervisor: Supervisor, state: SessionState, child_pid: int | None,
               at: float) -> tuple[dict[str, Any], ExitRecord]:
    """The map the daemon built by hand before ExitRecord (kept here as the reference the wire must not drift
    from), and the record exit_record() builds from the same decision."""
    decision = supervisor.on_exit(evidence, 100.0)
    breaker = supervisor.snapshot()
    legacy = {
        "code": evidence.code,
        "signal": signal_name(evidence.signal) if evidence.signal else None,
        "core": evidence.core,
        "uptime": round(evidence.uptime, 3),
        "class": decision.classification.exit_class.value,
        # the one change since: a child a SPAWN replaces no longer says "not restarted"
        "reason": (decision.classification.reason if evidence.spawn_error else
                   f"{decision.classification.reason}; replaced by a new child (SPAWN)"
                   if state is SessionState.STARTING else decision.reason),
        "state": state,
        "child_pid": child_pid,
        "time": at,
        "restart_in": decision.delay if state is SessionState.BACKOFF else None,
        "stderr_tail": evidence.stderr_tail[-2000:],
        "restarts": decision.restart_count,
        "breaker": breaker,
        "spawn_error": evidence.spawn_error,
    }
    return legacy, exit_record(evidence, decision, state=state, child_pid=child_pid, at=at, breaker=breaker)


EXITS = [  # evidence, state the session went to, child pid
    (ExitEvidence(signal=SEGV, core=True, uptime=12.5, stderr_tail="Segmentation fault\n"), SessionState.BACKOFF, 4243),
    (ExitEvidence(code=0, uptime=0.1234567), SessionState.EXITED, 7),
    (ExitEvidence(code=1, uptime=3.0, stderr_tail="x" * 5000 + "boom\n"), SessionState.BACKOFF, 8),
    (ExitEvidence(signal=int(signal.SIGTERM), uptime=3600.0, requested=True), SessionState.STOPPING, 77),
    (ExitEvidence(code=127, uptime=0.01), SessionState.FATAL, 9),
    (ExitEvidence(spawn_error=NOENT), SessionState.FATAL, None),
    (ExitEvidence(code=1, uptime=1.0), SessionState.STARTING, 10),  # a SPAWN replacing the child
]
EXIT_IDS = ["segv-core", "clean", "long-tail", "requested", "127", "spawn-error", "replaced"]


@pytest.mark.parametrize(("evidence", "state", "child_pid"), EXITS, ids=EXIT_IDS)
def test_the_wire_map_is_the_one_the_daemon_always_sent(evidence: ExitEvidence, state: SessionState,
                                                        child_pid: int | None) -> None:
    legacy, built = legacy_map(evidence, Supervisor(RestartPolicy()), state, child_pid, AT)
    assert list(built.to_wire()) == list(legacy)
    assert built.to_wire() == legacy
    pack = msgpack.packb  # what WELCOME, STATUS and EVENT carry: byte for byte the same
    assert pack(built.to_wire(), use_bin_type=True) == pack(legacy, use_bin_type=True)
    assert json.dumps(built.to_wire(), sort_keys=True) == json.dumps(legacy, sort_keys=True)  # the record file
    assert wire.encode(wire.Exit.of(built)) == wire.encode(wire.Exit.from_map(legacy))  # the EXIT frame


@pytest.mark.parametrize(("evidence", "state", "child_pid"), EXITS, ids=EXIT_IDS)
def test_the_wire_map_reads_back_through_msgpack_and_json(evidence: ExitEvidence, state: SessionState,
                                                          child_pid: int | None) -> None:
    _, built = legacy_map(evidence, Supervisor(RestartPolicy()), state, child_pid, AT)
    through_msgpack = msgpack.unpackb(msgpack.packb(built.to_wire(), use_bin_type=True), raw=False)
    assert ExitRecord.from_wire(through_msgpack) == built
    assert ExitRecord.from_wire(json.loads(json.dumps(built.to_wire()))) == built
    assert isinstance(ExitRecord.from_wire(through_msgpack).exit_class, ExitClass)
    assert isinstance(ExitRecord.from_wire(through_msgpack).state, SessionState)


@pytest.mark.parametrize("vector", EXIT_VECTORS, ids=[v["name"] for v in EXIT_VECTORS])
def test_an_exit_frame_vector_is_an_exit_record(vector: dict[str, Any]) -> None:
    frame = wire.decode_all(bytes.fromhex(vector["hex"]))[0]
    assert isinstance(frame, wire.Exit)
    record = frame.exit_record()
    assert record == ExitRecord.from_wire(vector["fields"])
    assert wire.encode(wire.Exit.of(record)).hex() == vector["hex"]


@pytest.mark.parametrize(("name", "exit_map"), NESTED_EXITS, ids=[n for n, _ in NESTED_EXITS])
def test_the_exit_inside_welcome_status_and_event_vectors(name: str, exit_map: dict[str, Any]) -> None:
    record = ExitRecord.from_wire(exit_map)
    assert {k: v for k, v in record.to_wire().items() if k in exit_map} == exit_map


def test_frames_hand_out_their_exit_records() -> None:
    _, built = legacy_map(*EXITS[0][:1], Supervisor(RestartPolicy()), SessionState.BACKOFF, 4243, AT)
    welcome = wire.Welcome(version=2, name="s", shellper_pid=1, shellper_start_time=0, boot_id="b",
                           instance_id="i", state="backoff", cols=80, rows=24, ring_start=0, ring_end=0,
                           exit=built.to_wire())
    assert welcome.exit_record() == built
    assert wire.Welcome(**{**welcome.to_map(), "exit": None}).exit_record() is None
    assert wire.StatusReply(state="backoff", info={"last_exit": built.to_wire()}).last_exit() == built
    assert wire.StatusReply(state="running", info={"last_exit": None}).last_exit() is None
    assert wire.StatusReply(state="running").last_exit() is None
    with pytest.raises(ExitRecordError):
        wire.StatusReply(state="running", info={"last_exit": [1]}).last_exit()
    # An EXIT frame leaves out what it does not carry: the record it gives back defaults those.
    assert wire.Exit.of(built).exit_record().restarts == 0 and built.restarts == 1


GOOD: dict[str, Any] = {"code": 1, "signal": None, "core": False, "uptime": 3.0, "class": "crash",
                        "reason": "crash: exit 1", "state": "backoff", "time": AT, "stderr_tail": ""}


@pytest.mark.parametrize(("data", "key", "problem"), [
    ([1], "(record)", "must be a map, not list"),
    (None, "(record)", "must be a map, not NoneType"),
    ({k: v for k, v in GOOD.items() if k != "class"}, "class", "is missing"),
    ({k: v for k, v in GOOD.items() if k != "time"}, "time", "is missing"),
    ({k: v for k, v in GOOD.items() if k != "signal"}, "signal", "is missing"),
    ({**GOOD, "code": "1"}, "code", "must be an integer or nil"),
    ({**GOOD, "code": True}, "code", "must be an integer or nil"),
    ({**GOOD, "signal": 11}, "signal", "must be a string or nil"),
    ({**GOOD, "core": 0}, "core", "must be a boolean"),
    ({**GOOD, "uptime": "3"}, "uptime", "must be a number"),
    ({**GOOD, "uptime": None}, "uptime", "must be a number"),
    ({**GOOD, "class": 3}, "class", "must be a string"),
    ({**GOOD, "state": None}, "state", "must be a string"),
    ({**GOOD, "reason": None}, "reason", "must be a string"),
    ({**GOOD, "child_pid": 1.5}, "child_pid", "must be an integer or nil"),
    ({**GOOD, "restart_in": "soon"}, "restart_in", "must be a number or nil"),
    ({**GOOD, "restarts": None}, "restarts", "must be an integer"),
    ({**GOOD, "breaker": {1: 2}}, "breaker", "must be a map with string keys"),
    ({**GOOD, "spawn_error": b"x"}, "spawn_error", "must be a string or nil"),
])
def test_a_malformed_exit_record_says_which_key(data: object, key: str, problem: str) -> None:
    with pytest.raises(ExitRecordError) as info:
        ExitRecord.from_wire(data)
    assert (info.value.key, info.value.problem[:len(problem)]) == (key, problem)
    assert isinstance(info.value, ShellperError) and isinstance(info.value, ValueError)
    assert repr(key) in str(info.value)


@pytest.mark.parametrize(("changes", "exit_class", "state"), [
    ({"class": "oom"}, ExitClass.CRASH, SessionState.BACKOFF),
    ({"class": ""}, ExitClass.CRASH, SessionState.BACKOFF),
    ({"state": "hibernating"}, ExitClass.CRASH, SessionState.EXITED),
    ({"class": "clean", "state": "exited"}, ExitClass.CLEAN, SessionState.EXITED),
])
def test_a_class_or_state_of_a_newer_shellper_reads_as_the_spec_says(changes: dict[str, Any], exit_class: ExitClass,
                                                                      state: SessionState) -> None:
    """PROTOCOL.md 6.1/6.2: an unknown class is taken for crash, an unknown state for no child running (and
    the codec accepts them: new classes and states need no new version)."""
    record = ExitRecord.from_wire({**GOOD, **changes})
    assert (record.exit_class, record.state) == (exit_class, state)
    assert wire.decode_all(wire.encode(wire.Exit.from_map({**GOOD, **changes})))  # type: ignore[arg-type]


@pytest.mark.parametrize(("changes", "expected"), [
    ({}, ExitRecord(ExitClass.CRASH, SessionState.BACKOFF, "crash: exit 1", AT, code=1, uptime=3.0)),
    ({"uptime": 3, "time": 5}, ExitRecord(ExitClass.CRASH, SessionState.BACKOFF, "crash: exit 1", 5.0, code=1,
                                          uptime=3.0)),
    ({"child_pid": 9, "restart_in": 2, "restarts": 4, "breaker": {"state": "closed"}, "spawn_error": None,
      "added_by_a_newer_shellper": 1},
     ExitRecord(ExitClass.CRASH, SessionState.BACKOFF, "crash: exit 1", AT, code=1, uptime=3.0, child_pid=9,
                restart_in=2.0, restarts=4, breaker={"state": "closed"})),
])
def test_optional_keys_default_and_numbers_become_floats(changes: dict[str, Any], expected: ExitRecord) -> None:
    got = ExitRecord.from_wire({**GOOD, **changes})
    assert got == expected
    assert isinstance(got.time, float) and isinstance(got.uptime, float)


@pytest.mark.parametrize(("exit_class", "reason", "summary"), [
    (ExitClass.CRASH, "crash: exit 1 after 3 s", "crash: exit 1 after 3 s"),
    (ExitClass.CRASH, "crash loop: 5 exits in 4 s", "crash loop: 5 exits in 4 s"),
    (ExitClass.PERMANENT, "exec failed: ENOENT", "permanent: exec failed: ENOENT"),
    (ExitClass.CLEAN, "clean exit: exit 0 after 1 s; not restarted", "clean exit: exit 0 after 1 s; not restarted"),
    (ExitClass.REQUESTED, "", "requested: "),
])
def test_summary_names_the_class_once(exit_class: ExitClass, reason: str, summary: str) -> None:
    assert ExitRecord(exit_class, SessionState.EXITED, reason, AT).summary() == summary


def test_exit_record_keeps_the_end_of_the_stderr_tail() -> None:
    _, built = legacy_map(ExitEvidence(code=1, uptime=1.0, stderr_tail="a" * 3000 + "END"),
                          Supervisor(RestartPolicy()), SessionState.BACKOFF, 1, AT)
    assert len(built.stderr_tail) == 2000 and built.stderr_tail.endswith("END")
