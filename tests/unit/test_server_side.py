"""shellper.protocol.server on its own: the handshake's checks, the rights table by role, the feature table
by version and what every client frame comes to, as tables (no socket, no session)."""

from __future__ import annotations

from typing import Any

import pytest

from shellper.protocol import wire
from shellper.protocol.server import (
    CLIENT_FRAMES,
    MAY_SEND,
    PACED,
    SHOWS_TERMINAL,
    Accepted,
    Carry,
    Fatal,
    NotHello,
    Refuse,
    ServerSide,
)
from shellper.protocol.wire import Feature, FrameType, Role


def hello(version: int = 3, role: str = "tower", **fields: Any) -> wire.Hello:
    return wire.Hello(version=version, role=role, **fields)


def opened(role: Role, version: int = 3) -> ServerSide:
    side = ServerSide()
    accepted = side.hello(hello(version, role.value), last_event=0, output_end=0)
    assert isinstance(accepted, Accepted)
    return side


# ------------------------------------------------------------------------------------------- tables


def test_the_rights_table() -> None:
    """Who may send what, written out: the table is the rule, this is its reading."""
    towers_only = {FrameType.SIGNAL, FrameType.SPAWN, FrameType.STOP}
    assert MAY_SEND[Role.TOWER] == CLIENT_FRAMES
    assert MAY_SEND[Role.TERMINAL] == CLIENT_FRAMES - towers_only
    assert MAY_SEND[Role.VIEWER] == {FrameType.STATUS, FrameType.PING, FrameType.PONG, FrameType.SCREEN}
    assert set(MAY_SEND) == set(Role)
    assert {Role.TOWER, Role.TERMINAL} == PACED
    assert {Role.TERMINAL, Role.VIEWER} == SHOWS_TERMINAL


@pytest.mark.parametrize(("version", "feature", "has"), [
    (2, Feature.REPLY, False), (3, Feature.REPLY, True), (2, Feature.SCREEN, False), (3, Feature.SCREEN, True),
    (2, Feature.RENDERED, False), (3, Feature.RENDERED, True), (2, Feature.HELLO_SIZE, False),
    (3, Feature.HELLO_SIZE, True), (2, Feature.GAP_PREAMBLE, False), (3, Feature.GAP_PREAMBLE, True),
    (4, Feature.SCREEN, True),
])
def test_the_feature_table(version: int, feature: Feature, has: bool) -> None:
    assert wire.supports(version, feature) is has


def test_the_old_version_names_read_the_feature_table() -> None:
    assert wire.SINCE[Feature.REPLY] == wire.REPLY_VERSION
    assert wire.SINCE[Feature.SCREEN] == wire.SCREEN_VERSION
    assert set(wire.SINCE) == set(Feature)


def test_roles_are_the_wire_strings() -> None:
    assert wire.ROLES == ("tower", "terminal", "viewer")
    assert [Role(name) for name in wire.ROLES] == list(Role)
    assert Role.VIEWER == "viewer" and f"{Role.TERMINAL}" == "terminal"


# ------------------------------------------------------------------------------------------- the handshake

REFUSED_HELLOS = [
    ("too old", hello(version=1), Fatal("unsupported_version", "protocol version 1 is not supported; this "
                                        "shellper speaks 2..3")),
    ("bad role", hello(role="admin"), Fatal("bad_role", "role 'admin' is not one of tower, terminal, viewer")),
    ("events ahead", hello(events_after=8), Fatal("bad_offset", "events_after 8 is past the last event (7)")),
    ("resume ahead", hello(resume_from=101), Fatal("bad_offset", "resume_from 101 is past the end of output (100)")),
]


@pytest.mark.parametrize(("what", "frame", "fatal"), REFUSED_HELLOS, ids=[r[0] for r in REFUSED_HELLOS])
def test_a_hello_refused(what: str, frame: wire.Hello, fatal: Fatal) -> None:
    side = ServerSide()
    assert side.hello(frame, last_event=7, output_end=100) == fatal
    assert not side.open and side.role is None


@pytest.mark.parametrize(("frame", "field"), [
    (hello(detach_byte=256), "detach_byte"),
    (hello(role="terminal", cols=0, rows=24), "cols"),
    (hello(role="terminal", cols=80), "rows"),
])
def test_a_hello_out_of_range_is_a_bad_field(frame: wire.Hello, field: str) -> None:
    with pytest.raises(wire.BadField) as caught:
        ServerSide().hello(frame, last_event=0, output_end=0)
    assert caught.value.field_name == field


