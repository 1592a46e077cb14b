"""shellper.daemon.pacing.OutputPacer on its own: when output is held for paced clients and when it is let go."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from shellper.daemon.pacing import OutputPacer
from shellper.daemon.reactor import Reactor


@dataclass
class Tower:
    client_id: int = 1
    pos: int = 0
    role: str = "tower"


@dataclass
class Rig:
    loop: Reactor
    tower: Tower | None = field(default_factory=Tower)
    others: list[Tower] = field(default_factory=list)
    end: int = 0
    calls: list[str] = field(default_factory=list)
    pacer: OutputPacer = field(init=False)

    def __post_init__(self) -> None:
        self.pacer = OutputPacer(self.loop, 1000, readers=self.readers, end=lambda: self.end,
                                 pause=lambda: self.calls.append("pause"),
                                 resume=lambda: self.calls.append("resume"),
                                 log=self.calls.append, stall=0.05)

    def readers(self) -> list[Tower]:
        return ([self.tower] if self.tower is not None else []) + self.others

    def output(self, n: int) -> None:
        self.end += n
        self.pacer.on_output()

    def run_until_timers_fire(self) -> None:
        self.loop.call_later(0.2, self.loop.stop)
        self.loop.run()


@pytest.fixture
def rig() -> Iterator[Rig]:
    loop = Reactor()
    yield Rig(loop)
    loop.close()


def test_holds_at_the_limit_and_releases_at_half(rig: Rig) -> None:
    rig.output(999)
    assert not rig.pacer.holding
    rig.output(1)
    assert rig.pacer.holding and rig.calls == ["pause"]
    rig.output(500)  # read before the pause took effect: no second pause
    assert rig.calls == ["pause"]
    assert rig.tower is not None
    rig.tower.pos = 999  # 501 behind: still more than half
    rig.pacer.on_progress()
    assert rig.pacer.holding
    rig.tower.pos = 1000  # 500 behind: released
    rig.pacer.on_progress()
    assert not rig.pacer.holding and rig.calls == ["pause", "resume"]


def test_a_tower_that_goes_away_releases(rig: Rig) -> None:
    rig.output(1000)
    rig.tower = None
    rig.pacer.on_progress()
    assert not rig.pacer.holding and rig.calls == ["pause", "resume"]


def test_no_tower_no_hold(rig: Rig) -> None:
    rig.tower = None
    rig.output(10_000)
    assert not rig.pacer.holding and rig.calls == []


def test_a_stalled_tower_is_exempt_until_it_catches_up(rig: Rig) -> None:
    rig.output(1000)
    rig.run_until_timers_fire()  # no progress within the stall time
    assert not rig.pacer.holding
    assert rig.calls[0] == "pause" and "took no output" in rig.calls[1] and rig.calls[2] == "resume"
    rig.output(5000)  # exempt: not held again, however far behind
    assert not rig.pacer.holding
    assert rig.tower is not None
    rig.tower.pos = rig.end  # caught up: waited for again
    rig.pacer.on_progress()
    rig.output(1000)
    assert rig.pacer.holding


def test_a_tower_that_keeps_reading_is_waited_for(rig: Rig) -> None:
    rig.output(10_000)
    tower = rig.tower
    assert tower is not None

    def trickle() -> None:  # a little progress every 20 ms: slow, but not stalled
        tower.pos += 1
        rig.loop.call_later(0.02, trickle)

    trickle()
    rig.run_until_timers_fire()  # four stall periods
    assert rig.pacer.holding and rig.calls == ["pause"]
    rig.pacer.forget()
    assert not rig.pacer.holding and rig.calls == ["pause"]  # forget(): the reader is gone, nothing resumed


def test_every_paced_client_is_waited_for_and_a_stalled_one_alone_is_exempt(rig: Rig) -> None:
    terminal = Tower(client_id=2, role="terminal")
    rig.others.append(terminal)
    tower = rig.tower
    assert tower is not None
    rig.output(1000)  # both 1000 behind
    assert rig.pacer.holding
    tower.pos = rig.end  # the tower caught up; the terminal still lags: held
    rig.pacer.on_progress()
    assert rig.pacer.holding
    rig.run_until_timers_fire()  # the terminal took nothing: exempt, released
    assert not rig.pacer.holding
    assert any("terminal client 2 took no output" in str(c) for c in rig.calls)
    assert "tower client" not in " ".join(map(str, rig.calls))
    rig.output(1000)  # the tower is still waited for
    assert rig.pacer.holding
