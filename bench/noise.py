"""Judging a benchmark figure against its target within its measured noise (issue 29's gates).

A figure fails its gate only when it misses the target by more than the noise measured in the same run,
so a loaded machine does not fail ``make bench`` but a change that makes every session pay does. Pure:
no processes, no clocks; ``bench.launcher`` and ``bench.run`` judge with it, and ``bench.scale`` takes its noise.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.harness import median


def quartiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return ordered[len(ordered) // 4], ordered[(3 * len(ordered)) // 4]


def spread(values: list[float]) -> float:
    """The interquartile range relative to the median: how much a median of these moves between runs."""
    q1, q3 = quartiles(values)
    return (q3 - q1) / median(values) if median(values) else 0.0


def judge(what: str, value: float, limit: float, missed: list[str], noise: str, *, at_least: bool = False) -> str:
    """`` PASS``/`` FAIL`` for ``value`` against ``limit`` (the target plus its noise); a miss is noted.

    ``at_least``: the value must reach the limit (a throughput) rather than stay under it (a latency)."""
    if (value >= limit) if at_least else (value <= limit):
        return f"  PASS ({what}; {noise})"
    missed.append(f"{what}: {value:.2f}")
    return f"  FAIL ({what}; {noise})"


@dataclass(frozen=True)
class RatioGate:
    """A figure of shellper's against dtach's, judged as the ratio of the medians of repeated runs.

    The noise is the sum of both sides' relative interquartile ranges (as bench.launcher judges its
    launch ratios); the ratio may miss ``target`` by that fraction before the gate fails."""

    what: str
    target: float
    higher_is_better: bool  # a throughput (the ratio must reach the target) or a latency (stay under it)

    def verdict(self, ours: list[float], theirs: list[float], missed: list[str]) -> str:
        """One line: the figure, its ratio, its noise, PASS or FAIL (noted in ``missed``); ``n/a`` without data."""
        sign = ">=" if self.higher_is_better else "<="
        label = f"{self.what}, shellper/dtach {sign} {self.target:g}"
        if not ours or not theirs or not median(theirs):
            return f"  n/a  ({label}; no figures)"
        ratio = median(ours) / median(theirs)
        noise = spread(ours) + spread(theirs)
        limit = self.target * (1 - noise) if self.higher_is_better else self.target * (1 + noise)
        return judge(label, ratio, limit, missed, f"ratio {ratio:.2f}, noise {noise:.0%}, limit {limit:.2f}, "
                     f"{len(ours)} runs each", at_least=self.higher_is_better)
