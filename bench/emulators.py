"""Terminal emulators compared for the shellper's screen model: correctness against tmux, throughput, memory.

    python -m bench.emulators --lib NAME   one emulator (run by the interpreter that has it), JSON out
    python -m bench.emulators --compare    tmux as the reference, then each --python PY:LIB given

NAME: shellper (shellper.core.terminal.screen), pyte, parterm (par-term-emu-core-rust, Python 3.12+), evp
(libghostty-vt, Python 3.13+). hl-vt100 cannot be fed bytes (it runs its own child on a PTY), so it is
not measured. Each case's bytes go to the emulator at 80x24; the screen's text and cursor are compared
with what tmux shows for the same bytes written raw to its pane. The figures are in bench/NOTES.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

COLS, ROWS = 80, 24


def _lines(n: int, width: int = 40, prefix: str = "line") -> bytes:
    return b"".join(f"{prefix} {i} ".encode().ljust(width, b".") + b"\r\n" for i in range(n))


CASES: dict[str, bytes] = {
    "status header, then a flood in a scroll region": b"\x1b[H\x1b[2J\x1b[7mSTATUS drawn once\x1b[0m\x1b[2;24r"
    + b"\x1b[24;1H" + _lines(3000),
    "main text, vim-like alternate screen with scrolls, quit": _lines(30, prefix="shell")
    + b"\x1b[?1049h\x1b[H\x1b[2J\x1b[1;23r" + b"".join(b"\x1b[23;1H\n\x1b[23;1Hedit %d" % i for i in range(500))
    + b"\x1b[r\x1b[?1049l$ ",
    "alternate screen toggled many times": _lines(10, prefix="before")
    + b"".join(b"\x1b[?1049h\x1b[H\x1b[2Jalt %d\x1b[?1049l" % i for i in range(200)) + b"after",
    "47 and 1047": b"main\r\n\x1b[?47hALT47\x1b[?47l\r\nback\x1b[?1047hALT1047\x1b[?1047l\x1b[?47h",
    "DECSTBM, RI, IL, DL": _lines(24) + b"\x1b[5;10r\x1b[5;1H\x1bM\x1bMrev\x1b[7;1H\x1b[2LIL\x1b[9;1H\x1b[3MDL\x1b[r",
    "origin mode": b"\x1b[2J\x1b[5;15r\x1b[?6h\x1b[1;1Htop of region\x1b[20;5Hclamped\x1b[?6l\x1b[1;1Hhome\x1b[r",
    "DEC line drawing, G1 with SO/SI": b"\x1b(0lqqqk\r\nx   x\r\nmqqqj\x1b(B ascii\r\n\x1b)0\x0elqk\x0f ok",
    "wide and combining characters": "日本語 wide\r\ne\u0301 combining\r\n".encode() + b"x" * 79
    + "界 wraps".encode() + b"\r\n" + "😀 emoji".encode(),
    "SGR colours": b"\x1b[1;31mred\x1b[0m \x1b[38;5;200mX\x1b[48;2;1;2;3mY\x1b[0m \x1b[4:3mcurly\x1b[m plain",
    "insert and delete characters": b"abcdefghij\x1b[1;3H\x1b[2@XY\x1b[1;8H\x1b[2P\x1b[2;1H0123456789\x1b[2;3H\x1b[3X"
    + b"\x1b[3;1Hinsert\x1b[3;1H\x1b[4h>>\x1b[4l",
    "autowrap and pending wrap": b"x" * 80 + b"\rA\r\n" + b"y" * 80 + b"\r\n" + b"\x1b[?7l" + b"z" * 100 + b"\x1b[?7h",
    "tabs": b"a\tb\tc\r\n\x1b[3g\x1b[1;20H\x1bH\r\tT",
    "seq flood (crlf)": b"".join(b"%d\r\n" % i for i in range(200000)),
    "bench flood (99 x + lf, raw)": (b"x" * 99 + b"\n") * 50000 + b"\n#END#\n",
    "lines of exactly 80 + lf, raw": (b"y" * 80 + b"\n") * 3000 + b"z",
    "a pending wrap across line feeds": b"x" * 80 + b"\n\nY",
    "save and restore cursor": b"\x1b[5;5Hsave\x1b7\x1b[31m\x1b[10;10Hmoved\x1b8after",
    "erase display and line": _lines(24) + b"\x1b[12;10H\x1b[1J\x1b[15;5H\x1b[K\x1b[20;1H\x1b[0J",
}

THROUGHPUT: dict[str, bytes] = {
    "seq": CASES["seq flood (crlf)"],
    "cat source": b"",  # filled from the package's own source, crlf
    "alt-screen flood": b"\x1b[?1049h" + b"".join(
        b"\x1b[H" + b"".join(b"\x1b[%d;1H\x1b[3%dm%s\x1b[0m" % (r + 1, r % 8, (b"row%d frame%d " % (r, f) * 8)[:80])
                        for r in range(24)) for f in range(1500)) + b"\x1b[?1049l",
}


def _source_bytes() -> bytes:
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shellper")
    out = bytearray()
    for dirpath, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            if f.endswith(".py"):
                with open(os.path.join(dirpath, f), "rb") as fh:
                    out += fh.read().replace(b"\n", b"\r\n")
    return bytes(out * 4)


class Emulator:
    def __init__(self, lib: str, scrollback: bool = True) -> None:
        self.lib = lib
        if lib == "shellper":
            from shellper.core.terminal.screen import Screen
            self.t: Any = Screen(COLS, ROWS)
            self.feed = self.t.feed
        elif lib == "pyte":
            import pyte
            self.t = pyte.Screen(COLS, ROWS)
            self.stream = pyte.ByteStream(self.t)
            self.feed = self.stream.feed
        elif lib == "parterm":
            import par_term_emu_core_rust as p
            self.t = p.Terminal(COLS, ROWS, scrollback=1000)
            self.feed = self.t.process
        elif lib == "evp":
            import evp
            # Its plain formatter writes the scrollback too: the screen alone needs none.
            self.t = evp.Terminal(COLS, ROWS, max_scrollback_bytes=200_000 if scrollback else 0)
            self.feed = self.t.feed
        else:
            raise SystemExit(f"unknown emulator {lib}")

    def screen(self) -> tuple[list[str], list[int]]:
        if self.lib == "shellper":
            return self.t.lines(), [self.t.cursor.x, self.t.cursor.y]
        if self.lib == "pyte":
            return [line.rstrip() for line in self.t.display], [self.t.cursor.x, self.t.cursor.y]
        if self.lib == "parterm":
            text = self.t.content()
            x, y = self.t.cursor_position()
            return [line.rstrip() for line in text.split("\n")][:ROWS], [x, y]
        import evp
        text = evp.Formatter(self.t, format=evp.FormatterFormat.PLAIN).format()
        x, y, _ = evp.RenderState(self.t).frame().cursor
        return [line.rstrip() for line in text.split("\n")][:ROWS], [x, y]


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1])
    return 0


def run_lib(lib: str) -> dict[str, Any]:
    out: dict[str, Any] = {"lib": lib, "python": sys.version.split()[0], "cases": {}, "mib_s": {}}
    for name, data in CASES.items():
        emu = Emulator(lib, scrollback=False)
        try:
            for i in range(0, len(data), 4096):
                emu.feed(data[i:i + 4096])
            out["cases"][name] = emu.screen()
        except Exception as exc:  # an emulator that fails a case is reported, not fatal
            out["cases"][name] = [[f"error: {exc!r}"], [-1, -1]]
    THROUGHPUT["cat source"] = _source_bytes()
    for name, data in THROUGHPUT.items():
        emu = Emulator(lib)
        if lib == "pyte":
            data = data[:400_000]  # pyte would take minutes on the rest
        for chunk in (65536,):
            t0 = time.perf_counter()
            for i in range(0, len(data), chunk):
                emu.feed(data[i:i + chunk])
            out["mib_s"][name] = round(len(data) / (time.perf_counter() - t0) / 2**20, 2)
    base = _rss_kib()
    keep = []
    for _ in range(50):
        emu = Emulator(lib)
        emu.feed(_lines(1100, width=78))  # a full screen and a full scrollback
        keep.append(emu)
    out["kib_per_session"] = round((_rss_kib() - base) / 50)
    return out


def tmux_reference() -> dict[str, Any]:
    """Each case written raw into a tmux pane of 80x24: its text and cursor."""
    out: dict[str, Any] = {}
    sock = f"emu-bench-{os.getpid()}"
    # A session that stays: the server would exit with its last session, racing the next new-session.
    subprocess.run(["tmux", "-L", sock, "-f", "/dev/null", "new-session", "-d", "-s", "keep", "sleep 600"], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, data) in enumerate(CASES.items()):
            path = os.path.join(tmp, f"case{i}")
            with open(path, "wb") as f:
                f.write(data)
            cmd = f"stty raw -echo; cat {path}; tmux -L {sock} wait-for -S case{i}; sleep 600"
            subprocess.run(["tmux", "-L", sock, "-f", "/dev/null", "new-session", "-d", "-s", f"c{i}", "-x",
                            str(COLS), "-y", str(ROWS), cmd], check=True)
            subprocess.run(["tmux", "-L", sock, "wait-for", f"case{i}"], check=True, timeout=120)
            text = subprocess.run(["tmux", "-L", sock, "capture-pane", "-p", "-t", f"c{i}"], check=True,
                                  capture_output=True, text=True).stdout
            cursor = subprocess.run(["tmux", "-L", sock, "display", "-p", "-t", f"c{i}", "#{cursor_x} #{cursor_y}"],
                                    check=True, capture_output=True, text=True).stdout.split()
            out[name] = [[line.rstrip() for line in text.split("\n")][:ROWS], [int(c) for c in cursor]]
            subprocess.run(["tmux", "-L", sock, "kill-session", "-t", f"c{i}"], check=False)
    subprocess.run(["tmux", "-L", sock, "kill-server"], check=False, capture_output=True)
    return out


def compare(pythons: list[str]) -> None:
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is the reference: install it")
    ref = tmux_reference()
    results = []
    for spec in pythons:
        py, lib = spec.rsplit(":", 1)
        env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        done = subprocess.run([py, "-m", "bench.emulators", "--lib", lib], capture_output=True, text=True, env=env,
                              cwd=env["PYTHONPATH"], check=False)
        if done.returncode:
            print(f"{lib}: failed: {done.stderr[-500:]}")
            continue
        results.append(json.loads(done.stdout))
    print("| case | " + " | ".join(r["lib"] for r in results) + " |")
    print("|---|" + "---|" * len(results))
    for name, (lines, cursor) in ref.items():
        row = []
        for r in results:
            got_lines, got_cursor = r["cases"][name]
            got_lines = (got_lines + [""] * ROWS)[:ROWS]
            want = (lines + [""] * ROWS)[:ROWS]
            bad = sum(a != b for a, b in zip(got_lines, want, strict=True))
            mark = "ok" if not bad else f"{bad} rows differ"
            if got_cursor != [-1, -1] and got_cursor != cursor:
                mark += f", cursor {got_cursor} not {cursor}"
            row.append(mark)
        print(f"| {name} | " + " | ".join(row) + " |")
    for r in results:
        print(f"{r['lib']} (Python {r['python']}): MiB/s {r['mib_s']}, KiB per session {r['kib_per_session']}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.emulators")
    parser.add_argument("--lib")
    parser.add_argument("--compare", action="store_true")
    parser.add_argument("--python", action="append", default=[], help="INTERPRETER:LIB, repeatable")
    args = parser.parse_args()
    if args.lib:
        json.dump(run_lib(args.lib), sys.stdout)
    elif args.compare:
        compare(args.python or [f"{sys.executable}:shellper"])


if __name__ == "__main__":
    main()
