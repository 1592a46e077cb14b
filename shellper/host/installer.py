"""The installer that runs on another host to put this shellper there (shellper.host.selfinstall sends it).

That host has no shellper yet, so this imports the standard library alone, and is run from its source by
the host's own python3. It reads the package files' archive that follows it on stdin, checks its SHA-256
against the one it was given before it unpacks a byte, and builds ``BASE/VERSION``: a venv without pip
whose site-packages hold the archive, with ``bin/shellper`` and ``bin/tower-client`` scripts. It builds in
a temporary directory beside it, checks that the copy imports and says its version, and only then renames
it into place: two first uses at once each build their own, one rename wins and the other's copy goes.
It prints one line, ``ok PATH`` or ``error WHY`` (a RuntimeError's words, or the system's: no shellper error
class can be had there).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import venv
from pathlib import Path

STALE = 3600.0
"""Seconds after which a temporary directory an interrupted install left is removed by the next one."""

SCRIPTS = (("shellper", "shellper.cli.entry", "entry"), ("tower-client", "tower_client.cli", "main"))
"""The console scripts, as pyproject.toml's [project.scripts] names them."""

CHECK = ("import msgpack, shellper; assert msgpack.unpackb(msgpack.packb([1, 'x'])) == [1, 'x']; "
         "print(shellper.__version__)")
"""What the copy must do before it is used: import (msgpack's pure-Python fallback too) and say its version."""


def main(version: str, digest: str, size: int, base: str = "~/.local/share/shellper") -> int:
    """Install ``version`` from the ``size`` bytes on stdin (a gzipped tar whose SHA-256 is ``digest``)."""
    try:
        data = sys.stdin.buffer.read(size)
        print(f"ok {install(version, digest, data, Path(base).expanduser())}")
        return 0
    except (RuntimeError, OSError, subprocess.SubprocessError, tarfile.TarError) as exc:
        print(f"error {exc}".replace("\n", " "))
        return 1


def install(version: str, digest: str, data: bytes, base: Path) -> Path:
    """``base/version`` built from ``data`` unless a usable one is there; its path."""
    got = hashlib.sha256(data).hexdigest()
    if got != digest:
        raise RuntimeError(f"the copy arrived damaged ({len(data)} bytes, sha256 {got[:16]}, sent {digest[:16]})")
    base.mkdir(parents=True, exist_ok=True)
    final = base / version
    if usable(final):
        return final
    sweep(base)
    tmp = Path(tempfile.mkdtemp(prefix=".install-", dir=base))
    try:
        build(tmp, final, data, version)
        place(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def usable(path: Path) -> bool:
    """A finished install: its interpreter still there (a venv's python is a link to the host's) and its script."""
    return os.path.exists(path / "bin" / "python") and (path / "bin" / "shellper").is_file()


def sweep(base: Path) -> None:
    """Remove what installs interrupted long ago left (a temporary or a replaced directory)."""
    now = time.time()
    for entry in base.glob(".*-*"):
        if entry.name.startswith((".install-", ".old-")):
            with contextlib.suppress(OSError):
                if now - entry.lstat().st_mtime > STALE:
                    shutil.rmtree(entry)


def build(tmp: Path, final: Path, data: bytes, version: str) -> None:
    """A venv in ``tmp`` holding the archive, its scripts pointing at ``final``; checked to run."""
    venv.EnvBuilder(symlinks=True, with_pip=False).create(tmp)
    sites = list(tmp.glob("lib/python3*/site-packages"))
    if len(sites) != 1:
        raise RuntimeError(f"the venv made in {tmp} has {len(sites)} site-packages directories")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            if not (member.isfile() or member.isdir()) or member.name.startswith("/") or ".." in member.name.split("/"):
                raise RuntimeError(f"the archive holds {member.name!r}, which is not a package file")
        if hasattr(tarfile, "data_filter"):
            tar.extractall(sites[0], filter="data")
        else:  # before 3.11.4: the members were checked above
            tar.extractall(sites[0])
    for name, module, function in SCRIPTS:
        script = tmp / "bin" / name
        script.write_text(f"#!{final}/bin/python\nimport sys\nfrom {module} import {function}\n"
                          f"sys.exit({function}())\n")
        script.chmod(0o755)
    done = subprocess.run([str(tmp / "bin" / "python"), "-I", "-c", CHECK], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)
    said = done.stdout.strip()
    if done.returncode != 0 or said != version:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise RuntimeError(f"the copy does not run there ({said or why})")


def place(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final``: at once, whole, or not at all. Another install's finished copy is kept;
    an unusable one (its python gone) is moved aside and replaced."""
    for _attempt in range(3):
        try:
            os.rename(tmp, final)
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        if usable(final):
            return
        aside = Path(tempfile.mkdtemp(prefix=".old-", dir=final.parent))
        with contextlib.suppress(FileNotFoundError):
            os.rename(final, aside)  # onto an empty directory: allowed, and atomic
        shutil.rmtree(aside, ignore_errors=True)
    raise RuntimeError(f"{final} is there, unusable, and could not be replaced")
