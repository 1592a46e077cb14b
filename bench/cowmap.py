"""Which of the launcher's objects a warm session writes after its fork (issue 29's memory).

    python -m bench.cowmap [--idle S] [--top N]

Starts a warm launcher with bench.cowhook loaded (a test build), launches one ``cat`` session, has a tower
read its STATUS, lets it idle, then reads the session's pagemap: each private page (bit 56) in a mapping it
shares with the launcher is one it copied (or, rarely, the launcher wrote after the fork; this kernel has no
soft-dirty bits to tell them apart). A page
is put down to the objects on it whose bytes differ from the launcher's at the fork (the refcount, or the
body: a code object's warm-up counter and quickened bytecode, a dict's table); a page written back to what it
was (a call's incref and decref) to what lies on it. libpython's data pages go to its symbols (nm).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.launcher import config, launcher_pid, stop
from shellper.client.blocking import Client
from shellper.client.launch import launch
from shellper.client.warm import start_launcher
from shellper.host import warmstart

PAGE = 4096
ROOT = str(Path(__file__).resolve().parent.parent)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=float, default=1.0, help="seconds the session idles before it is read")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="spcow-", dir="/tmp")
    os.chmod(base, 0o700)
    directory, hook, out = (os.path.join(base, x) for x in ("d", "hook", "out"))
    for d in (directory, hook, out):
        os.mkdir(d, 0o700)
    Path(hook, "sitecustomize.py").write_text(
        f"import sys\nsys.path.insert(0, {ROOT!r})\nfrom bench.cowhook import install\ninstall({out!r})\n")
    old_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (hook, ROOT, old_path) if p)
    os.environ[warmstart.LAUNCHER_ENV] = "on"
    name = "cow"
    try:
        start_launcher(directory)
        launcher = launcher_pid(directory)
        info = launch(config(directory, name))
        with Client(Path(info.socket), "tower", client_name="bench") as tower:
            tower.connect(replay_bytes=0)
            tower.status()
        time.sleep(args.idle)
        dumper = stopped_child(launcher)
        snapshot = Snapshot(dumper)
        os.kill(dumper, signal.SIGCONT)
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(out, "done")) and time.monotonic() < deadline:
            time.sleep(0.1)
        report(info.pid, launcher, snapshot, Objects(out), args.top)
    finally:
        stop(directory, name)
        subprocess.run(["kill", str(launcher_pid(directory))], capture_output=True)
        os.environ[warmstart.LAUNCHER_ENV] = "off"
        shutil.rmtree(base, ignore_errors=True)
    return 0


def stopped_child(parent: int) -> int:
    """bench.cowhook's dumper: the launcher's child that stopped itself."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for task in os.listdir(f"/proc/{parent}/task"):
            for child in Path(f"/proc/{parent}/task/{task}/children").read_text().split():
                stat = Path(f"/proc/{child}/stat").read_text()
                if stat[stat.rindex(")") + 2] == "T":
                    return int(child)
        time.sleep(0.05)
    raise SystemExit("no dumper stopped (is bench.cowhook on the launcher's PYTHONPATH?)")


