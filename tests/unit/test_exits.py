"""Tests for shellper.core.exits: classification table, breaker, backoff, modes, properties.

Time is a plain float (a fake monotonic clock); the supervisor never reads a clock.
"""

from __future__ import annotations

import json
import os
import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shellper.core.exits import (
    DEFAULT_POLICY,
    EvidenceError,
    ExitClass,
    ExitEvidence,
    ExitsError,
    PolicyError,
    RestartAction,
    RestartPolicy,
    Supervisor,
    classify,
    describe_exit,
    last_error_line,
    normalise_error_line,
)

E = ExitEvidence
SEGV, ABRT, KILL, TERM = (int(signal.SIGSEGV), int(signal.SIGABRT), int(signal.SIGKILL),
                          int(signal.SIGTERM))
NOENT = "ENOENT: No such file or directory: 'nosuchcmd'"
TWENTY_LINES_THEN_OK = "Error: port already in use\n" + "".join(f"ok line {i}\n" for i in range(20))

# --------------------------------------------------------------------------- classification

CLASSIFY_TABLE = [
    # (evidence, policy overrides, expected class, substrings of the reason)
    (E(code=0, uptime=5), {}, ExitClass.CLEAN, ["clean exit", "exit 0", "after 5 s"]),
    (E(code=0, signal=0, uptime=5), {}, ExitClass.CLEAN, ["exit 0"]),
    (E(code=0, signal=KILL, uptime=5), {}, ExitClass.CRASH, ["killed by SIGKILL", "OOM"]),
    (E(code=1, uptime=0.25), {}, ExitClass.CRASH, ["exit 1", "after 0.25 s"]),
    (E(code=2, uptime=3, stderr_tail="boom\n\n"), {}, ExitClass.CRASH, ["exit 2", "last error: boom"]),
    (E(code=139, uptime=1), {}, ExitClass.CRASH, ["exit 139 (128+SIGSEGV)"]),
    (E(code=65, uptime=1), {}, ExitClass.CRASH, ["exit 65"]),
    (E(signal=SEGV, core=True, uptime=3), {}, ExitClass.CRASH, ["killed by SIGSEGV (core dumped)"]),
    (E(signal=ABRT, uptime=3), {}, ExitClass.CRASH, ["killed by SIGABRT"]),
    (E(signal=KILL, uptime=400), {}, ExitClass.CRASH, ["SIGKILL", "after 400 s", "not requested"]),
    (E(signal=TERM, uptime=4), {}, ExitClass.CRASH, ["killed by SIGTERM"]),
    (E(uptime=1), {}, ExitClass.CRASH, ["unknown status"]),
    (E(signal=TERM, uptime=4, requested=True), {}, ExitClass.REQUESTED, ["stopped on request", "SIGTERM"]),
    (E(signal=KILL, uptime=4, requested=True), {}, ExitClass.REQUESTED, ["SIGKILL"]),
    (E(code=1, uptime=4, requested=True), {}, ExitClass.REQUESTED, ["exit 1"]),
    (E(code=0, uptime=4, requested=True), {}, ExitClass.REQUESTED, ["exit 0"]),
    (E(code=127, uptime=4, requested=True), {}, ExitClass.REQUESTED, ["exit 127"]),
    (E(spawn_error=NOENT), {}, ExitClass.PERMANENT, ["exec failed", "ENOENT", "nosuchcmd"]),
    (E(spawn_error=NOENT, requested=True), {}, ExitClass.PERMANENT, ["exec failed"]),
    (E(code=126, uptime=0.01), {}, ExitClass.PERMANENT, ["exit 126", "not executable"]),
    (E(code=127, stderr_tail="sh: 1: nosuchcmd: not found\n"), {}, ExitClass.PERMANENT,
     ["exit 127", "command not found", "last error: sh: 1: nosuchcmd: not found"]),
    (E(code=64), {}, ExitClass.PERMANENT, ["exit 64", "prevent_codes", "EX_USAGE"]),
    (E(code=78), {}, ExitClass.PERMANENT, ["exit 78", "EX_CONFIG"]),
    (E(code=64), {"prevent_codes": frozenset()}, ExitClass.CRASH, ["exit 64"]),
    (E(code=3), {"prevent_codes": frozenset({3})}, ExitClass.PERMANENT, ["code 3 is in prevent_codes"]),
    (E(code=127), {"prevent_codes": frozenset()}, ExitClass.PERMANENT, ["command not found"]),
    (E(code=1, uptime=2, stderr_tail="Error: Session ID 1234 is already in use\n"), {},
     ExitClass.PERMANENT, ["fatal pattern 'already in use'", "Session ID 1234 is already in use"]),
    (E(code=1, stderr_tail="\x1b[31mSESSION ALREADY IN USE\x1b[0m"), {}, ExitClass.PERMANENT,
     ["SESSION ALREADY IN USE"]),
    (E(signal=SEGV, stderr_tail="address already in use\n  at listen (net.js:1)\n"), {},
     ExitClass.PERMANENT, ["killed by SIGSEGV", "address already in use"]),
    (E(code=1, stderr_tail=TWENTY_LINES_THEN_OK), {}, ExitClass.CRASH, ["last error: ok line 19"]),
    (E(code=1, stderr_tail="port busy: 8080"), {"fatal_patterns": (r"port busy",)},
     ExitClass.PERMANENT, ["'port busy'"]),
    (E(code=1, stderr_tail="already in use"), {"fatal_patterns": ()}, ExitClass.CRASH, ["exit 1"]),
    (E(code=0, uptime=0.5, stderr_tail="Session ID 42 is already in use"), {}, ExitClass.PERMANENT,
     ["exit 0", "fatal pattern"]),
    (E(code=0, uptime=30, stderr_tail="Session ID 42 is already in use"), {}, ExitClass.CLEAN, ["exit 0"]),
    (E(signal=TERM, uptime=4), {"clean_signals": frozenset({TERM})}, ExitClass.CLEAN,
     ["SIGTERM", "clean_signals"]),
    (E(signal=SEGV, uptime=4), {"clean_signals": frozenset({TERM})}, ExitClass.CRASH, ["SIGSEGV"]),
]


