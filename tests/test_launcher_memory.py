"""What a session forked by the warm launcher copies of the launcher's pages: nothing the launcher could have
done once for all of them (bench/NOTES.md, "A warm session's copied pages"; bench.cowmap finds the rest)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_WARMED = """
import sys
from shellper.daemon import launcher

served = launcher.Launcher(sys.argv[1], "test", "test")
served.watch_code()  # the order launcher_main keeps
assert served.claim()
launcher.warm_up()
served.listen()
served.close()
loaded = set(sys.modules)
import ctypes

classes = len(ctypes._CFuncPtr.__subclasses__())
from shellper.host.identity import boot_id
from shellper.host.reaper import get_child_subreaper

boot_id()
get_child_subreaper()
print(sorted(m for m in ("threading", "random", "subprocess", "tempfile") if m in loaded))
print(sorted(set(sys.modules) - loaded))
print(len(ctypes._CFuncPtr.__subclasses__()) - classes)
"""


def test_a_warm_launcher_leaves_its_sessions_no_fork_hooks_nor_first_reads(tmp_path: Path) -> None:
    """threading and random (which subprocess and tempfile import) reinitialise themselves in every forked
    child, copying their pages, twice per session (its intermediate and its daemon): a launcher warmed up and
    listening has not imported them. And what every session reads the same is read (and cached) already:
    reading the boot id imports the ascii codec, which ran the import system in each session; and the libc
    handle prctl(2) goes through is made (each ctypes.CDLL makes a class of its own)."""
    directory = tmp_path / "run"
    directory.mkdir(mode=0o700)
    done = subprocess.run([sys.executable, "-P", "-c", _WARMED, str(directory)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "[]", "0"]
