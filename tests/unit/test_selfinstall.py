"""The pieces of a remote self-install that are text: the probe's answer, the command lines, the archive."""

from __future__ import annotations

import io
import tarfile

import pytest

from shellper.core.errors import ShellperError
from shellper.host import selfinstall


@pytest.mark.parametrize(("answer", "python"), [
    (b"python /usr/bin/python3 3.11\n", "/usr/bin/python3"),
    (b"noise from a login script\npython /opt/py/bin/python3.13 3.13\n", "/opt/py/bin/python3.13"),
])
def test_the_python_the_probe_found(answer: bytes, python: str) -> None:
    assert selfinstall.found_python(answer) == python


@pytest.mark.parametrize(("answer", "said"), [
    (b"none python3=3.9\n", "(python3=3.9)"),
    (b"none python3=3.8 python3.11=3.11x\n", "(python3=3.8, python3.11=3.11x)"),
    (b"none\n", "(no python3 on its PATH)"),
    (b"", "(no python3 on its PATH)"),
])
def test_no_python_says_what_there_is(answer: bytes, said: str) -> None:
    with pytest.raises(selfinstall.NoPython) as caught:
        selfinstall.found_python(answer)
    assert str(caught.value) == f"no Python 3.11 or newer there to install shellper into {said}"


def test_the_install_path_and_the_installer_line() -> None:
    assert selfinstall.command("1.2.3") == "~/.local/share/shellper/1.2.3/bin/shellper"
    for version in ("1 2", "$(x)", "../x", ""):
        with pytest.raises(ShellperError):
            selfinstall.install_dir(version)
    line = selfinstall.installer_command("/usr/bin/python3", 123)
    assert line == "/usr/bin/python3 -I -c 'import sys; exec(sys.stdin.buffer.read(123))'"
    assert selfinstall.installer_command("/a b/python3", 1).startswith("'/a b/python3' -I -c ")


def test_the_archive_holds_the_packages_sources_and_no_compiled_files() -> None:
    with tarfile.open(fileobj=io.BytesIO(selfinstall.payload()), mode="r:gz") as tar:
        names = tar.getnames()
    assert {"shellper/__init__.py", "shellper/host/installer.py", "tower_client/cli.py", "msgpack/fallback.py",
            "shellper/py.typed"} <= set(names)
    assert not [n for n in names if n.endswith((".so", ".pyc")) or "__pycache__" in n]
    assert all(n.split("/")[0] in ("shellper", "tower_client", "msgpack") for n in names)