@pytest.mark.parametrize(("evidence", "overrides", "expected", "facts"), CLASSIFY_TABLE)
def test_classify_table(evidence: ExitEvidence, overrides: dict[str, object], expected: ExitClass,
                        facts: list[str]) -> None:
    result = classify(evidence, RestartPolicy(**overrides))  # type: ignore[arg-type]
    assert result.exit_class is expected
    assert result.exit_class is expected
    assert "\n" not in result.reason
    for fact in facts:
        assert fact in result.reason


def test_reason_clips_long_error_line() -> None:
    line = "x" * 5000
    result = classify(E(code=1, stderr_tail=line))
    assert len(result.error_line) == 200
    assert result.error_line.endswith("…")
    assert len(result.reason) < 300


@pytest.mark.parametrize(("evidence", "text"), [
    (E(code=0), "exit 0"),
    (E(code=1), "exit 1"),
    (E(code=130), "exit 130 (128+SIGINT)"),
    (E(code=255), "exit 255"),
    (E(signal=SEGV, core=True), "killed by SIGSEGV (core dumped)"),
    (E(signal=KILL), "killed by SIGKILL"),
    (E(code=0, signal=KILL), "killed by SIGKILL"),
    (E(spawn_error="EACCES: Permission denied: './x'"), "exec failed: EACCES: Permission denied: './x'"),
    (E(), "exited with unknown status"),
])
def test_describe_exit(evidence: ExitEvidence, text: str) -> None:
    assert describe_exit(evidence) == text


@pytest.mark.parametrize(("a", "b"), [
    ("Session ID 1234 is already in use", "Session ID 5678 is already in use"),
    ("Session ID 166e1c25-fd66-46ed-a81c-5dfcf2295efd is already in use",
     "session id 89F3B4C0-A6D7-47CB-B71A-7CC38C0627A3 is already in use"),
    ("lock held: /tmp/run-1/a.lock", "lock held: /var/tmp/other/b.lock"),
    ("request 3fa9c2b1e0 failed", "request 00aa11bb22 failed"),
    ("segfault at 0x7ffd1234", "segfault at 0xdeadbeef"),
    ("2026-07-22T14:00:01Z  error:   timeout", "2026-07-23T09:12:55Z error: timeout"),
    ("\x1b[1;31merror\x1b[0m: boom 1", "error: boom 2"),
    ("ERROR: Boom", "error: boom"),
])
def test_normalise_equal(a: str, b: str) -> None:
    assert normalise_error_line(a) == normalise_error_line(b)


