"""shellper.core.defaults: each default and limit has one home, and every layer that applies it agrees."""

from __future__ import annotations

import inspect

import pytest

from shellper.core import defaults
from shellper.core.config import STDERR_REQUESTS, ConfigError, SessionConfig
from shellper.protocol import wire

MAX = defaults.MAX_TERMINAL_DIMENSION

SIZES = [
    (1, 1, True), (80, 24, True), (MAX, MAX, True), (MAX, 1, True),
    (0, 24, False), (80, 0, False), (MAX + 1, 24, False), (80, MAX + 1, False), (-1, -1, False),
    (True, 24, False), (80.0, 24, False), ("80", 24, False), (None, 24, False),
]


@pytest.mark.parametrize(("cols", "rows", "ok"), SIZES)
def test_the_wire_the_config_and_the_pty_agree_on_terminal_sizes(cols: object, rows: object, ok: bool) -> None:
    from shellper.host.child import _check_size

    assert defaults.terminal_size_in_range(cols, rows) is ok
    frame = wire.Resize(cols=cols, rows=rows)  # type: ignore[arg-type]
    def config() -> SessionConfig:
        return SessionConfig(name="s", argv=["true"], dir="/tmp", cwd="/", env={},
                             cols=cols, rows=rows)  # type: ignore[arg-type]

    if ok:
        wire.check_request(frame)
        config().validate()
        _check_size(cols, rows)  # type: ignore[arg-type]
        return
    with pytest.raises(wire.BadField):
        wire.check_request(frame)
    with pytest.raises(ConfigError):
        config()  # checked when built
    if isinstance(cols, int) and isinstance(rows, int):
        with pytest.raises(ValueError, match=defaults.TERMINAL_SIZE_RANGE):
            _check_size(cols, rows)


@pytest.mark.parametrize(("size", "clamped"), [
    ((80, 24), (80, 24)), ((MAX, MAX), (MAX, MAX)), ((MAX + 1, 24), (MAX, 24)), ((80, MAX + 7), (80, MAX)),
    ((1 << 20, 1 << 20), (MAX, MAX)),
])
def test_a_terminal_size_is_clamped_into_what_a_resize_may_carry(size: tuple[int, int],
                                                                 clamped: tuple[int, int]) -> None:
    assert defaults.clamp_terminal_size(*size) == clamped
    wire.check_request(wire.Resize(*clamped))


def test_the_command_lines_default_to_the_same_grace_size_term_and_ring() -> None:
    from shellper.cli.argtree import build as _parser
    from shellper.host.reaper import terminate_tree
    from shellper.host.terminfo import session_term
    from tower_client.cli import _parser as tower_parser
    from tower_client.survivors import reap_survivors

    run = _parser().parse_args(["run", "s", "true"])
    config = SessionConfig(name="s", argv=["true"], dir="/tmp", cwd="/", env={})
    assert (run.grace, run.cols, run.rows, run.ring_bytes, run.stderr) == (
        config.grace, config.cols, config.rows, config.ring_bytes, config.stderr_mode)
    assert run.term is None and config.term == session_term({}) == defaults.DEFAULT_TERM  # no TERM: the default
    assert config.grace == defaults.DEFAULT_GRACE
    assert tower_parser().parse_args(["reap", "s"]).grace == defaults.DEFAULT_GRACE
    assert tower_parser().parse_args(["reconcile", "--registry", "r"]).grace == defaults.DEFAULT_GRACE
    for function in (terminate_tree, reap_survivors):
        assert inspect.signature(function).parameters["grace"].default == defaults.DEFAULT_GRACE


def test_a_record_holds_a_resolved_stderr_mode_a_config_may_also_ask_for_auto() -> None:
    from shellper.host.record import _CHECKS

    assert ("auto", *defaults.STDERR_MODES) == STDERR_REQUESTS
    assert [mode for mode in STDERR_REQUESTS if _CHECKS["stderr_mode"](mode)] == list(defaults.STDERR_MODES)


@pytest.mark.parametrize(("requested", "resolved"), [("auto", "merged"), ("merged", "merged"), ("pty", "pty"),
                                                     ("pipe", "pipe")])
def test_stderr_is_one_terminal_unless_asked_apart(requested: str, resolved: str) -> None:
    from shellper.cli.argtree import build as _parser
    from shellper.core.config import resolve_stderr_mode

    assert resolve_stderr_mode(requested) == resolved
    assert SessionConfig(name="a", argv=["x"], dir="/d", cwd="/", env={}).stderr_mode == "merged"
    assert _parser().parse_args(["run", "a", "--", "x"]).stderr == "merged"