ACCEPTED_HELLOS = [
    ("tower", hello(), dict(role=Role.TOWER, version=3, rendered=None, wants_events=True, may_hand_over=False,
                            size=None)),
    ("newer client", hello(version=9, role="viewer"), dict(version=3, wants_events=False)),
    ("version 2", hello(version=2, role="terminal", rendered=5, cols=80, rows=24),
     dict(version=2, rendered=None, size=None)),
    ("rendered", hello(role="terminal", rendered=5), dict(rendered=5)),
    ("rendered, resuming", hello(role="terminal", rendered=5, resume_from=0), dict(rendered=None)),
    ("rendered, tower", hello(rendered=5), dict(rendered=None)),
    ("size", hello(role="terminal", cols=80, rows=24), dict(size=(80, 24))),
    ("size, viewer", hello(role="viewer", cols=80, rows=24), dict(size=None)),
    ("events", hello(role="viewer", events_after=0), dict(wants_events=True)),
    ("terminal handed over", hello(role="terminal", terminal=True), dict(may_hand_over=True)),
    ("tower's terminal", hello(terminal=True), dict(may_hand_over=False)),
    ("long name", hello(client="x" * 300), dict(name="x" * 200)),
]


@pytest.mark.parametrize(("what", "frame", "expected"), ACCEPTED_HELLOS, ids=[r[0] for r in ACCEPTED_HELLOS])
def test_a_hello_accepted(what: str, frame: wire.Hello, expected: dict[str, Any]) -> None:
    side = ServerSide()
    accepted = side.hello(frame, last_event=0, output_end=0)
    assert isinstance(accepted, Accepted)
    for name, value in expected.items():
        assert getattr(accepted, name) == value, name
    assert side.open and side.role is accepted.role and side.version == accepted.version


# ------------------------------------------------------------------------------------------- frames

BEFORE_HELLO = [
    ("hello", hello(), "hello"),
    ("ping first", wire.Ping(nonce=1), NotHello),
    ("unknown", wire.Unknown(frame_type=0x7F, length=0), None),
    ("oversized", wire.Skipped(frame_type=1, length=99, limit=4), wire.FrameTooLarge),
]


@pytest.mark.parametrize(("what", "event", "outcome"), BEFORE_HELLO, ids=[r[0] for r in BEFORE_HELLO])
def test_before_the_handshake(what: str, event: wire.DecodedEvent, outcome: Any) -> None:
    side = ServerSide()
    if isinstance(outcome, type):
        with pytest.raises(outcome):
            side.receive(event, stopping=False)
    elif outcome == "hello":
        assert side.receive(event, stopping=False) is event
    else:
        assert side.receive(event, stopping=False) is outcome


R, S = FrameType.RESIZE, FrameType.SIGNAL
FRAMES: list[tuple[str, Role, int, wire.DecodedEvent, bool, Any]] = [
    # (what, role, version, frame, stopping, outcome): Carry(rid) as ("carry", rid)
    ("input", Role.TERMINAL, 3, wire.Data(data=b"x"), False, ("carry", None)),
    ("a viewer's input", Role.VIEWER, 3, wire.Data(data=b"x"), False,
     Refuse(FrameType.DATA, None, "forbidden", "a viewer may not send input")),
    ("a viewer's resize", Role.VIEWER, 3, wire.Resize(cols=80, rows=24, id=4), True,
     Refuse(R, 4, "forbidden", "a viewer may not resize")),
    ("a terminal's signal", Role.TERMINAL, 3, wire.Signal(signal="INT", id=5), False,
     Refuse(S, 5, "forbidden", "SIGNAL is accepted only from the tower, not a terminal")),
    ("a viewer's stop, version 2", Role.VIEWER, 2, wire.Stop(id=6), False,
     Refuse(FrameType.STOP, None, "forbidden", "STOP is accepted only from the tower, not a viewer")),
    ("signal", Role.TOWER, 3, wire.Signal(signal="INT", id=5), False, ("carry", 5)),
    ("signal, version 2: no id", Role.TOWER, 2, wire.Signal(signal="INT", id=5), False, ("carry", None)),
    ("signal while stopping", Role.TOWER, 3, wire.Signal(signal="INT", id=5), True,
     Refuse(S, 5, "stopping", "the session is stopping: SIGNAL not carried out")),
    ("signal while stopping, no id", Role.TOWER, 3, wire.Signal(signal="INT"), True, ("carry", None)),
    ("stop while stopping", Role.TOWER, 3, wire.Stop(id=7), True, ("carry", 7)),
    ("status while stopping", Role.VIEWER, 3, wire.Status(id=8), True, ("carry", 8)),
    ("resize out of range", Role.TERMINAL, 3, wire.Resize(cols=0, rows=24, id=9), False,
     Refuse(R, 9, "bad_field", "RESIZE frame: cols: size 0x24 is outside 1..65535")),
    ("resize out of range, no id", Role.TERMINAL, 3, wire.Resize(cols=0, rows=24), False, wire.BadField),
    ("screen", Role.VIEWER, 3, wire.ScreenRequest(id=1), False, ("carry", 1)),
    ("labels", Role.TERMINAL, 3, wire.Labels(set={"k": "v"}, id=2), False, ("carry", 2)),
    ("a viewer's labels", Role.VIEWER, 3, wire.Labels(set={"k": "v"}, id=3), False,
     Refuse(FrameType.LABELS, 3, "forbidden", "a viewer may not label the session")),
    ("labels, version 2", Role.TOWER, 2, wire.Labels(set={"k": "v"}), False,
     Refuse(FrameType.LABELS, None, "protocol", "LABELS needs protocol version 3")),
    ("screen, version 2", Role.VIEWER, 2, wire.ScreenRequest(), False,
     Refuse(FrameType.SCREEN, None, "protocol", "SCREEN needs protocol version 3")),
    ("screen, bad format", Role.VIEWER, 3, wire.ScreenRequest(format="png", id=2), False,
     Refuse(FrameType.SCREEN, 2, "bad_field", "SCREEN frame: format 'png' is not one of text, ansi")),
    ("the shellper's frame", Role.TOWER, 3, wire.Gap(offset=0, missed=0), False,
     Refuse(FrameType.GAP, None, "protocol", "GAP is sent by the shellper, not by clients")),
    ("a second hello", Role.TOWER, 3, hello(), False, wire.ProtocolError),
    ("unknown", Role.VIEWER, 3, wire.Unknown(frame_type=0x7F, length=0), False, None),
    ("oversized", Role.VIEWER, 3, wire.Skipped(frame_type=1, length=99, limit=4), False, wire.FrameTooLarge),
]