@pytest.mark.parametrize(("a", "b"), [
    ("Session ID 1234 is already in use", "Session ID 1234 not found"),
    ("error: timeout", "error: refused"),
    ("decade effaced", "facade"),   # hex-looking words without digits are kept
])
def test_normalise_different(a: str, b: str) -> None:
    assert normalise_error_line(a) != normalise_error_line(b)


@pytest.mark.parametrize(("tail", "line"), [
    ("", ""),
    ("\n\n  \n", ""),
    ("first\nsecond\n\n", "second"),
    ("a\n\x1b[31mfatal: bad\x1b[0m\n\x1b[2K\n", "fatal: bad"),
    ("progress 10%\rprogress 100%\rdone\n", "done"),
    ("x\n\x1b]0;title\x07last\x00 line\t\n", "last line"),
])
def test_last_error_line(tail: str, line: str) -> None:
    assert last_error_line(tail) == line


# --------------------------------------------------------------------------- evidence

@pytest.mark.parametrize(("kwargs", "bad_field"), [
    ({"uptime": -1.0}, "uptime"),
    ({"uptime": float("nan")}, "uptime"),
    ({"code": 256}, "code"),
    ({"code": -1}, "code"),
    ({"signal": 200}, "signal"),
    ({"spawn_error": "  "}, "spawn_error"),
])
def test_evidence_validation(kwargs: dict[str, object], bad_field: str) -> None:
    with pytest.raises(EvidenceError) as info:
        E(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == bad_field


def _spawn_and_wait(script: str) -> int:
    pid = os.posix_spawn("/bin/sh", ["sh", "-c", script], dict(os.environ))
    _, status = os.waitpid(pid, 0)
    return status


def test_from_wait_status_real_processes() -> None:
    exited = ExitEvidence.from_wait_status(_spawn_and_wait("exit 3"), 0.1)
    assert (exited.code, exited.signal) == (3, None)
    killed = ExitEvidence.from_wait_status(_spawn_and_wait("kill -SEGV $$"), 0.1)
    assert (killed.code, killed.signal) == (None, SEGV)
    assert classify(killed).exit_class is ExitClass.CRASH


@pytest.mark.parametrize(("status", "code", "signum", "core"), [
    (0x0000, 0, None, False), (0x0300, 3, None, False), (0xFF00, 255, None, False),
    (SEGV, None, SEGV, False), (0x80 | SEGV, None, SEGV, True), (KILL, None, KILL, False),
])
def test_from_wait_status_decodes(status: int, code: int | None, signum: int | None, core: bool) -> None:
    evidence = ExitEvidence.from_wait_status(status, 1.0)
    assert (evidence.code, evidence.signal, evidence.core) == (code, signum, core)


def test_from_wait_status_without_a_status_is_an_unknown_exit() -> None:
    """The daemon's child lost rather than reaped (its stop gave up on it): no code, no signal."""
    lost = ExitEvidence.from_wait_status(None, 2.0, requested=True, stderr_tail="bye")
    assert lost == E(uptime=2.0, requested=True, stderr_tail="bye")
    assert describe_exit(lost) == "exited with unknown status"


def test_from_wait_status_rejects_stopped_status() -> None:
    with pytest.raises(EvidenceError) as info:
        ExitEvidence.from_wait_status(0x137F, 1.0)   # WIFSTOPPED by SIGSTOP
    assert info.value.field == "status"


# --------------------------------------------------------------------------- policy

@pytest.mark.parametrize(("options", "bad_field"), [
    ({"mode": "sometimes"}, "mode"),
    ({"bogus": 1}, "bogus"),
    ({"backoff_initial": -1}, "backoff_initial"),
    ({"backoff_initial": 10, "backoff_max": 5}, "backoff_max"),
    ({"backoff_factor": 0.5}, "backoff_factor"),
    ({"backoff_max": "inf"}, "backoff_max"),
    ({"jitter": 1.5}, "jitter"),
    ({"breaker_count": 0}, "breaker_count"),
    ({"breaker_count": "many"}, "breaker_count"),
    ({"breaker_count": True}, "breaker_count"),
    ({"min_uptime": 20, "healthy_uptime": 10}, "healthy_uptime"),
    ({"breaker_count": 10, "min_uptime": 10, "breaker_window": 60}, "breaker_window"),
    ({"same_error_count": -1}, "same_error_count"),
    ({"max_restarts": -3}, "max_restarts"),
    ({"max_restarts": ""}, "max_restarts"),  # was read as "none" (unlimited): only "none" says that
    ({"prevent_codes": "1,,2"}, "prevent_codes"),
    ({"prevent_codes": [0]}, "prevent_codes"),
    ({"prevent_codes": "64,abc"}, "prevent_codes"),
    ({"fatal_patterns": ["(unclosed"]}, "fatal_patterns"),
    ({"clean_signals": "SIGNOPE"}, "clean_signals"),
    ({"fatal_scan_lines": 0}, "fatal_scan_lines"),
])
def test_policy_validation(options: dict[str, object], bad_field: str) -> None:
    with pytest.raises(PolicyError) as info:
        RestartPolicy.from_options(options)
    assert info.value.field == bad_field
    assert bad_field in str(info.value)


def test_policy_from_loose_options_and_round_trip() -> None:
    policy = RestartPolicy.from_options({
        "mode": "ALWAYS", "backoff-initial": "0.5", "backoff_max": 30, "breaker_count": "3",
        "prevent_codes": "64, 65", "fatal_patterns": "lock held", "clean_signals": "TERM,SIGINT",
        "max_restarts": "none",
    })
    assert policy.mode == "always"
    assert policy.backoff_initial == 0.5
    assert policy.breaker_count == 3
    assert policy.prevent_codes == frozenset({64, 65})
    assert policy.fatal_patterns == ("lock held",)
    assert policy.clean_signals == frozenset({TERM, int(signal.SIGINT)})
    assert policy.max_restarts is None
    options = json.loads(json.dumps(policy.to_options()))
    assert RestartPolicy.from_options(options) == policy
    assert RestartPolicy.from_options({}) == DEFAULT_POLICY


def test_policy_dict_round_trip() -> None:
    policy = RestartPolicy(mode="no", prevent_codes=frozenset({9}), max_restarts=None)
    assert RestartPolicy.from_options(json.loads(json.dumps(policy.to_options()))) == policy


# --------------------------------------------------------------------------- supervisor helpers

def crash(uptime: float, err: str = "", code: int = 1) -> ExitEvidence:
    return E(code=code, uptime=uptime, stderr_tail=err)


def words(i: int) -> str:
    """Distinct error lines that normalisation does not merge (no digits)."""
    return "error " + "".join(chr(ord("a") + int(d)) for d in str(i)) + " happened"


def run(sup: Supervisor, exits: list[ExitEvidence], start: float = 0.0) -> list[tuple[RestartAction, float]]:
    """Feed exits as a shellper would: each run starts after the decided delay."""
    out: list[tuple[RestartAction, float]] = []
    now = start
    for ev in exits:
        now += ev.uptime
        decision = sup.on_exit(ev, now)
        out.append((decision.action, decision.delay))
        if decision.action is not RestartAction.RESTART:
            break
        now += decision.delay
    return out


# --------------------------------------------------------------------------- breaker

@pytest.mark.parametrize(("count", "window", "min_uptime", "uptime"), [
    (5, 60.0, 10.0, 1.0),
    (5, 60.0, 10.0, 9.9),    # just under min_uptime, backoff grows to 16 s: still opens
    (3, 30.0, 3.0, 0.1),
    (1, 10.0, 10.0, 5.0),    # first unstable crash is fatal
])
def test_breaker_opens_after_n_unstable_exits(count: int, window: float, min_uptime: float,
                                              uptime: float) -> None:
    sup = Supervisor(RestartPolicy(breaker_count=count, breaker_window=window, min_uptime=min_uptime,
                                   healthy_uptime=max(60.0, min_uptime)))
    decisions = run(sup, [crash(uptime, words(i)) for i in range(count + 5)])
    assert [a for a, _ in decisions] == [RestartAction.RESTART] * (count - 1) + [RestartAction.FATAL]
    reason = sup.snapshot()["reason"]
    assert isinstance(reason, str)
    assert reason.startswith(f"crash loop: {count} exits in ")
    assert f"each within {min_uptime:g} s" in reason
    assert f"last error: {words(count - 1)}" in reason
    assert sup.state().open


def test_breaker_opens_even_with_backoff_at_its_cap() -> None:
    """systemd's trap: a grown backoff stretches a loop out of a wall-clock window. Here the
    window runs on active time, so 5 fast crashes 60 s apart (backoff cap) still open it."""
    sup = Supervisor(RestartPolicy(max_restarts=None))
    exits = [crash(30.0, words(i)) for i in range(8)] + [crash(1.0, words(i)) for i in range(8, 20)]
    decisions = run(sup, exits)
    assert [d for _, d in decisions[6:12]] == [60] * 6
    assert [a for a, _ in decisions] == [RestartAction.RESTART] * 12 + [RestartAction.FATAL]
    reason = sup.snapshot()["reason"]
    assert isinstance(reason, str) and reason.startswith("crash loop: 5 exits in 244 s, each within 10 s")


def test_breaker_stays_closed_when_unstable_exits_are_spaced_out() -> None:
    sup = Supervisor(RestartPolicy(max_restarts=None))
    # Fast crashes separated by 30 s runs that crash too: 3 fast ones per 60 s of run time at most.
    exits = [crash(1.0 if i % 2 else 30.0, words(i)) for i in range(40)]
    assert all(a is RestartAction.RESTART for a, _ in run(sup, exits))
    assert sup.snapshot()["state"] == "closed"


def test_breaker_stays_closed_when_exits_are_far_apart_in_wall_time() -> None:
    sup = Supervisor(RestartPolicy(max_restarts=None))
    now = 0.0
    for i in range(20):
        now += 100.0   # the caller waited long past the delay each time
        assert sup.on_exit(crash(1.0, words(i)), now).action is RestartAction.RESTART


def test_healthy_run_resets_breaker_history() -> None:
    sup = Supervisor(RestartPolicy(max_restarts=None))
    exits = [crash(1.0, words(i)) for i in range(4)] + [crash(60.0, words(4))]
    exits += [crash(1.0, words(i)) for i in range(5, 10)]
    decisions = run(sup, exits)
    # 4 unstable + healthy (clears them) + 4 unstable restart; the 5th after the healthy run is fatal
    assert [a for a, _ in decisions] == [RestartAction.RESTART] * 9 + [RestartAction.FATAL]
    assert [d for _, d in decisions[:9]] == [1, 2, 4, 8, 1, 2, 4, 8, 16]   # backoff restarted too


# --------------------------------------------------------------------------- same error

@pytest.mark.parametrize("lines", [
    ["Session ID 1234 is held", "Session ID 5678 is held", "Session ID 9 is held"],
    ["lock /tmp/a/1.lock held by 3fa9c2b1e0", "lock /tmp/b/2.lock held by 00aa11bb22",
     "LOCK /run/x.lock HELD BY 0123456789"],
    ["\x1b[31mfatal\x1b[0m: conn 1 reset\n", "fatal: conn 22 reset", "noise\nfatal: conn 333 reset\n\n"],
])
def test_same_error_line_opens_breaker(lines: list[str]) -> None:
    sup = Supervisor(RestartPolicy(fatal_patterns=()))
    decisions = run(sup, [crash(30.0, line) for line in lines])   # stable runs: not the crash loop rule
    assert [a for a, _ in decisions] == [RestartAction.RESTART, RestartAction.RESTART, RestartAction.FATAL]
    reason = sup.snapshot()["reason"]
    assert isinstance(reason, str) and reason.startswith("same error 3 times in a row: ")
    assert last_error_line(lines[-1]) in reason


@pytest.mark.parametrize("lines", [
    ["error: timeout", "error: refused", "error: timeout", "error: refused"],
    ["error: timeout", "", "error: timeout", "", "error: timeout"],
])
def test_same_error_needs_consecutive_identical_lines(lines: list[str]) -> None:
    sup = Supervisor()
    assert all(a is RestartAction.RESTART for a, _ in run(sup, [crash(30.0, line) for line in lines]))


def test_same_error_run_reset_by_healthy_run() -> None:
    sup = Supervisor()
    exits = [crash(30.0, "e: x"), crash(30.0, "e: x"), crash(120.0, "e: x"), crash(30.0, "e: x")]
    assert all(a is RestartAction.RESTART for a, _ in run(sup, exits))
    assert sup.snapshot()["same_error"] == {"line": "e: x", "count": 2}


def test_same_error_rule_can_be_disabled() -> None:
    sup = Supervisor(RestartPolicy(same_error_count=0))
    assert all(a is RestartAction.RESTART for a, _ in run(sup, [crash(30.0, "e: x")] * 10))


# --------------------------------------------------------------------------- backoff

@pytest.mark.parametrize(("overrides", "expected"), [
    ({}, [1, 2, 4, 8, 16, 32, 60, 60, 60]),
    ({"backoff_initial": 0.1, "backoff_max": 1.0}, [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]),
    ({"backoff_factor": 1.5, "backoff_initial": 2, "backoff_max": 5}, [2, 3, 4.5, 5, 5]),
    ({"backoff_factor": 1, "backoff_initial": 3}, [3, 3, 3, 3]),
    ({"backoff_initial": 0, "backoff_max": 0}, [0, 0, 0]),
])
def test_backoff_sequence_is_capped(overrides: dict[str, float], expected: list[float]) -> None:
    sup = Supervisor(RestartPolicy(max_restarts=None, **overrides))  # type: ignore[arg-type]
    decisions = run(sup, [crash(30.0, words(i)) for i in range(len(expected))])
    assert [d for _, d in decisions] == pytest.approx(expected)


def test_backoff_resets_after_healthy_run() -> None:
    sup = Supervisor()
    delays = [d for _, d in run(sup, [crash(30.0, words(i)) for i in range(4)]
                                 + [crash(60.0, words(4)), crash(30.0, words(5))])]
    assert delays == [1, 2, 4, 8, 1, 2]


def test_backoff_overflow_is_capped() -> None:
    assert DEFAULT_POLICY.backoff(100_000) == DEFAULT_POLICY.backoff_max


@pytest.mark.parametrize(("rand", "delay"), [(None, 1.0), (0.0, 1.0), (0.5, 0.9), (1.0, 0.8)])
def test_jitter_is_injected(rand: float | None, delay: float) -> None:
    decision = Supervisor().on_exit(crash(30.0), 30.0, rand)
    assert decision.delay == pytest.approx(delay)


@pytest.mark.parametrize("rand", [-0.1, 1.5, float("nan")])
def test_jitter_value_out_of_range(rand: float) -> None:
    with pytest.raises(ExitsError) as info:
        Supervisor().on_exit(crash(30.0), 30.0, rand)
    assert info.value.field == "rand"


def test_clock_going_backwards_is_an_error() -> None:
    sup = Supervisor()
    sup.on_exit(crash(30.0, "a"), 100.0)
    with pytest.raises(ExitsError) as info:
        sup.on_exit(crash(30.0, "b"), 99.0)
    assert info.value.field == "now"


# --------------------------------------------------------------------------- modes

MODE_TABLE = [
    # (mode, evidence, action)
    ("on-failure", E(code=0, uptime=5), RestartAction.EXITED),
    ("on-failure", crash(5.0), RestartAction.RESTART),
    ("on-failure", E(signal=SEGV, uptime=5), RestartAction.RESTART),
    ("on-failure", E(signal=TERM, requested=True, uptime=5), RestartAction.EXITED),
    ("on-failure", E(code=127), RestartAction.FATAL),
    ("always", E(code=0, uptime=5), RestartAction.RESTART),
    ("always", crash(5.0), RestartAction.RESTART),
    ("always", E(code=1, requested=True, uptime=5), RestartAction.EXITED),
    ("always", E(spawn_error=NOENT), RestartAction.FATAL),
    ("no", E(code=0, uptime=5), RestartAction.EXITED),
    ("no", crash(5.0), RestartAction.EXITED),
    ("no", E(signal=KILL, uptime=5), RestartAction.EXITED),
    ("no", E(code=1, requested=True), RestartAction.EXITED),
    ("no", E(code=64), RestartAction.FATAL),
]


@pytest.mark.parametrize(("mode", "evidence", "action"), MODE_TABLE)
def test_mode_table(mode: str, evidence: ExitEvidence, action: RestartAction) -> None:
    decision = Supervisor(RestartPolicy(mode=mode)).on_exit(evidence, 10.0)
    assert decision.action is action
    assert decision.restart_count == (1 if action is RestartAction.RESTART else 0)
    if action is not RestartAction.RESTART:
        assert decision.delay == 0.0


@pytest.mark.parametrize("evidence", [
    E(spawn_error=NOENT), E(code=126), E(code=127), E(code=64), E(code=78),
    crash(1.0, "Session ID 1234 is already in use"),
])
def test_permanent_is_fatal_with_zero_restarts(evidence: ExitEvidence) -> None:
    sup = Supervisor()
    decision = sup.on_exit(evidence, 1.0)
    assert decision.action is RestartAction.FATAL
    assert decision.restart_count == 0
    assert decision.reason.startswith("permanent failure: ")
    assert decision.breaker.open


def test_requested_is_exited_and_not_sticky() -> None:
    sup = Supervisor()
    decision = sup.on_exit(E(signal=TERM, requested=True, uptime=7), 7.0)
    assert decision.action is RestartAction.EXITED
    assert "stopped on request: killed by SIGTERM after 7 s" in decision.reason
    assert sup.on_exit(crash(5.0), 20.0).action is RestartAction.RESTART


def test_fatal_is_sticky_until_reset() -> None:
    sup = Supervisor()
    first = sup.on_exit(E(code=127), 1.0)
    again = sup.on_exit(crash(5.0), 10.0)
    assert again.action is RestartAction.FATAL and first.reason in again.reason
    sup.reset()
    assert sup.snapshot()["state"] == "closed"
    assert sup.on_exit(crash(5.0), 20.0).action is RestartAction.RESTART


def test_max_restarts_caps_crash_restarts() -> None:
    sup = Supervisor(RestartPolicy(max_restarts=3))
    decisions = run(sup, [crash(30.0, words(i)) for i in range(10)])
    assert [a for a, _ in decisions] == [RestartAction.RESTART] * 3 + [RestartAction.FATAL]
    reason = sup.snapshot()["reason"]
    assert isinstance(reason, str) and reason.startswith("restart limit: 3 crash restarts")


def test_max_restarts_zero_never_restarts_a_crash() -> None:
    assert Supervisor(RestartPolicy(max_restarts=0)).on_exit(crash(30.0), 30.0).action is RestartAction.FATAL


# --------------------------------------------------------------------------- always: fast clean valve

def test_always_fast_clean_valve() -> None:
    sup = Supervisor(RestartPolicy(mode="always"))
    decisions = run(sup, [E(code=0, uptime=0.5)] * 10)
    assert [a for a, _ in decisions] == [RestartAction.RESTART] * 4 + [RestartAction.FATAL]
    reason = sup.snapshot()["reason"]
    assert reason == "clean exits: 5 in a row, each within 2 s; last: exit 0"


def test_always_slow_clean_exits_never_trip() -> None:
    sup = Supervisor(RestartPolicy(mode="always"))
    decisions = run(sup, [E(code=0, uptime=15.0)] * 200)
    assert all(a is RestartAction.RESTART for a, _ in decisions) and len(decisions) == 200
    assert sup.snapshot()["crash_restarts"] == 0
    assert max(d for _, d in decisions) == DEFAULT_POLICY.backoff_max


def test_always_mixed_fast_exits_open_the_breaker() -> None:
    sup = Supervisor(RestartPolicy(mode="always"))
    exits = [crash(1.0, words(0)), E(code=0, uptime=5.0), crash(1.0, words(1)), E(code=0, uptime=5.0),
             crash(1.0, words(2)), E(code=0, uptime=5.0)]
    assert [a for a, _ in run(sup, exits)] == [RestartAction.RESTART] * 4 + [RestartAction.FATAL]
    reason = sup.snapshot()["reason"]
    assert isinstance(reason, str) and reason.startswith("restart loop: 5 exits (2 clean) in ")


def test_always_valve_reset_by_one_slower_run() -> None:
    sup = Supervisor(RestartPolicy(mode="always", breaker_count=20, breaker_window=200))
    exits = [E(code=0, uptime=0.5)] * 4 + [E(code=0, uptime=3.0)] + [E(code=0, uptime=0.5)] * 5
    decisions = run(sup, exits)
    assert [a for a, _ in decisions] == [RestartAction.RESTART] * 9 + [RestartAction.FATAL]
    assert sup.snapshot()["reason"] == "clean exits: 5 in a row, each within 2 s; last: exit 0"


# --------------------------------------------------------------------------- record

def test_snapshot_is_json_safe_and_carries_last_exit() -> None:
    sup = Supervisor()
    decision = sup.on_exit(crash(2.0, "boom 42\n"), 2.0)
    snap = json.loads(json.dumps(sup.snapshot()))
    assert snap["state"] == "closed"
    assert snap["restart_count"] == 1
    assert snap["last_exit"]["description"] == "exit 1"
    assert snap["last_exit"]["error_line"] == "boom 42"
    assert snap["policy"]["mode"] == "on-failure"
    assert json.loads(json.dumps(decision.as_dict()))["action"] == "restart"


# --------------------------------------------------------------------------- properties

def _policy(mode: str, initial: float, factor: float, extra_cap: float, min_up: float, count: int,
            extra_window: float, same: int, clean_n: int, max_r: int | None) -> RestartPolicy:
    """A valid random policy: the window is at least the documented minimum."""
    return RestartPolicy(mode=mode, backoff_initial=initial, backoff_factor=factor,
                         backoff_max=initial + extra_cap, min_uptime=min_up, healthy_uptime=min_up * 3,
                         breaker_count=count, breaker_window=(count - 1) * min_up + extra_window,
                         same_error_count=same, clean_exit_count=clean_n, clean_exit_uptime=min_up,
                         max_restarts=max_r)


policies = st.builds(
    _policy, st.sampled_from(["on-failure", "always"]), st.floats(0, 5), st.floats(1, 3),
    st.floats(0, 100), st.floats(0.1, 20), st.integers(1, 8), st.floats(0, 100), st.integers(0, 4),
    st.integers(0, 6), st.none() | st.integers(0, 20),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=policies,
       steps=st.lists(st.tuples(st.floats(0, 0.999), st.booleans(), st.integers(0, 3),
                                st.none() | st.floats(0, 1)), min_size=1, max_size=60))
def test_fast_exits_restart_at_most_the_configured_bound(
        policy: RestartPolicy, steps: list[tuple[float, bool, int, float | None]]) -> None:
    """Any sequence of short-lived exits (crashes, and clean exits under always) that follows
    the decided delays gets at most breaker_count - 1 restarts before it stops, whatever the
    backoff, jitter or mix of exits (found by this test: fast clean exits used to stretch the
    window without being counted)."""
    sup = Supervisor(policy)
    now = 0.0
    restarts = {True: 0, False: 0}
    for frac, is_crash, err, rand in steps:
        uptime = frac * policy.min_uptime
        ev = crash(uptime, f"err {'abcd'[err]}") if is_crash else E(code=0, uptime=uptime)
        now += uptime
        decision = sup.on_exit(ev, now, rand)
        assert 0.0 <= decision.delay <= policy.backoff_max
        if decision.action is RestartAction.FATAL:
            assert sup.on_exit(crash(1.0), now + 1).action is RestartAction.FATAL   # sticky
            break
        if decision.action is RestartAction.EXITED:   # nothing restarts; a SPAWN would reset()
            break
        restarts[is_crash] += 1
        now += decision.delay
    assert restarts[True] + restarts[False] <= policy.breaker_count - 1
    if policy.max_restarts is not None:
        assert restarts[True] <= policy.max_restarts
    if policy.mode == "always" and policy.clean_exit_count:
        assert restarts[False] <= policy.clean_exit_count - 1
    json.dumps(sup.snapshot())


exit_strategy = st.one_of(
    st.builds(lambda c, u, e: crash(u, f"e{e}", c), st.integers(1, 255), st.floats(0, 500),
              st.integers(0, 5)),
    st.builds(lambda s, u: E(signal=s, uptime=u), st.sampled_from([SEGV, ABRT, KILL, TERM]),
              st.floats(0, 500)),
    st.builds(lambda u: E(code=0, uptime=u), st.floats(0, 500)),
    st.builds(lambda u: E(signal=TERM, uptime=u, requested=True), st.floats(0, 500)),
)


@settings(max_examples=150, deadline=None)
@given(max_restarts=st.integers(0, 15), mode=st.sampled_from(["on-failure", "always"]),
       exits=st.lists(st.tuples(exit_strategy, st.floats(0, 1000)), min_size=1, max_size=80))
def test_crash_restarts_never_exceed_max_restarts(max_restarts: int, mode: str,
                                                  exits: list[tuple[ExitEvidence, float]]) -> None:
    """Arbitrary exits at arbitrary (monotonic) times: crash restarts stay within max_restarts,
    and every decision is consistent with its classification."""
    sup = Supervisor(RestartPolicy(mode=mode, max_restarts=max_restarts))
    now = 0.0
    for ev, gap in exits:
        now += gap
        decision = sup.on_exit(ev, now)
        cls = decision.classification.exit_class
        if cls is ExitClass.REQUESTED and not sup.state().open:
            assert decision.action is RestartAction.EXITED
        if cls is ExitClass.PERMANENT:
            assert decision.action is RestartAction.FATAL
        if decision.action is RestartAction.RESTART:
            assert cls is ExitClass.CRASH or (mode == "always" and cls is ExitClass.CLEAN)
        assert "\n" not in decision.reason
    crash_restarts = sup.snapshot()["crash_restarts"]
    assert isinstance(crash_restarts, int) and crash_restarts <= max_restarts
