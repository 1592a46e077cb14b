"""What installs this shellper on a host that has none: the probe for its Python, the package files and the
installer sent over the host's ssh connection (shellper.host.ssh runs them; shellper.host.installer runs there).

No package index is asked: the files are this installation's own (shellper, tower_client, and msgpack's
pure-Python modules, which need no compiler there), in a gzipped tar whose SHA-256 the installer checks
before it unpacks. The copy goes under the remote user's home, one directory per version, and is found
there again by its path, not the PATH of a non-interactive login (which seldom has ``~/.local/bin``).
"""

from __future__ import annotations

import os
import re
import shlex

from shellper.core.errors import ShellperError

INSTALL_BASE = "~/.local/share/shellper"
"""Where the copies go on a remote host, one directory per version (the remote shell expands ``~``)."""

MIN_PYTHON = (3, 11)

PROBE = b"""\
found=
for py in python3 python3.14 python3.13 python3.12 python3.11; do
  path=$(command -v "$py" 2>/dev/null) || continue
  version=$("$path" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || continue
  case $version in
    3.1[1-9]|3.[2-9][0-9]) echo "python $path $version"; exit 0;;
  esac
  found="$found $py=$version"
done
echo "none$found"
"""
"""A POSIX sh script (run as ``sh -s``, whatever the login shell is): the first Python 3.11 or newer on the
PATH, or what it found instead."""

_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]*")
"""A version that can stand unquoted in a remote shell's command line (after ``~/``, which must stay bare)."""

_PACKAGES = (("shellper", False), ("tower_client", False), ("msgpack", True))
"""The top-level packages copied, and whether only their ``.py`` files go (msgpack: its C extension is built
for this machine's Python; the pure-Python fallback is used without it)."""


class NoPython(ShellperError):
    """The host has no Python new enough to run shellper; the message says what it has."""


def install_dir(version: str) -> str:
    """The remote directory of ``version`` (``~/...``: for the remote shell to expand)."""
    if not _VERSION.fullmatch(version):
        raise ShellperError(f"shellper {version!r}: not a version this can install by path")
    return f"{INSTALL_BASE}/{version}"


def command(version: str) -> str:
    """The remote shell command word that runs ``version``'s installed shellper."""
    return f"{install_dir(version)}/bin/shellper"


def found_python(probe_output: bytes) -> str:
    """The path of the Python the probe found, or NoPython saying what it found instead."""
    words = probe_output.decode(errors="replace").strip().splitlines()[-1:] or ["none"]
    line = words[0].split()
    if len(line) == 3 and line[0] == "python":
        return line[1]
    have = ", ".join(line[1:]) if line[:1] == ["none"] and len(line) > 1 else "no python3 on its PATH"
    wanted = ".".join(map(str, MIN_PYTHON))
    raise NoPython(f"no Python {wanted} or newer there to install shellper into ({have})")


def payload() -> bytes:
    """The package files as a gzipped tar, paths relative to site-packages."""
    import importlib.util
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as tar:
        for package, only_py in _PACKAGES:
            spec = importlib.util.find_spec(package)  # found, not imported: shellper never imports tower_client
            if spec is None or not spec.submodule_search_locations:
                raise ShellperError(f"cannot install shellper on another host: package {package} not found here")
            root = next(iter(spec.submodule_search_locations))
            for directory, subdirs, files in os.walk(root):
                subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
                for name in sorted(files):
                    if name.endswith((".pyc", ".so")) or (only_py and not name.endswith(".py")):
                        continue
                    path = os.path.join(directory, name)
                    info = tar.gettarinfo(path, os.path.join(package, os.path.relpath(path, root)))
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    info.mode = 0o644
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
    return buffer.getvalue()


def installer_input(version: str, digest: str, size: int) -> bytes:
    """The installer's source, ending in the call that installs ``version`` from the ``size`` bytes after it."""
    import importlib.util

    spec = importlib.util.find_spec("shellper.host.installer")  # its source, sent: nothing here runs it
    assert spec is not None and spec.origin is not None
    with open(spec.origin, "rb") as f:
        source = f.read()
    return source + f"\nsys.exit(main({version!r}, {digest!r}, {size}, {INSTALL_BASE!r}))\n".encode()


def installer_command(python: str, source_size: int) -> str:
    """The remote shell command that runs the installer: ``python`` reads its source from stdin, then the
    files. Free of ``$``, backslashes and quotes inside its quotes, so any login shell takes it as it is."""
    return f"{shlex.quote(python)} -I -c 'import sys; exec(sys.stdin.buffer.read({source_size}))'"
