"""Runtime dir safety, session names and paths, no-follow file ops; and shellper.host.logfile.LogFile."""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from shellper.core.names import BadName, validate_name
from shellper.host import logfile, paths
from shellper.host.logfile import LogFile
from shellper.host.paths import (
    PathTooLong,
    SessionPaths,
    UnsafeDirError,
    ensure_runtime_dir,
    open_nofollow,
    runtime_dir,
    unlink_if_regular,
    unlink_if_socket,
)

REPO = Path(__file__).resolve().parent.parent
NOBODY = 65534


# --- runtime_dir ----------------------------------------------------------------------------------


FALLBACK = f"/tmp/shellper-{os.geteuid()}"


@pytest.mark.parametrize(
    ("explicit", "shellper_dir", "xdg", "expected"),
    [  # XDG: an existing directory ($XDG is replaced by it); /missing/run/user/7 names none
        ("/x/explicit", "/x/env", "$XDG", "/x/explicit"),
        (None, "/x/env", "$XDG", "/x/env"),
        (None, "", "$XDG", "$XDG/shellper"),
        (None, None, "$XDG", "$XDG/shellper"),
        (None, None, "", FALLBACK),
        (None, None, None, FALLBACK),
        ("", "/x/env", None, "/x/env"),
        (None, None, "/missing/run/user/7", FALLBACK),  # the XDG spec: fall back, do not create it
        (None, None, "$XDG/a-file", FALLBACK),
        (None, "/x/env", "/missing/run/user/7", "/x/env"),
    ],
)
def test_runtime_dir_precedence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], explicit: str | None,
    shellper_dir: str | None, xdg: str | None, expected: str,
) -> None:
    monkeypatch.setattr(paths, "_warned_xdg", False)
    (tmp_path / "a-file").touch()
    for var, value in (("SHELLPER_DIR", shellper_dir), ("XDG_RUNTIME_DIR", xdg)):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, value.replace("$XDG", str(tmp_path)))
    assert runtime_dir(explicit) == expected.replace("$XDG", str(tmp_path))  # a plain string: see shellper.host.paths
    warned = capsys.readouterr().err
    if expected == FALLBACK and xdg:
        assert warned == (f"shellper: warning: $XDG_RUNTIME_DIR ({xdg.replace('$XDG', str(tmp_path))}) is not a "
                          f"directory; using {FALLBACK}\n")
        assert runtime_dir(explicit) == expected and capsys.readouterr().err == ""  # once per process
    else:
        assert warned == ""
    assert not os.path.exists("/missing")


def test_runtime_dir_makes_relative_paths_absolute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert runtime_dir("rel") == str(tmp_path / "rel")


