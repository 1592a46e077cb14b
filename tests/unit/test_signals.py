"""shellper.core.signals: signal names written and read one way, as tables."""

from __future__ import annotations

import signal

import pytest

from shellper.core.exits import PolicyError, RestartPolicy
from shellper.core.signals import bare_name, signal_name, signal_number
from shellper.protocol import wire

RTMIN, RTMAX = int(signal.SIGRTMIN), int(signal.SIGRTMAX)


@pytest.mark.parametrize(("signum", "name"), [
    (int(signal.SIGSEGV), "SIGSEGV"), (int(signal.SIGABRT), "SIGABRT"), (int(signal.SIGKILL), "SIGKILL"),
    (int(signal.SIGHUP), "SIGHUP"), (RTMIN, "SIGRTMIN"), (RTMIN + 2, "SIGRTMIN+2"), (RTMAX, "SIGRTMAX"),
    (100, "signal 100"),
])
def test_signal_name(signum: int, name: str) -> None:
    assert signal_name(signum) == name


@pytest.mark.parametrize(("text", "number"), [
    ("TERM", int(signal.SIGTERM)), ("term", int(signal.SIGTERM)), ("SIGTERM", int(signal.SIGTERM)),
    ("sigTerm", int(signal.SIGTERM)), (" KILL\n", int(signal.SIGKILL)), ("9", 9), (" 15 ", 15),
    ("SIGRTMIN+3", RTMIN + 3), ("rtmin+1", RTMIN + 1), ("SIGRTMIN", RTMIN),
    ("SIGRTMIN+999", None), ("SIGRTMIN+", None), ("BOGUS", None), ("SIG", None), ("", None), ("-9", None),
    ("signal 32", 32), ("signal x", None), ("Signal 32", None),
])
def test_signal_number(text: str, number: int | None) -> None:
    assert signal_number(text) == number


def test_every_name_signal_name_writes_reads_back() -> None:
    """What the record and the EXIT frame carry (signal_name) is what attach turns back into a status."""
    for signum in range(1, RTMAX + 1):
        assert signal_number(signal_name(signum)) == signum, signal_name(signum)


@pytest.mark.parametrize(("text", "bare"), [("KILL", "KILL"), ("sigkill", "KILL"), ("SIGWINCH", "WINCH"),
                                            ("winch", "WINCH"), ("", "")])
def test_bare_name(text: str, bare: str) -> None:
    assert bare_name(text) == bare


def test_every_wire_signal_is_a_signal() -> None:
    for name in wire.SIGNALS:
        assert wire.bare_signal("sig" + name.lower()) == name
        assert signal_number(name) == int(signal.Signals["SIG" + name])


@pytest.mark.parametrize(("value", "expected"), [
    ("TERM", int(signal.SIGTERM)), ("SIGINT", int(signal.SIGINT)), ("1", 1), (15, 15),
    ("SIGRTMIN+2", RTMIN + 2), ("NOPE", None), ("0", None), (128, None), (True, None), (1.5, None),
])
def test_restart_policy_reads_signals_the_same_way(value: object, expected: int | None) -> None:
    if expected is None:
        with pytest.raises(PolicyError):
            RestartPolicy(clean_signals=frozenset({value}))  # type: ignore[arg-type]
    else:
        assert RestartPolicy(clean_signals=frozenset({value})).clean_signals == {expected}  # type: ignore[arg-type]
