"""One exit of a session's child, as the shellper reports it.

The EXIT frame, WELCOME's ``exit``, STATUS's ``last_exit``, the ``exited`` event, the record file's
``exits``, the CLI and tower_client all carry this record. :meth:`ExitRecord.to_wire` is its one map
form (msgpack on the wire, JSON in the record file) and :meth:`ExitRecord.from_wire` reads it back,
raising :class:`ExitRecordError` for a malformed one. A leaf module: the clients import it too.
"""

from __future__ import annotations

import math
from enum import StrEnum

from shellper.core.errors import ShellperError
from shellper.core.states import SessionState
from shellper.core.structs import field, record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


class ExitClass(StrEnum):
    """What kind of end it was (shellper.core.exits.classify decides)."""

    CLEAN = "clean"
    REQUESTED = "requested"
    PERMANENT = "permanent"
    CRASH = "crash"


class ExitRecordError(ShellperError, ValueError):
    """An exit record from the wire or a record file that is not one; ``key`` names the bad entry."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"exit record: {key!r} {problem}")


@record(frozen=True)
class ExitRecord:
    """The child's end, the class and reason the supervisor gave it, and the state that followed."""

    exit_class: ExitClass
    """On the wire: ``class``."""
    state: SessionState
    """The session state the exit led to (backoff, exited, fatal; stopping or starting when asked for)."""
    reason: str
    """One line: why it ended and what follows."""
    time: float
    """Wall-clock time of the exit."""
    code: int | None = None
    """The exit code, for a normal exit."""
    signal: str | None = None
    """The signal's name ("SIGSEGV"), for a death by signal."""
    core: bool = False
    uptime: float = 0.0
    """Seconds the child ran."""
    child_pid: int | None = None
    """None for a spawn that failed."""
    restart_in: float | None = None
    """Seconds until the restart, when ``state`` is backoff."""
    stderr_tail: str = ""
    restarts: int = 0
    """Restarts since the last SPAWN, this one's included."""
    breaker: dict[str, Any] = field(default_factory=dict)
    """The supervisor's snapshot (shellper.core.exits.Supervisor.snapshot)."""
    spawn_error: str | None = None
    """Why the spawn failed, for a child that never ran."""

    def to_wire(self) -> dict[str, Any]:
        """The map every channel carries; its keys and their order are part of the protocol."""
        return {
            # float() because a float field always travels as float 64 (PROTOCOL.md section 3), never as 2
            "code": self.code, "signal": self.signal, "core": self.core, "uptime": float(self.uptime),
            "class": self.exit_class, "reason": self.reason, "state": self.state, "child_pid": self.child_pid,
            "time": float(self.time), "restart_in": None if self.restart_in is None else float(self.restart_in),
            "stderr_tail": self.stderr_tail,
            "restarts": self.restarts, "breaker": self.breaker, "spawn_error": self.spawn_error,
        }

    @classmethod
    def from_wire(cls, data: object) -> ExitRecord:
        """Read :meth:`to_wire`'s map back, or an EXIT frame's (which leaves out ``child_pid`` and
        ``restart_in`` when nil, and the last three). Unknown keys are ignored, as on the wire."""
        return cls(**_read(data))

    def summary(self) -> str:
        """"class: reason", without saying the class twice (reasons mostly start with it)."""
        return self.reason if self.reason.startswith(self.exit_class) else f"{self.exit_class}: {self.reason}"


def _reader(check: Callable[[Any], bool], want: str, nullable: bool = False,
            convert: Callable[[Any], Any] | None = None) -> Callable[[str, Any], Any]:
    def read(key: str, value: Any) -> Any:
        if value is None and nullable:
            return None
        if not check(value):
            raise ExitRecordError(key, f"must be {want}{' or nil' if nullable else ''}, not {value!r:.60}")
        return convert(value) if convert is not None else value
    return read


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _enum(enum: type[StrEnum], unknown: StrEnum) -> Callable[[str, Any], Any]:
    """Any string: a newer shellper may add classes and states (PROTOCOL.md section 12). One this version
    does not know reads as ``unknown``, what the spec tells a client to take it for."""
    values = {member.value: member for member in enum}
    return _reader(_is_str, "a string", convert=lambda v: values.get(v, unknown))


_INT = _reader(_is_int, "an integer")
_FLOAT = _reader(_is_number, "a number", convert=float)
_STR = _reader(_is_str, "a string")
_WIRE_FIELDS: tuple[tuple[str, str, bool, Callable[[str, Any], Any]], ...] = (
    # wire key, attribute, required (what every EXIT frame carries), reader
    ("code", "code", True, _reader(_is_int, "an integer", nullable=True)),
    ("signal", "signal", True, _reader(_is_str, "a string", nullable=True)),
    ("core", "core", True, _reader(lambda v: isinstance(v, bool), "a boolean")),
    ("uptime", "uptime", True, _FLOAT),
    ("class", "exit_class", True, _enum(ExitClass, ExitClass.CRASH)),
    ("reason", "reason", True, _STR),
    ("state", "state", True, _enum(SessionState, SessionState.EXITED)),
    ("child_pid", "child_pid", False, _reader(_is_int, "an integer", nullable=True)),
    ("time", "time", True, _FLOAT),
    ("restart_in", "restart_in", False, _reader(_is_number, "a number", nullable=True, convert=float)),
    ("stderr_tail", "stderr_tail", True, _STR),
    ("restarts", "restarts", False, _INT),
    ("breaker", "breaker", False, _reader(lambda v: isinstance(v, dict) and all(isinstance(k, str) for k in v),
                                          "a map with string keys", convert=dict)),
    ("spawn_error", "spawn_error", False, _reader(_is_str, "a string", nullable=True)),
)
"""How :meth:`ExitRecord.from_wire` reads each key of :meth:`ExitRecord.to_wire`'s map."""


def check_exit_record(data: object) -> None:
    """Raise :class:`ExitRecordError` unless ``data`` is a well-formed exit record (PROTOCOL.md 6.2). The one
    check: the codec applies it to EXIT, WELCOME's ``exit`` and an ``exited`` EVENT's ``data`` alike, and
    :meth:`ExitRecord.from_wire` reads through it."""
    _read(data)


def _read(data: object) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ExitRecordError("(record)", f"must be a map, not {type(data).__name__}")
    kwargs: dict[str, Any] = {}
    for key, name, required, read in _WIRE_FIELDS:
        if key not in data:
            if required:
                raise ExitRecordError(key, "is missing")
            continue
        kwargs[name] = read(key, data[key])
    return kwargs


def exit_line(last: ExitRecord, state: str, next_restart_at: float | None, now: float) -> str:
    """:meth:`ExitRecord.summary` as a person should read it at ``now``: the restart countdown its reason ends
    with ("restart #2 (crash) in 0.87 s", true only when the exit happened) counted down from
    ``next_restart_at`` while the session waits for it, and dropped once the restart is no longer pending."""
    text = last.summary()
    if last.state in (SessionState.EXITED, SessionState.FATAL) and state in (SessionState.RUNNING,
                                                                              SessionState.STARTING):
        return f"{text}; started again since"  # "not restarted" no longer says what the session is doing
    if last.restart_in is None:
        return text
    head, sep, when = text.rpartition(" in ")
    if not (sep and when.endswith(" s")):  # a reason of another wording: left as it is
        return text
    if state != SessionState.BACKOFF or next_restart_at is None:
        return head
    left = next_restart_at - now
    return f"{head} in {math.ceil(left)} s" if left > 0 else f"{head} due now"