def report(pid: int, launcher: int, snapshot: Snapshot, objects: Objects, top: int) -> None:
    symbols = Symbols(pid)
    by_mapping: collections.Counter[str] = collections.Counter()
    changed: collections.Counter[str] = collections.Counter()  # pages, split among what changed on them
    touched: collections.Counter[str] = collections.Counter()  # pages written back, split among what is on them
    fields: collections.Counter[str] = collections.Counter()  # changed objects by label and field
    lib: collections.Counter[str] = collections.Counter()
    mem = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    pagemap = os.open(f"/proc/{pid}/pagemap", os.O_RDONLY)
    with open(f"/proc/{pid}/maps") as f:
        maps = f.read().splitlines()
    for line in maps:
        parts = line.split(maxsplit=5)
        if parts[1] != "rw-p":
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        path = parts[5] if len(parts) > 5 else ""
        kind = mapping_kind(path)
        flags = os.pread(pagemap, (end - start) // PAGE * 8, start // PAGE * 8)
        for i in range(0, len(flags), 8):
            entry = int.from_bytes(flags[i:i + 8], "little")
            present, exclusive = entry >> 63 & 1, entry >> 56 & 1
            if not (present and exclusive):
                continue
            page = start + i // 8 * PAGE
            before = snapshot.page(page)
            if before is None:
                by_mapping[f"{kind}: its own (not in the launcher at the fork)"] += 1
                continue
            by_mapping[f"{kind}: copied"] += 1
            now = os.pread(mem, PAGE, page)
            words = [page + o for o in range(0, PAGE, 8) if now[o:o + 8] != before[o:o + 8]]
            if kind == "libpython data":
                names = {symbols.name(w) for w in words} or {"(written back)"}
                for n in names:
                    lib[n] += 1 / len(names)
                continue
            hits: dict[str, float] = {}
            for w in words:
                found = objects.at(w)
                if found is None:
                    hits.setdefault("(no object of the launcher's: free or new)", 0)
                    continue
                label, field = found
                hits.setdefault(label, 0)
                fields[f"{label} / {field}"] += 1
            if hits:
                for label in hits:
                    changed[f"{kind}: {label}"] += 1 / len(hits)
            else:
                on = objects.on_page(page) or ["(no object of the launcher's)"]
                for label in set(on):
                    touched[f"{kind}: {label}"] += 1 / len(set(on))
    os.close(mem)
    os.close(pagemap)
    total = sum(by_mapping.values())
    print(f"session {pid} (launcher {launcher}): {total * 4} KiB private")
    for key, n in by_mapping.most_common():
        print(f"  {n * 4:7d} KiB  {key}")
    for title, counter in (("pages with changed bytes, by what changed (KiB)", changed),
                           ("pages written back to what they were, by what lies on them (KiB)", touched),
                           ("libpython data pages, by the symbols that changed (KiB)", lib)):
        print(f"{title}: {sum(counter.values()) * 4:.0f}")
        for key, n in counter.most_common(top):
            print(f"  {n * 4:7.1f}  {key}")
    print("changed words by object and field (the refcount is the first word)")
    for key, n in fields.most_common(top):
        print(f"  {n:7d}  {key}")
    for label, named in sorted(objects.named.items()):
        print(f"changed {label}: {len(named)}, {sum(named.values()) / 1024:.1f} KiB; the biggest:")
        for name, size in sorted(named.items(), key=lambda item: -item[1])[:top]:
            print(f"  {size:7d}  {name}")


def mapping_kind(path: str) -> str:
    if path == "[heap]":
        return "glibc heap"
    if "libpython" in path:
        return "libpython data"
    if path == "":
        return "anonymous (pymalloc arenas, big blocks)"
    return path if path.startswith("[") else f"data of {os.path.basename(path)}"


class Snapshot:
    """The launcher's writable memory as it forked: the stopped dumper's."""

    def __init__(self, pid: int) -> None:
        self.ranges: list[tuple[int, int, int]] = []
        chunks: list[bytes] = []
        offset = 0
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if parts[1] != "rw-p":
                    continue
                start, end = (int(x, 16) for x in parts[0].split("-"))
                try:
                    chunks.append(os.pread(fd, end - start, start))
                except OSError:
                    continue
                self.ranges.append((start, end, offset))
                offset += end - start
        os.close(fd)
        self.data = b"".join(chunks)

    def page(self, address: int) -> bytes | None:
        i = bisect.bisect_right(self.ranges, (address, sys.maxsize)) - 1
        if i < 0:
            return None
        start, end, offset = self.ranges[i]
        if not start <= address < end:
            return None
        return self.data[offset + address - start:offset + address - start + PAGE]


class Objects:
    """The launcher's objects by address."""

    def __init__(self, out: str) -> None:
        rows = []
        for line in Path(out, "objects.tsv").read_text().splitlines():
            start, size, head, label, name = line.split("\t")
            rows.append((int(start), int(size), int(head), label, name))
        rows.sort()
        self.starts = [r[0] for r in rows]
        self.rows = rows
        self.named: dict[str, dict[str, int]] = collections.defaultdict(dict)
        """The code objects and types found changed, by label: name -> size."""

    def at(self, address: int) -> tuple[str, str] | None:
        i = bisect.bisect_right(self.starts, address) - 1
        while i >= 0 and self.starts[i] > address - 4096:
            start, size, head, label, name = self.rows[i]
            if start <= address < start + size:
                offset = address - start
                if name:
                    self.named[label][name] = size
                if offset == head:
                    return label, "refcount"
                if offset < head:
                    return label, "gc links"
                return label, f"body +{offset - head}" if offset - head < 64 else "body"
            i -= 1
        return None

    def on_page(self, page: int) -> list[str]:
        i = bisect.bisect_left(self.starts, page)
        found = []
        while i < len(self.starts) and self.starts[i] < page + PAGE:
            found.append(self.rows[i][3])
            i += 1
        return found


class Symbols:
    """libpython's data symbols, at the addresses this process has them."""

    def __init__(self, pid: int) -> None:
        self.names: list[tuple[int, str]] = []
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) > 5 and "libpython" in parts[5] and int(parts[2], 16) == 0:
                    base, path = int(parts[0].split("-")[0], 16), parts[5].strip()
                    break
            else:
                return
        nm = subprocess.run(["nm", "-S", path], capture_output=True, text=True).stdout
        for row in nm.splitlines():
            bits = row.split()
            if len(bits) == 4 and bits[2] in "dDbB":
                self.names.append((base + int(bits[0], 16), bits[3]))
        self.names.sort()
        self.starts = [a for a, _ in self.names]

    def name(self, address: int) -> str:
        i = bisect.bisect_right(self.starts, address) - 1
        return self.names[i][1] if i >= 0 else "?"


if __name__ == "__main__":
    sys.exit(main())
