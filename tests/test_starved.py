"""shellper.daemon.starved: the decision as a table, the scheduler's account read for real, and real CPU hogs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellper.daemon.starved import Starvation, read_schedstat, waited_longer_than_ran


@pytest.mark.parametrize(("before", "after", "starved"), [
    ((0, 0), (10, 5), False),  # ran longer than it waited
    ((0, 0), (10, 10), False),  # as long: not starved
    ((0, 0), (10, 11), True),
    ((100, 100), (110, 140), True),  # only what happened between the samples counts
    ((100, 900), (200, 940), False),
    ((5, 5), (5, 5), False),  # nothing happened
])
def test_starved_means_waited_longer_than_ran(before: tuple[int, int], after: tuple[int, int],
                                              starved: bool) -> None:
    assert waited_longer_than_ran(before, after) is starved


def _burn(seconds: float) -> None:
    """Keep this process runnable for ``seconds`` of wall time."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_reads_its_own_run_time_as_it_grows() -> None:
    first = read_schedstat()
    assert first is not None
    start = time.process_time()
    while time.process_time() - start < 0.05:
        pass
    second = read_schedstat()
    assert second is not None
    assert second[0] - first[0] >= 40_000_000  # ns: it ran at least 40 ms of the 50 it just burnt
    assert second[1] >= first[1]


def test_samples_once_per_sample_bytes_of_output(tmp_path: Path) -> None:
    stat = tmp_path / "schedstat"
    stat.write_text("1000 0 1\n")
    starvation = Starvation(str(stat), sample_bytes=100)
    stat.write_text("1100 500 2\n")  # ran 100 ns, waited 500
    starvation.output(99)
    assert not starvation.starved  # not sampled yet
    starvation.output(1)
    assert starvation.starved
    stat.write_text("2100 600 3\n")  # ran 1000, waited 100
    starvation.output(100)
    assert not starvation.starved
    stat.write_text("2200 9999 4\n")
    starvation.output(50)
    assert not starvation.starved  # the count restarted at the last sample
    starvation.output(50)
    assert starvation.starved


@pytest.mark.parametrize("content", [None, "", "garbage\n", "12\n"], ids=["missing", "empty", "garbage", "short"])
def test_without_an_account_it_is_never_starved(tmp_path: Path, content: str | None) -> None:
    stat = tmp_path / "schedstat"
    stat.write_text("0 0 0\n")
    starvation = Starvation(str(stat), sample_bytes=1)
    stat.write_text("1 100 1\n")
    starvation.output(1)
    assert starvation.starved
    if content is None:
        stat.unlink()
    else:
        stat.write_text(content)
    assert read_schedstat(str(stat)) is None
    starvation.output(1)
    assert not starvation.starved
    stat.write_text("2 900 2\n")  # an account that comes back later is not trusted against a lost baseline
    starvation.output(1)
    assert not starvation.starved


@pytest.fixture
def one_cpu() -> Iterator[int]:
    """Pin this process to one CPU for the test, and put it back after."""
    before = os.sched_getaffinity(0)
    cpu = min(before)
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError as exc:  # pragma: no cover - a sandbox that forbids it
        pytest.skip(f"cannot set CPU affinity: {exc}")
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, before)


def test_three_hogs_on_its_cpu_starve_it(one_cpu: int) -> None:
    """The real thing: three busy processes on the same CPU leave it a quarter of that CPU, so it waits
    about three times as long as it runs. (The other way, not starved with CPUs to spare, is not tested
    for real: any other load on the machine may starve the test itself; the table and the sampling test
    cover it, and bench/ measures it.)"""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
    try:
        for hog in hogs:
            os.sched_setaffinity(hog.pid, {one_cpu})
        starvation = Starvation(sample_bytes=1)
        _burn(0.3)
        starvation.output(1)
        assert starvation.starved
    finally:
        for hog in hogs:
            hog.kill()  # our own children, by pid
            hog.wait()
