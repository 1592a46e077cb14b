"""Exit classification and the restart supervisor policy for a shellper's child.

Pure (sans-IO, like h11): no clock reads, no randomness, no I/O. The caller passes the
evidence of each exit, the current monotonic time and, if it wants jitter, a random value.
That keeps every decision reproducible in a table test and in the session record.

Two layers:

* :func:`classify` turns one :class:`ExitEvidence` into one :class:`ExitClass` plus a
  one-line human reason. ``clean`` (exit 0, no signal), ``requested`` (the shellper or a
  client stopped it), ``permanent`` (retrying can never help: exec failure, 126/127, a
  prevent-listed code, a fatal stderr pattern) or ``crash`` (everything else).
* :class:`Supervisor` keeps the recent history and turns each exit into a
  :class:`RestartDecision`: ``restart`` after a capped exponential backoff, ``exited``, or
  ``fatal`` when retrying is pointless (permanent exit, crash loop, the same error again and
  again, a run of fast clean exits under ``always``, the lifetime restart cap).

Why the crash-loop window runs on "active" time: every peer that combines a growing backoff
with a time-window breaker (systemd ``RestartSteps`` + ``StartLimitBurst``) can stretch a
loop out of its own window, so the breaker never opens. Here the backoff waits this
supervisor imposed are subtracted from the clock the window is measured on, so
``breaker_count`` consecutive short-lived crashes always open the breaker, whatever the
backoff (``RestartPolicy`` checks ``breaker_window >= (breaker_count - 1) * min_uptime``).
Every restarted run shorter than ``min_uptime`` counts (clean ones too under ``always``), so
no mix of fast exits can restart more than ``breaker_count - 1`` times in a row.

The defaults (in shellper.core.defaults) come from the original supervisor's incidents and from peers (Docker, pm2,
systemd, Kubernetes); which incident taught what is in bench/NOTES.md, "Incidents behind the defaults".
"""

from __future__ import annotations

import math
import os
import re
import signal
from collections import deque
from collections.abc import Iterable, Mapping
from enum import StrEnum

from shellper.core.defaults import (
    DEFAULT_BACKOFF_FACTOR,
    DEFAULT_BACKOFF_INITIAL,
    DEFAULT_BACKOFF_MAX,
    DEFAULT_BREAKER_COUNT,
    DEFAULT_BREAKER_WINDOW,
    DEFAULT_CLEAN_EXIT_COUNT,
    DEFAULT_CLEAN_EXIT_UPTIME,
    DEFAULT_CLEAN_SIGNALS,
    DEFAULT_FATAL_PATTERNS,
    DEFAULT_FATAL_SCAN_LINES,
    DEFAULT_HEALTHY_UPTIME,
    DEFAULT_JITTER,
    DEFAULT_MAX_RESTARTS,
    DEFAULT_MIN_UPTIME,
    DEFAULT_MODE,
    DEFAULT_PREVENT_CODES,
    DEFAULT_SAME_ERROR_COUNT,
    RESTART_MODES,
)
from shellper.core.errors import ShellperError
from shellper.core.exitrecord import ExitClass, ExitRecord
from shellper.core.signals import signal_name, signal_number
from shellper.core.states import SessionState
from shellper.core.structs import field, fields, record, signed
from shellper.core.terminal.text import strip_escapes

# --------------------------------------------------------------------------- defaults
# (in shellper.core.defaults, which imports nothing: the CLI's option table shows them before it imports this)

#: Shell conventions for exec failures: never retried.
EXEC_FAILURE_CODES: dict[int, str] = {126: "command not executable", 127: "command not found"}
#: Error lines quoted in reasons are clipped to this many characters.
ERROR_LINE_MAX = 200
#: ExitEvidence.as_dict() keeps at most this many trailing characters of the stderr tail.
STDERR_TAIL_MAX = 4096
#: An ExitRecord keeps at most this many trailing characters of the stderr tail.
EXIT_RECORD_TAIL = 2000