@pytest.mark.parametrize(("what", "role", "version", "event", "stopping", "outcome"), FRAMES,
                         ids=[r[0] for r in FRAMES])
def test_what_a_frame_comes_to(what: str, role: Role, version: int, event: wire.DecodedEvent, stopping: bool,
                               outcome: Any) -> None:
    side = opened(role, version)
    if isinstance(outcome, type):
        with pytest.raises(outcome):
            side.receive(event, stopping=stopping)
    elif isinstance(outcome, tuple):
        assert side.receive(event, stopping=stopping) == Carry(event, outcome[1])  # type: ignore[arg-type]
    else:
        assert side.receive(event, stopping=stopping) == outcome


@pytest.mark.parametrize("role", list(Role))
@pytest.mark.parametrize("kind", sorted(CLIENT_FRAMES))
def test_every_client_frame_is_carried_or_refused_by_the_table(role: Role, kind: FrameType) -> None:
    frame = wire.FRAME_CLASSES[kind]
    fields: dict[str, Any] = {"RESIZE": {"cols": 80, "rows": 24}, "SIGNAL": {"signal": "INT"},
                              "SPAWN": {"argv": ["true"]}, "PING": {"nonce": 1}, "PONG": {"nonce": 1}}
    event = frame(**fields.get(kind.name, {}))
    outcome = opened(role).receive(event, stopping=False)
    if kind in MAY_SEND[role]:
        assert isinstance(outcome, Carry)
    else:
        assert isinstance(outcome, Refuse) and outcome.code == "forbidden"


@pytest.mark.parametrize(("role", "version", "code", "request_id", "answerable"), [
    (Role.TOWER, 3, "bad_field", 1, True), (Role.TOWER, 3, "missing_field", 1, True),
    (Role.TOWER, 3, "bad_payload", 1, False), (Role.TOWER, 3, "bad_field", None, False),
    (Role.TOWER, 2, "bad_field", 1, False),
])
def test_which_malformed_requests_are_answered(role: Role, version: int, code: str, request_id: int | None,
                                               answerable: bool) -> None:
    exc = wire.BadField("x", FrameType.RESIZE)
    exc.code, exc.request_id = code, request_id  # type: ignore[misc]
    assert opened(role, version).answerable(exc) is answerable
    assert ServerSide().answerable(exc) is False  # before the handshake: never


@pytest.mark.parametrize(("role", "version", "preamble"), [
    (Role.TOWER, 3, False), (Role.TERMINAL, 3, True), (Role.VIEWER, 3, True), (Role.TERMINAL, 2, False)])
def test_which_gaps_carry_a_preamble(role: Role, version: int, preamble: bool) -> None:
    assert opened(role, version).gap_preamble is preamble