# --- ensure_runtime_dir ---------------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o277])
def test_ensure_creates_0700_with_parents_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    target = tmp_path / "a" / "b" / "run"
    old = os.umask(umask)
    try:
        got = ensure_runtime_dir(target)
    finally:
        os.umask(old)
    assert got == str(target)
    st = os.lstat(target)
    assert stat.S_ISDIR(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_uid == os.geteuid()


def test_ensure_accepts_existing_safe_dir(tmp_path: Path) -> None:
    target = tmp_path / "run"
    target.mkdir(mode=0o700)
    os.chmod(target, 0o700)
    assert ensure_runtime_dir(target) == str(target)
    assert ensure_runtime_dir(target) == str(target)  # idempotent


@pytest.mark.parametrize("mode", [0o755, 0o750, 0o710, 0o701, 0o720, 0o777])
def test_ensure_refuses_group_world_accessible_dir(tmp_path: Path, mode: int) -> None:
    target = tmp_path / "run"
    target.mkdir()
    os.chmod(target, mode)
    with pytest.raises(UnsafeDirError) as info:
        ensure_runtime_dir(target)
    assert info.value.path == str(target)
    assert f"group/world accessible (mode {mode:04o})" in str(info.value)
    assert f"chmod 700 {target}" in str(info.value)
    assert stat.S_IMODE(os.lstat(target).st_mode) == mode  # reported, never "fixed" behind our back


def test_ensure_refuses_symlinked_dir(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "run"
    link.symlink_to(real)
    with pytest.raises(UnsafeDirError, match="symlink"):
        ensure_runtime_dir(link)


def test_ensure_refuses_file_in_place_of_dir(tmp_path: Path) -> None:
    target = tmp_path / "run"
    target.write_text("x")
    with pytest.raises(UnsafeDirError, match="not a directory"):
        ensure_runtime_dir(target)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_ensure_refuses_dir_owned_by_someone_else(tmp_path: Path) -> None:
    target = tmp_path / "run"
    target.mkdir(mode=0o700)
    os.chown(target, NOBODY, NOBODY)
    with pytest.raises(UnsafeDirError, match=f"owned by uid {NOBODY}"):
        ensure_runtime_dir(target)


def test_ensure_refuses_dir_too_long_for_any_socket(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * (paths.SUN_PATH_MAX - len(str(tmp_path))))
    with pytest.raises(PathTooLong) as info:
        ensure_runtime_dir(deep)
    assert info.value.limit == paths.SUN_PATH_MAX - 1
    assert not deep.exists()  # checked before creating anything


# --- names and session paths ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("a", True),
        ("main", True),
        ("builder-12.v2_x", True),
        ("A" * 64, True),
        ("9lives", True),
        ("_private", True),
        ("", False),
        ("A" * 65, False),
        (".hidden", False),
        ("..", False),
        ("-rf", False),
        ("a/b", False),
        ("../etc", False),
        ("a b", False),
        ("a\nb", False),
        ("name\n", False),
        ("caf\u00e9", False),
        ("a\0b", False),
        ("a:b", False),
    ],
)
def test_validate_name(name: str, ok: bool) -> None:
    if ok:
        assert validate_name(name) == name
    else:
        with pytest.raises(BadName) as info:
            validate_name(name)
        assert info.value.name == name
        assert info.value.reason
        assert isinstance(info.value, ValueError)


def test_session_paths_for_name(tmp_path: Path) -> None:
    sp = SessionPaths.for_name(tmp_path, "main")
    assert (sp.dir, sp.name) == (str(tmp_path), "main")
    assert sp.socket == str(tmp_path / "main.sock")
    assert sp.record == str(tmp_path / "main.json")
    assert sp.lock == str(tmp_path / "main.lock")
    assert sp.log == str(tmp_path / "main.log")


def test_session_paths_rejects_bad_name_and_long_socket(tmp_path: Path) -> None:
    with pytest.raises(BadName):
        SessionPaths.for_name(tmp_path, "../x")
    base = Path("/" + "d" * 50)
    assert len(str(base / ("n" * 60 + ".sock"))) > paths.SUN_PATH_MAX - 1
    with pytest.raises(PathTooLong):
        SessionPaths.for_name(base, "n" * 60)
    SessionPaths.for_name(base, "short")  # the same dir is fine for a short name


def test_socket_path_limit_matches_the_kernel(tmp_path: Path) -> None:
    """The limit we enforce is exactly what bind() accepts: 107 bytes works, 108 does not."""
    base = str(tmp_path) + "/"
    fits = base + "s" * (paths.SUN_PATH_MAX - 1 - len(base))
    too_long = fits + "s"
    paths.check_socket_path(fits)
    with pytest.raises(PathTooLong):
        paths.check_socket_path(too_long)
    for path, should_bind in ((fits, True), (too_long, False)):
        s = socket.socket(socket.AF_UNIX)
        try:
            if should_bind:
                s.bind(path)
            else:
                with pytest.raises(OSError):
                    s.bind(path)
        finally:
            s.close()


# --- no-follow file operations --------------------------------------------------------------------


