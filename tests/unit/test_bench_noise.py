"""The bench gates' judging: a figure fails only when it misses its target by more than its noise."""

from __future__ import annotations

from bench.noise import RatioGate, judge, spread
from bench.run import gates


def test_spread_is_the_interquartile_range_over_the_median() -> None:
    assert spread([10.0, 10.0, 10.0, 10.0]) == 0.0
    assert spread([8.0, 9.0, 10.0, 11.0, 12.0]) == (11.0 - 9.0) / 10.0


def test_judge_notes_a_miss_either_way() -> None:
    missed: list[str] = []
    assert "PASS" in judge("latency", 1.0, 1.1, missed, "noise 10%")
    assert "PASS" in judge("rate", 1.0, 0.9, missed, "noise 10%", at_least=True)
    assert missed == []
    assert "FAIL" in judge("latency", 1.2, 1.1, missed, "noise 10%")
    assert "FAIL" in judge("rate", 0.8, 0.9, missed, "noise 10%", at_least=True)
    assert [m.split(":")[0] for m in missed] == ["latency", "rate"]


def test_a_throughput_below_target_passes_within_its_noise_and_fails_beyond_it() -> None:
    gate = RatioGate("flood", 1.0, higher_is_better=True)
    missed: list[str] = []
    # Ratio 0.95, noise 21 % (shellper's quartiles 85 and 105 around a median of 95): within.
    line = gate.verdict([80.0, 85.0, 95.0, 105.0, 110.0], [100.0] * 5, missed)
    assert "PASS" in line and "ratio 0.95" in line and "noise 21%" in line and missed == []
    # Ratio 0.80 with no noise at all: a miss.
    line = gate.verdict([80.0] * 5, [100.0] * 5, missed)
    assert "FAIL" in line and "ratio 0.80" in line and len(missed) == 1


def test_a_latency_above_target_fails_only_beyond_its_noise() -> None:
    gate = RatioGate("echo p99", 1.0, higher_is_better=False)
    missed: list[str] = []
    assert "PASS" in gate.verdict([100.0, 105.0, 110.0, 120.0, 125.0], [100.0] * 5, missed)  # 1.10, noise 14 %
    assert "FAIL" in gate.verdict([130.0] * 4, [100.0] * 4, missed)
    assert len(missed) == 1


def test_a_gate_without_figures_is_not_applicable_and_not_a_miss() -> None:
    missed: list[str] = []
    assert "n/a" in RatioGate("ingest", 1.0, True).verdict([], [50.0], missed)
    assert missed == []


def test_the_runs_gates_read_each_workloads_repeated_figures() -> None:
    flood = [{"seconds": 1.0, "delivered": 64 * 1024 * 1024}] * 3
    results = {
        "ingest": {"shellper_runs_mib_s": [60.0, 61.0, 62.0], "dtach_runs_mib_s": [65.0, 65.0, 65.0]},
        "throughput": {"shellper_runs": flood, "dtach_runs": flood},
        "echo": {"shellper_rounds_p50_us": [50.0] * 3, "dtach_rounds_p50_us": [60.0] * 3,
                 "shellper_rounds_p99_us": [200.0] * 3, "dtach_rounds_p99_us": [100.0] * 3},
    }
    lines, missed = gates(results)
    assert len(lines) == 4
    assert [m.split(",")[0] for m in missed] == ["detached ingest", "echo p99"]
    assert "ratio 1.00" in lines[1] and "PASS" in lines[1]
    _, none_run = gates({})
    assert none_run == []