_SYSEXITS = {64: "EX_USAGE", 65: "EX_DATAERR", 66: "EX_NOINPUT", 69: "EX_UNAVAILABLE",
             70: "EX_SOFTWARE", 75: "EX_TEMPFAIL", 77: "EX_NOPERM", 78: "EX_CONFIG"}


# --------------------------------------------------------------------------- errors

class ExitsError(ShellperError, ValueError):
    """Bad input to this module; ``field`` names what was wrong, ``value`` what it was."""

    def __init__(self, field: str, value: object, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(f"{field}={value!r}: {problem}")


class PolicyError(ExitsError):
    """A restart policy option is invalid (unknown, wrong type, out of range)."""

    def __str__(self) -> str:
        return f"restart policy: {super().__str__()}"


class EvidenceError(ExitsError):
    """Exit evidence is inconsistent (negative uptime, exit code out of range, ...)."""


# --------------------------------------------------------------------------- text helpers

# Pattern strings, not compiled patterns: re compiles each on first use and keeps it in its cache, so a
# shellper whose child never exits with output to read does not compile them at start-up.
_CTRL = r"[\x00-\x08\x0b-\x1f\x7f]"
_UUID = r"(?i)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_PATH = r"(?<![\w.~/-])(?:~|\.{1,2})?/[^\s\"'`()\[\]<>{},;:]*"
_HEX = r"(?i)\b0x[0-9a-f]+\b|\b(?=[0-9a-f]*[0-9])[0-9a-f]{6,}\b"


def _clean_lines(text: str) -> list[str]:
    """Visible, non-empty lines of terminal text (a CR-overwritten line keeps its last part)."""
    out: list[str] = []
    for raw in strip_escapes(text).split("\n"):
        parts = [p for p in raw.split("\r") if p.strip()]
        if not parts:
            continue
        line = re.sub(_CTRL, "", parts[-1]).strip()
        if line:
            out.append(line)
    return out


def last_error_line(stderr_tail: str) -> str:
    """The last non-empty line of the tail, escapes and control characters removed."""
    lines = _clean_lines(stderr_tail)
    return lines[-1] if lines else ""


def normalise_error_line(line: str) -> str:
    """Fingerprint of an error line: ids, numbers and paths replaced, case folded.

    So "Session ID 1234 is already in use" and "Session ID 5678 is already in use" (or two
    different uuids, hex ids, temp paths, timestamps) compare equal.
    """
    text = re.sub(_CTRL, "", strip_escapes(line))
    text = re.sub(_UUID, "<id>", text)
    text = re.sub(_PATH, "<path>", text)
    text = re.sub(_HEX, "<id>", text)
    text = re.sub(r"\d+", "<n>", text)
    return re.sub(r"\s+", " ", text).strip().casefold()


def _clip(text: str, limit: int = ERROR_LINE_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _secs(value: float) -> str:
    """Seconds for humans: "0.25 s", "3 s", "12.5 s", "300 s"."""
    if math.isinf(value):
        return "inf s"
    digits = 2 if value < 1 else 1
    text = f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return f"{text} s"


def _parse_signal(value: object, field_name: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        num = value
    elif isinstance(value, str):
        parsed = signal_number(value)
        if parsed is None:
            raise PolicyError(field_name, value, "unknown signal name")
        num = parsed
    else:
        raise PolicyError(field_name, value, "expected a signal number or name")
    if not 1 <= num < 128:
        raise PolicyError(field_name, value, "signal number out of range 1..127")
    return num


# --------------------------------------------------------------------------- evidence

@record(frozen=True)
class ExitEvidence:
    """Everything known about one end of the child (or one failed spawn).

    ``code`` is set for a normal exit, ``signal`` for a death by signal (a signal wins over a
    code: a PTY library may report a SIGKILL as code 0 plus signal 9); ``signal=0`` means none.
    ``requested`` is True when the shellper or a client (SIGNAL/STOP) asked for the stop.
    ``spawn_error`` replaces the exit for a spawn that never ran (e.g.
    "ENOENT: No such file or directory: 'nosuchcmd'"). ``stderr_tail`` is the end of the child's
    stderr when it has one of its own, else the end of its output (one terminal for both).
    """

    code: int | None = None
    signal: int | None = None
    core: bool = False
    uptime: float = 0.0
    requested: bool = False
    stderr_tail: str = ""
    spawn_error: str | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.uptime, int | float) and math.isfinite(self.uptime)) or self.uptime < 0:
            raise EvidenceError("uptime", self.uptime, "must be a finite number >= 0")
        if self.code is not None and not 0 <= self.code <= 255:
            raise EvidenceError("code", self.code, "exit code out of range 0..255")
        if self.signal is not None and not 0 <= self.signal < 128:
            raise EvidenceError("signal", self.signal, "signal number out of range 0..127")
        if self.signal == 0:
            object.__setattr__(self, "signal", None)
        if self.spawn_error is not None and not self.spawn_error.strip():
            raise EvidenceError("spawn_error", self.spawn_error, "must be a non-empty message")

    @classmethod
    def from_wait_status(cls, status: int | None, uptime: float, *, requested: bool = False,
                         stderr_tail: str = "") -> ExitEvidence:
        """Evidence from a raw ``waitpid`` status (decoding only, no syscalls). None, a status that was
        never seen (the child was lost rather than reaped), gives neither a code nor a signal."""
        if status is None:
            return cls(uptime=uptime, requested=requested, stderr_tail=stderr_tail)
        if os.WIFSIGNALED(status):
            return cls(signal=os.WTERMSIG(status), core=os.WCOREDUMP(status), uptime=uptime,
                       requested=requested, stderr_tail=stderr_tail)
        if os.WIFEXITED(status):
            return cls(code=os.WEXITSTATUS(status), uptime=uptime, requested=requested,
                       stderr_tail=stderr_tail)
        raise EvidenceError("status", status, "not a terminated process (stopped or continued)")

    def as_dict(self) -> dict[str, object]:
        """JSON-safe form for the session record (stderr tail clipped to its end)."""
        return {
            "code": self.code,
            "signal": self.signal,
            "signal_name": signal_name(self.signal) if self.signal else None,
            "core": self.core,
            "uptime": self.uptime,
            "requested": self.requested,
            "stderr_tail": self.stderr_tail[-STDERR_TAIL_MAX:],
            "spawn_error": self.spawn_error,
            "description": describe_exit(self),
        }


def describe_exit(evidence: ExitEvidence) -> str:
    """"exit 1", "exit 139 (128+SIGSEGV)", "killed by SIGSEGV (core dumped)", "exec failed: …"."""
    if evidence.spawn_error is not None:
        return f"exec failed: {_clip(evidence.spawn_error)}"
    if evidence.signal:
        core = " (core dumped)" if evidence.core else ""
        return f"killed by {signal_name(evidence.signal)}{core}"
    if evidence.code is None:
        return "exited with unknown status"
    if 128 < evidence.code < 128 + 65:
        return f"exit {evidence.code} (128+{signal_name(evidence.code - 128)})"
    return f"exit {evidence.code}"


# --------------------------------------------------------------------------- policy

_FLOAT_FIELDS = ("backoff_initial", "backoff_max", "backoff_factor", "jitter", "healthy_uptime",
                 "min_uptime", "breaker_window", "clean_exit_uptime")
_INT_FIELDS = ("breaker_count", "same_error_count", "clean_exit_count", "fatal_scan_lines")


@signed
@record(frozen=True)
class RestartPolicy:
    """Restart and breaker settings; see the DEFAULT_* constants for what each one means.

    Validated on construction: an invalid field raises :class:`PolicyError` naming it.
    """

    mode: str = DEFAULT_MODE
    backoff_initial: float = DEFAULT_BACKOFF_INITIAL
    backoff_max: float = DEFAULT_BACKOFF_MAX
    backoff_factor: float = DEFAULT_BACKOFF_FACTOR
    jitter: float = DEFAULT_JITTER
    healthy_uptime: float = DEFAULT_HEALTHY_UPTIME
    min_uptime: float = DEFAULT_MIN_UPTIME
    breaker_count: int = DEFAULT_BREAKER_COUNT
    breaker_window: float = DEFAULT_BREAKER_WINDOW
    same_error_count: int = DEFAULT_SAME_ERROR_COUNT
    clean_exit_count: int = DEFAULT_CLEAN_EXIT_COUNT
    clean_exit_uptime: float = DEFAULT_CLEAN_EXIT_UPTIME
    max_restarts: int | None = DEFAULT_MAX_RESTARTS
    prevent_codes: frozenset[int] = DEFAULT_PREVENT_CODES
    fatal_patterns: tuple[str, ...] = DEFAULT_FATAL_PATTERNS
    fatal_scan_lines: int = DEFAULT_FATAL_SCAN_LINES
    clean_signals: frozenset[int] = DEFAULT_CLEAN_SIGNALS
    _fatal_res: tuple[re.Pattern[str], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.mode not in RESTART_MODES:
            raise PolicyError("mode", self.mode, f"expected one of {', '.join(RESTART_MODES)}")
        for name in _FLOAT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise PolicyError(name, value, "expected a finite number")
            if value < 0:
                raise PolicyError(name, value, "must be >= 0")
        for name in _INT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise PolicyError(name, value, "expected an integer >= 0")
        if self.backoff_max < self.backoff_initial:
            raise PolicyError("backoff_max", self.backoff_max,
                              f"must be >= backoff_initial ({self.backoff_initial:g})")
        if self.backoff_factor < 1:
            raise PolicyError("backoff_factor", self.backoff_factor, "must be >= 1")
        if self.jitter > 1:
            raise PolicyError("jitter", self.jitter, "must be a fraction in 0..1")
        if self.breaker_count < 1:
            raise PolicyError("breaker_count", self.breaker_count, "must be >= 1")
        if self.fatal_scan_lines < 1:
            raise PolicyError("fatal_scan_lines", self.fatal_scan_lines, "must be >= 1")
        if self.healthy_uptime < self.min_uptime:
            raise PolicyError("healthy_uptime", self.healthy_uptime,
                              f"must be >= min_uptime ({self.min_uptime:g})")
        reach = (self.breaker_count - 1) * self.min_uptime
        if self.breaker_window < reach:
            raise PolicyError("breaker_window", self.breaker_window,
                              f"must be >= (breaker_count - 1) * min_uptime = {reach:g} s, or "
                              "the breaker could never open for crashes just under min_uptime")
        if self.max_restarts is not None and (
                isinstance(self.max_restarts, bool) or not isinstance(self.max_restarts, int)
                or self.max_restarts < 0):
            raise PolicyError("max_restarts", self.max_restarts, "expected an integer >= 0 or None")
        codes = frozenset(self.prevent_codes)
        for code in codes:
            if isinstance(code, bool) or not isinstance(code, int) or not 1 <= code <= 255:
                raise PolicyError("prevent_codes", code, "exit codes must be integers in 1..255")
        object.__setattr__(self, "prevent_codes", codes)
        sigs = frozenset(_parse_signal(s, "clean_signals") for s in self.clean_signals)
        object.__setattr__(self, "clean_signals", sigs)
        if isinstance(self.fatal_patterns, str):
            raise PolicyError("fatal_patterns", self.fatal_patterns, "expected a sequence of regexes")
        patterns = tuple(self.fatal_patterns)
        compiled: list[re.Pattern[str]] = []
        for pattern in patterns:
            if not isinstance(pattern, str) or not pattern:
                raise PolicyError("fatal_patterns", pattern, "expected a non-empty regex string")
            try:
                compiled.append(re.compile(pattern, re.IGNORECASE))
            except re.error as exc:
                raise PolicyError("fatal_patterns", pattern, f"invalid regex: {exc}") from None
        object.__setattr__(self, "fatal_patterns", patterns)
        object.__setattr__(self, "_fatal_res", tuple(compiled))

    @classmethod
    def from_options(cls, options: Mapping[str, object]) -> RestartPolicy:
        """Build a policy from loose options (JSON, CLI strings); unknown keys are errors.

        Keys may use "-" or "_" ("backoff-initial"); numbers may be strings; prevent_codes and
        clean_signals may be comma-separated strings; max_restarts may be "none".
        """
        known = {f.name for f in fields(cls) if f.init}
        kwargs: dict[str, object] = {}
        for raw_key, value in options.items():
            key = raw_key.replace("-", "_")
            if key not in known:
                raise PolicyError(raw_key, value, "unknown restart policy option")
            kwargs[key] = _coerce_option(key, value)
        return cls(**kwargs)  # type: ignore[arg-type]

    def to_options(self) -> dict[str, object]:
        """JSON-safe options; ``from_options(p.to_options()) == p``."""
        return {
            "mode": self.mode,
            **{name: getattr(self, name) for name in _FLOAT_FIELDS + _INT_FIELDS},
            "max_restarts": self.max_restarts,
            "prevent_codes": sorted(self.prevent_codes),
            "fatal_patterns": list(self.fatal_patterns),
            "clean_signals": sorted(self.clean_signals),
        }

    def backoff(self, step: int) -> float:
        """Delay before restart number ``step`` (0-based) of a streak, without jitter."""
        if step < 0:
            raise ExitsError("step", step, "must be >= 0")
        try:
            delay = self.backoff_initial * self.backoff_factor ** step
        except OverflowError:
            return self.backoff_max
        return min(delay, self.backoff_max)

    def fatal_match(self, stderr_tail: str) -> tuple[str, str] | None:
        """(pattern, matching line) for the first fatal pattern found near the tail's end."""
        if not self._fatal_res:
            return None
        for line in reversed(_clean_lines(stderr_tail)[-self.fatal_scan_lines:]):
            for regex in self._fatal_res:
                if regex.search(line):
                    return regex.pattern, line
        return None


def _coerce_option(key: str, value: object) -> object:
    """Loose option value -> the type RestartPolicy expects (range checks happen there)."""
    if key == "mode":
        if not isinstance(value, str):
            raise PolicyError(key, value, "expected a string")
        return value.strip().lower().replace("_", "-")
    if key in _FLOAT_FIELDS or key in _INT_FIELDS or key == "max_restarts":
        if key == "max_restarts" and (value is None or (isinstance(value, str) and value.strip().lower() == "none")):
            return None
        want_int = key in _INT_FIELDS or key == "max_restarts"
        if isinstance(value, str):
            try:
                return int(value) if want_int else float(value)
            except ValueError:
                raise PolicyError(key, value, "expected an integer" if want_int else "expected a number") from None
        if want_int and isinstance(value, float) and value.is_integer():
            return int(value)
        return value
    if key in ("prevent_codes", "clean_signals"):
        items: Iterable[object]
        if isinstance(value, str):  # "" is the empty set; "1,,2" is a typo, not {1, 2}
            items = [s.strip() for s in value.split(",")] if value.strip() else []
            if "" in items:
                raise PolicyError(key, value, "an empty item in the comma-separated list")
        elif isinstance(value, Iterable):
            items = value
        else:
            raise PolicyError(key, value, "expected a list or a comma-separated string")
        if key == "clean_signals":
            return frozenset(_parse_signal(s, key) for s in items)
        codes: set[int] = set()
        for item in items:
            try:
                codes.add(int(item) if isinstance(item, str) else item)  # type: ignore[arg-type]
            except ValueError:
                raise PolicyError(key, item, "expected an exit code") from None
        return frozenset(codes)
    if key == "fatal_patterns":
        if isinstance(value, str):
            return (value,)
        if isinstance(value, Iterable):
            return tuple(value)
        raise PolicyError(key, value, "expected a regex or a list of regexes")
    return value


DEFAULT_POLICY = RestartPolicy()


# --------------------------------------------------------------------------- classification

@record(frozen=True)
class Classification:
    """One class, a one-line reason, and the facts the reason was built from."""

    exit_class: ExitClass
    reason: str
    description: str
    error_line: str = ""


def classify(evidence: ExitEvidence, policy: RestartPolicy = DEFAULT_POLICY) -> Classification:
    """Class and one-line reason for one exit; order: exec failure, requested, clean, permanent."""
    desc = describe_exit(evidence)
    line = _clip(last_error_line(evidence.stderr_tail))
    after = f"{desc} after {_secs(evidence.uptime)}"
    tail = f"; last error: {line}" if line else ""

    def result(cls: ExitClass, reason: str) -> Classification:
        return Classification(cls, reason, desc, line)

    if evidence.spawn_error is not None:
        return result(ExitClass.PERMANENT, desc)
    if evidence.requested:
        return result(ExitClass.REQUESTED, f"stopped on request: {after}")
    fatal = policy.fatal_match(evidence.stderr_tail)
    sig = evidence.signal
    clean = (sig is None and evidence.code == 0) or (sig is not None and sig in policy.clean_signals)
    if clean:
        # A fast "clean" exit that prints a fatal error is a failure in disguise (a tool that
        # exits 0 on a session collision).
        if fatal is not None and evidence.uptime < policy.min_uptime:
            return result(ExitClass.PERMANENT,
                          f"{after}, but stderr matches fatal pattern {fatal[0]!r}: {_clip(fatal[1])}")
        how = " (listed in clean_signals)" if sig is not None else ""
        return result(ExitClass.CLEAN, f"clean exit: {after}{how}")
    code = evidence.code
    if sig is None and code in EXEC_FAILURE_CODES:
        return result(ExitClass.PERMANENT, f"{after} ({EXEC_FAILURE_CODES[code]}){tail}")
    if sig is None and code is not None and code in policy.prevent_codes:
        name = f", {_SYSEXITS[code]}" if code in _SYSEXITS else ""
        return result(ExitClass.PERMANENT, f"{after} (code {code} is in prevent_codes{name}){tail}")
    if fatal is not None:
        return result(ExitClass.PERMANENT,
                      f"{after}; stderr matches fatal pattern {fatal[0]!r}: {_clip(fatal[1])}")
    hint = " (not requested: OOM killer or an outside kill)" if sig == signal.SIGKILL else ""
    return result(ExitClass.CRASH, f"{after}{hint}{tail}")


# --------------------------------------------------------------------------- supervisor

class RestartAction(StrEnum):
    RESTART = "restart"
    EXITED = "exited"
    FATAL = "fatal"


@record(frozen=True)
class BreakerState:
    """Breaker and counters after a decision; ``as_dict()`` goes in the session record."""

    open: bool
    reason: str | None
    restart_count: int
    crash_restarts: int
    backoff_step: int
    unstable_exits: int
    same_error_line: str
    same_error_count: int
    fast_clean_exits: int

    def as_dict(self) -> dict[str, object]:
        return {
            "state": "open" if self.open else "closed",
            "reason": self.reason,
            "restart_count": self.restart_count,
            "crash_restarts": self.crash_restarts,
            "backoff_step": self.backoff_step,
            "unstable_exits": self.unstable_exits,
            "same_error": {"line": self.same_error_line, "count": self.same_error_count},
            "fast_clean_exits": self.fast_clean_exits,
        }


@record(frozen=True)
class RestartDecision:
    """What to do after one exit. ``delay`` (seconds) is only meaningful for RESTART."""

    action: RestartAction
    delay: float
    classification: Classification
    reason: str
    restart_count: int
    breaker: BreakerState

    def as_dict(self) -> dict[str, object]:
        return {
            "action": self.action.value,
            "delay": self.delay,
            "class": self.classification.exit_class.value,
            "exit": self.classification.description,
            "reason": self.reason,
            "restart_count": self.restart_count,
            "breaker": self.breaker.as_dict(),
        }


def exit_record(evidence: ExitEvidence, decision: RestartDecision, *, state: SessionState, child_pid: int | None,
                at: float, breaker: dict[str, object]) -> ExitRecord:
    """What the session reports of one exit: the evidence, the supervisor's decision on it, and the state
    the session went to (which a STOP or a SPAWN in progress overrides, so it is passed in)."""
    c = decision.classification
    # A failed exec is described as such ("exec failed: ..."), not by what the supervisor decided; a child a
    # SPAWN replaces (state starting) by that, not by the supervisor's "not restarted": a new one starts.
    if evidence.spawn_error:
        reason = c.reason
    elif state is SessionState.STARTING:
        reason = f"{c.reason}; replaced by a new child (SPAWN)"
    else:
        reason = decision.reason
    return ExitRecord(
        code=evidence.code, signal=signal_name(evidence.signal) if evidence.signal else None, core=evidence.core,
        uptime=round(evidence.uptime, 3), exit_class=c.exit_class,
        reason=reason, state=state, child_pid=child_pid, time=at,
        restart_in=decision.delay if state is SessionState.BACKOFF else None,
        stderr_tail=evidence.stderr_tail[-EXIT_RECORD_TAIL:], restarts=decision.restart_count, breaker=breaker,
        spawn_error=evidence.spawn_error)


class Supervisor:
    """Restart state machine for one session's child. Feed it every exit, in time order.

    ``now`` is any monotonic clock in seconds. FATAL is sticky until :meth:`reset` (called
    when the tower sends SPAWN); EXITED is not sticky.
    """

    def __init__(self, policy: RestartPolicy = DEFAULT_POLICY) -> None:
        self.policy = policy
        self.reset()

    def reset(self) -> None:
        """Forget all history: a SPAWN from the tower is a fresh start."""
        self._restarts = 0
        self._crash_restarts = 0
        self._step = 0
        self._imposed = 0.0              # sum of the backoff delays this supervisor decided
        self._active = -math.inf         # last "active" time = now - imposed
        self._last_now: float | None = None
        self._unstable: deque[tuple[float, float, bool]] = deque()   # (active time, wall time, clean)
        self._same_line = ""
        self._same_raw = ""
        self._same_count = 0
        self._fast_clean = 0
        self._open_reason: str | None = None
        self._last_exit: dict[str, object] | None = None

    def on_exit(self, evidence: ExitEvidence, now: float, rand: float | None = None) -> RestartDecision:
        """Record one exit at time ``now``; ``rand`` in [0, 1] applies jitter (None: none)."""
        if not math.isfinite(now):
            raise ExitsError("now", now, "must be a finite time")
        if self._last_now is not None and now < self._last_now:
            raise ExitsError("now", now, f"went backwards (last exit at {self._last_now!r})")
        if rand is not None and not 0.0 <= rand <= 1.0:
            raise ExitsError("rand", rand, "must be in [0, 1]")
        self._last_now = now
        # Active time: wall time minus the waits we imposed (see the module docstring).
        self._active = max(self._active, now - self._imposed)
        p = self.policy
        c = classify(evidence, p)
        self._last_exit = {"at": now, "class": c.exit_class.value, "description": c.description,
                           "uptime": evidence.uptime, "error_line": c.error_line}

        if self._open_reason is not None:
            return self._decide(RestartAction.FATAL, c, f"breaker already open: {self._open_reason}")

        if evidence.uptime >= p.healthy_uptime:
            self._step = 0
            self._unstable.clear()
            self._same_line = self._same_raw = ""
            self._same_count = 0
        if evidence.uptime >= p.clean_exit_uptime:
            self._fast_clean = 0
        while self._unstable and self._unstable[0][0] < self._active - p.breaker_window:
            self._unstable.popleft()

        cls = c.exit_class
        if cls is ExitClass.REQUESTED:
            return self._decide(RestartAction.EXITED, c, f"{c.reason}; not restarted")
        if cls is ExitClass.PERMANENT:
            return self._fatal(c, f"permanent failure: {c.reason}")
        if cls is ExitClass.CLEAN:
            if p.mode != "always":
                return self._decide(RestartAction.EXITED, c, f"{c.reason}; not restarted (restart mode {p.mode})")
            if evidence.uptime < p.clean_exit_uptime:
                self._fast_clean += 1
            if evidence.uptime < p.min_uptime:
                self._unstable.append((self._active, now, True))
            last = f"last: {c.description}" + (f"; last error: {c.error_line}" if c.error_line else "")
            if p.clean_exit_count and self._fast_clean >= p.clean_exit_count:
                return self._fatal(c, f"clean exits: {self._fast_clean} in a row, each within "
                                      f"{_secs(p.clean_exit_uptime)}; {last}")
            loop = self._loop_reason(now, last)
            if loop is not None:
                return self._fatal(c, loop)
            return self._restart(c, crash=False, rand=rand)

        # CRASH
        if p.mode == "no":
            return self._decide(RestartAction.EXITED, c, f"crash: {c.reason}; not restarted (restart mode no)")
        if evidence.uptime < p.min_uptime:
            self._unstable.append((self._active, now, False))
        norm = normalise_error_line(c.error_line)
        if norm and norm == self._same_line:
            self._same_count += 1
        else:
            self._same_line, self._same_count = norm, (1 if norm else 0)
        self._same_raw = c.error_line
        last = f"last exit: {c.description}" + (f"; last error: {c.error_line}" if c.error_line else "")
        loop = self._loop_reason(now, last)
        if loop is not None:
            return self._fatal(c, loop)
        if p.same_error_count and self._same_count >= p.same_error_count:
            return self._fatal(c, f"same error {self._same_count} times in a row: {c.error_line}; "
                                  f"last exit: {c.description} after {_secs(evidence.uptime)}")
        if p.max_restarts is not None and self._crash_restarts >= p.max_restarts:
            return self._fatal(c, f"restart limit: {self._crash_restarts} crash restarts since the "
                                  f"last spawn (max_restarts {p.max_restarts}); {last}")
        return self._restart(c, crash=True, rand=rand)

    def _loop_reason(self, now: float, last: str) -> str | None:
        """The breaker's verdict: every restarted run shorter than min_uptime counts (pm2's
        "unstable restart"), clean ones too under "always", so no mix of fast exits escapes."""
        p = self.policy
        n = len(self._unstable)
        if n < p.breaker_count:
            return None
        clean = sum(1 for _, _, was_clean in self._unstable if was_clean)
        what = f"restart loop: {n} exits ({clean} clean)" if clean else f"crash loop: {n} exits"
        return (f"{what} in {_secs(now - self._unstable[0][1])}, each within {_secs(p.min_uptime)} "
                f"(limit {p.breaker_count} per {_secs(p.breaker_window)} of run time); {last}")

    def _restart(self, c: Classification, *, crash: bool, rand: float | None = None) -> RestartDecision:
        delay = self.policy.backoff(self._step)
        if rand is not None:
            delay *= 1.0 - self.policy.jitter * rand
        self._step += 1
        self._restarts += 1
        if crash:
            self._crash_restarts += 1
        self._imposed += delay
        what = "crash" if crash else f"restart mode {self.policy.mode}"
        return self._decide(RestartAction.RESTART, c, f"{c.reason}; restart #{self._restarts} ({what}) "
                                                f"in {_secs(delay)}", delay)

    def _fatal(self, c: Classification, reason: str) -> RestartDecision:
        self._open_reason = reason
        return self._decide(RestartAction.FATAL, c, reason)

    def _decide(self, action: RestartAction, c: Classification, reason: str, delay: float = 0.0) -> RestartDecision:
        return RestartDecision(action, delay, c, reason, self._restarts, self.state())

    def state(self) -> BreakerState:
        return BreakerState(
            open=self._open_reason is not None,
            reason=self._open_reason,
            restart_count=self._restarts,
            crash_restarts=self._crash_restarts,
            backoff_step=self._step,
            unstable_exits=len(self._unstable),
            same_error_line=_clip(self._same_raw) if self._same_count else "",
            same_error_count=self._same_count,
            fast_clean_exits=self._fast_clean,
        )

    def snapshot(self) -> dict[str, object]:
        """Breaker state plus the last exit, JSON-safe, for the session record."""
        snap = self.state().as_dict()
        snap["last_exit"] = dict(self._last_exit) if self._last_exit is not None else None
        snap["policy"] = self.policy.to_options()
        return snap