def _make_socket(path: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()


def test_unlink_if_socket(tmp_path: Path) -> None:
    sock = tmp_path / "s.sock"
    _make_socket(sock)
    regular = tmp_path / "f"
    regular.write_text("keep")
    link = tmp_path / "link.sock"
    target = tmp_path / "target.sock"
    _make_socket(target)
    link.symlink_to(target)

    assert unlink_if_socket(sock) is True
    assert not os.path.lexists(sock)
    assert unlink_if_socket(sock) is False  # missing
    assert unlink_if_socket(regular) is False
    assert regular.read_text() == "keep"
    assert unlink_if_socket(link) is False  # a symlink to a socket is not a socket
    assert os.path.islink(link)
    assert stat.S_ISSOCK(os.lstat(target).st_mode)


def test_unlink_if_regular(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    victim = tmp_path / "victim"
    victim.write_text("precious")
    link = tmp_path / "link"
    link.symlink_to(victim)
    d = tmp_path / "d"
    d.mkdir()

    assert unlink_if_regular(f) is True
    assert not f.exists()
    assert unlink_if_regular(f) is False
    assert unlink_if_regular(link) is False
    assert victim.read_text() == "precious"
    assert os.path.islink(link)
    assert unlink_if_regular(d) is False
    assert d.is_dir()


def test_open_nofollow_refuses_symlink_and_is_cloexec(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    link = tmp_path / "link"
    link.symlink_to(victim)
    with pytest.raises(OSError) as info:
        open_nofollow(link, os.O_WRONLY | os.O_TRUNC)
    assert info.value.errno == 40  # ELOOP
    assert victim.read_text() == "precious"
    fd = open_nofollow(tmp_path / "new", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        assert not os.get_inheritable(fd)
    finally:
        os.close(fd)


# --- LogFile ----------------------------------------------------------------------------------------

LINE_RE = re.compile(rb"^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\] ")


def test_log_line_format(tmp_path: Path) -> None:
    log = LogFile(tmp_path / "s.log")
    assert log.write("hello")
    assert log.write("two\nlines\n")
    log.close()
    data = (tmp_path / "s.log").read_bytes()
    lines = data.split(b"\n")
    assert LINE_RE.match(lines[0]) and lines[0].endswith(b"] hello")
    assert LINE_RE.match(lines[1]) and lines[1].endswith(b"] two")
    assert lines[2] == b"  lines"  # continuation lines never look like a new record
    assert lines[3] == b""
    assert stat.S_IMODE(os.stat(tmp_path / "s.log").st_mode) == 0o600


def test_log_rotates_at_cap(tmp_path: Path) -> None:
    path = tmp_path / "s.log"
    log = LogFile(path, max_bytes=1000, keep=1)
    for i in range(100):
        assert log.write(f"message {i:03d} " + "x" * 40)
    log.close()
    current, old = path.read_bytes(), path.with_name("s.log.1").read_bytes()
    assert 0 < len(current) <= 1000
    assert 900 < len(old) <= 1000
    assert not path.with_name("s.log.2").exists()
    assert b"message 099" in current  # newest line is in the current file
    assert b"message 000" not in current + old  # oldest was dropped by rotation
    for line in (old + current).splitlines():
        assert LINE_RE.match(line)


def test_log_keeps_n_generations(tmp_path: Path) -> None:
    path = tmp_path / "s.log"
    log = LogFile(path, max_bytes=300, keep=3)
    for i in range(60):
        log.write(f"m{i:02d} " + "y" * 50)
    log.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["s.log", "s.log.1", "s.log.2", "s.log.3"]
    assert b"m59" in path.read_bytes()
    assert all(len(p.read_bytes()) <= 300 for p in tmp_path.iterdir())


def test_log_keep_zero_truncates(tmp_path: Path) -> None:
    path = tmp_path / "s.log"
    log = LogFile(path, max_bytes=300, keep=0)
    for i in range(30):
        log.write(f"m{i:02d} " + "z" * 50)
    log.close()
    assert [p.name for p in tmp_path.iterdir()] == ["s.log"]
    assert 0 < len(path.read_bytes()) <= 300
    assert b"m29" in path.read_bytes()


def test_log_truncates_a_single_oversized_line(tmp_path: Path) -> None:
    path = tmp_path / "s.log"
    log = LogFile(path, max_bytes=500)
    log.write("q" * 5000)
    log.close()
    data = path.read_bytes()
    assert len(data) <= 500
    assert data.endswith(b"... [truncated]\n")


def test_log_never_raises_and_reports_dropped_lines(tmp_path: Path) -> None:
    d = tmp_path / "gone"
    d.mkdir()
    path = d / "s.log"
    log = LogFile(path)
    assert log.write("first")
    (path).unlink()
    d.rmdir()  # the directory vanished (someone cleaned /tmp): writes must fail quietly
    assert log.write("lost 1") in (True, False)  # the open fd may still accept it; no exception either way
    log.close()
    assert log.write("lost 2") is False
    assert log.write("lost 3") is False
    assert log.dropped >= 2
    d.mkdir()
    assert log.write("back")
    log.close()
    text = path.read_text()
    assert re.search(r"log: [23] line\(s\) dropped while the log was unwritable \(No such file", text)
    assert text.rstrip().endswith("] back")
    assert log.dropped == 0


def test_log_disk_full_does_not_raise() -> None:
    log = LogFile("/dev/full")
    assert log.write("nowhere to go") is False
    assert log.write("still nowhere") is False
    assert log.dropped == 2
    assert isinstance(log.last_error, OSError)
    log.close()


def test_log_refuses_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "s.log").symlink_to(victim)
    log = LogFile(tmp_path / "s.log")
    assert log.write("x") is False
    assert victim.read_text() == "precious"


def _run_py(code: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)


def test_redirect_stdio(tmp_path: Path) -> None:
    path = tmp_path / "s.log"
    path.write_text("existing\n")
    code = (
        "import os, sys\n"
        "from shellper.host.logfile import redirect_stdio\n"
        f"redirect_stdio({str(path)!r})\n"
        "print('to stdout', flush=True)\n"
        "sys.stderr.write('to stderr\\n'); sys.stderr.flush()\n"
        "os.write(2, b'raw fd 2\\n')\n"
        "assert sys.stdin.read() == ''\n"
        "assert os.path.realpath('/proc/self/fd/0') == '/dev/null'\n"
    )
    proc = _run_py(code)
    assert proc.returncode == 0, proc.stderr
    assert (proc.stdout, proc.stderr) == ("", "")
    assert path.read_text() == "existing\nto stdout\nto stderr\nraw fd 2\n"  # appended, not truncated


def test_capture_stdio_follows_rotation(tmp_path: Path) -> None:
    path = tmp_path / "s.log"
    code = (
        "import os\n"
        "from shellper.host.logfile import LogFile\n"
        f"log = LogFile({str(path)!r}, max_bytes=400, capture_stdio=True)\n"
        "for i in range(20):\n"
        "    log.write('line %d ' % i + 'w' * 40)\n"
        "os.write(2, b'stray traceback\\n')\n"
    )
    proc = _run_py(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert path.read_text().endswith("stray traceback\n")  # the *current* file, not the rotated one
    assert "stray" not in path.with_name("s.log.1").read_text()


def test_format_line_limit() -> None:
    line = logfile.format_line("a" * 100, limit=60)
    assert len(line) == 60 and line.endswith(b"[truncated]\n")


@pytest.mark.parametrize("name", ["s", "a.b-c_d", "run"])
def test_every_way_to_a_sessions_socket_names_one_file(tmp_path: Path, name: str) -> None:
    """attach's quick path and the CLI build the socket's path without shellper.host.paths; the Tower's
    client builds it with pathlib: all of them name the file the shellper binds."""
    from shellper.core.names import socket_path
    from tower_client.client import socket_path as client_socket_path

    bound = SessionPaths.for_name(tmp_path, name).socket
    assert socket_path(str(tmp_path), name) == bound
    assert str(client_socket_path(tmp_path, name)) == bound


def test_format_line_shows_controls_as_escapes() -> None:
    """A reason may quote a program's output or its command line: ``cat NAME.log`` shows it, never obeys it."""
    line = logfile.format_line("spawn failed: \x1b]52;c;aGk=\x07\u009b2J\rX\ncontinued\tthere")
    text = line.decode()
    assert text.endswith("spawn failed: \\x1b]52;c;aGk=\\x07\\x9b2J\\rX\n  continued\\tthere\n"), text
