"""Two trees' screen models side by side in one process: CPU ms per MiB of each workload, the trees alternated
round by round, so that a loaded machine slows both alike (bench/NOTES.md, "The screen model split").

    python -m bench.screen_ab OLD_TREE NEW_TREE [--rounds N]
"""

from __future__ import annotations

import argparse
import sys
import time
from types import ModuleType
from typing import Any

MiB = 1 << 20
FEED = 64 * 1024


def load(tree: str) -> tuple[ModuleType, ModuleType, Any]:
    """The tree's screen module, ring module and ScreenModel class (the daemon's module under either name)."""
    sys.path.insert(0, tree)
    for name in [k for k in sys.modules if k == "shellper" or k.startswith("shellper.")]:
        del sys.modules[name]
    import shellper.core.ring as ring
    import shellper.core.terminal.screen as screen
    try:
        from shellper.daemon.screenfeed import ScreenModel
    except ImportError:
        from shellper.daemon.screen import ScreenModel  # type: ignore[import-not-found,no-redef]
    sys.path.pop(0)
    return screen, ring, ScreenModel


def workloads() -> dict[str, bytes]:
    log = b"".join(b"\x1b[3%dmINFO\x1b[0m line %d of a build log, with some words in it\r\n" % (i % 8, i)
                   for i in range(1000))
    frame = b"".join(b"\x1b[H\x1b[2J" + b"".join(b"\x1b[%d;1H\x1b[3%dm%s\x1b[0m" % (r + 1, (r + f) % 8, b"#" * 78)
                                                  for r in range(24)) for f in range(50))
    row = b"\x1b[%d;1H\x1b[38;5;%dm\x1b[48;2;1;2;%dm%s\x1b[K\x1b[0m"
    tui = b"".join(b"\x1b[?1049h\x1b[H" + b"".join(row % (r + 1, r, f % 256, (b"row%d frame%d " % (r, f) * 8)[:70])
                                                   for r in range(24)) for f in range(400))
    return {"plain flood": (b"x" * 99 + b"\n") * 20000, "coloured log": log * 20, "redraw flood": frame * 8,
            "tui frames": tui}


def direct(mods: tuple[ModuleType, ModuleType, Any], data: bytes) -> float:
    """Every byte emulated (no fast path)."""
    screen_module = mods[0]
    screen_module.FAST_FORWARD_MIN = 10**12  # type: ignore[attr-defined]
    screen = screen_module.Screen(80, 24)
    t0 = time.process_time()
    for at in range(0, len(data), FEED):
        screen.feed(data[at:at + FEED])
    screen_module.FAST_FORWARD_MIN = 32 * 1024  # type: ignore[attr-defined]
    return (time.process_time() - t0) * 1000 / (len(data) / MiB)


def through_model(mods: tuple[ModuleType, ModuleType, Any], data: bytes) -> float:
    """As the daemon feeds it: appended to an 8 MiB ring eight times over, caught up at the end."""
    _, ring_module, model_class = mods
    ring = ring_module.Scrollback(8 * MiB)
    model = model_class(ring, 8 * MiB, 80, 24)
    model.screen_now()
    t0 = time.process_time()
    for _ in range(8):
        for at in range(0, len(data), FEED):
            model.before_append(len(data[at:at + FEED]))
            ring.append(data[at:at + FEED])
    model.catch_up()
    return (time.process_time() - t0) * 1000 / (8 * len(data) / MiB)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    trees = {"old": load(args.old), "new": load(args.new)}
    data = workloads()
    cases = [(f"{name}, every byte emulated", direct, data[name]) for name in data]
    cases += [(f"{name} through ScreenModel", through_model, data[name]) for name in ("plain flood", "coloured log")]
    print("| workload | old best / median | new best / median |\n|---|---|---|")
    for name, run, payload in cases:
        times: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(args.rounds):
            for which, mods in trees.items():
                times[which].append(run(mods, payload))
        cells = [f"{min(v):.1f} / {sorted(v)[len(v) // 2]:.1f}" for v in times.values()]
        print(f"| {name} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
