"""Reaching another host over OpenSSH: the ssh command, one shared connection per host, the remote version.

shellper opens no port of its own: a remote session is reached by running ``shellper`` (or ``shellper
bridge NAME``, or ``tower-client``) on that host over ssh, as dtach, abduco and tmux are used. Everything
the user's ssh configuration says (keys, agents, jump hosts) applies, since the ``ssh`` command runs as
configured; ``$SHELLPER_SSH`` replaces the command itself (``ssh -F FILE``, as git's ``GIT_SSH_COMMAND``).

One connection per host is shared by every operation and session on it: a ControlMaster with a private
ControlPath (in :func:`control_dir`), started once and kept ``CONTROL_PERSIST`` seconds after its last
use, so fifty sessions on a host cost one handshake.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

from shellper import __version__
from shellper.core.errors import ShellperError
from shellper.core.names import BadHost, validate_host

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable

SSH_ENV = "SHELLPER_SSH"
"""The ssh command, split as a shell would (default ``ssh``)."""
REMOTE_ENV = "SHELLPER_REMOTE"
"""The ``shellper`` command on the remote hosts, a shell word or more (default: this version's copy under the
remote user's home, which the first use installs: shellper.host.selfinstall)."""
REMOTE_TOWER_ENV = "SHELLPER_REMOTE_TOWER"
"""The ``tower-client`` command on the remote hosts (default: beside $SHELLPER_REMOTE's, else ``tower-client``;
beside the installed copy's without $SHELLPER_REMOTE)."""
CONTROL_DIR_ENV = "SHELLPER_SSH_CONTROL_DIR"
"""Where the shared connections' sockets are (default $XDG_RUNTIME_DIR/shellper-ssh, else /tmp/shellper-ssh-UID)."""
CONTROL_ENV = "SHELLPER_SSH_CONTROL"
"""``none``: shellper starts no ControlMaster of its own (the user's ssh configuration decides)."""

CONTROL_PERSIST = 600
"""Seconds a shared connection stays up after its last session or command has ended."""
CONNECT_TIMEOUT = 10.0
"""Seconds to set up a host's connection (ssh's ConnectTimeout, and the whole start of the master)."""
SSH_UNREACHABLE = 255
"""ssh's own exit status for a connection that failed (any other status is the remote command's)."""
SHELL_NOT_FOUND = 127
INSTALL_TIMEOUT = 120.0
"""Seconds to install shellper on a host (the files sent, a venv made, the copy checked)."""
CONNECTION_LOST = 75
"""The exit status of ``attach`` or ``tail -f`` on a host whose ssh connection was lost (EX_TEMPFAIL: try
again; the session runs on there)."""


class SshError(ShellperError):
    """A failure to reach or use a remote host; ``host`` names it."""

    def __init__(self, host: str, message: str) -> None:
        self.host = host
        super().__init__(f"host {host}: {message}")


class HostUnreachable(SshError):
    """ssh could not connect (exit 255), or the host did not answer in time."""


DISTRIBUTION = "shellper-pty"
"""shellper's name on the package index (pyproject.toml): "shellper" there is another author's project."""


def install_hint(version: str) -> str:
    """How to install this version of shellper on a host, by the name that is ours on the package index."""
    return f"`pip install {DISTRIBUTION}=={version}`"


class RemoteNotInstalled(SshError):
    """The remote shell found no ``shellper`` command."""


class InstallFailed(RemoteNotInstalled):
    """shellper could not be installed on the host (it has no usable Python, or the copy failed)."""


class VersionMismatch(SshError):
    """The remote shellper is another version than this one."""

    def __init__(self, host: str, remote: str, local: str) -> None:
        self.remote, self.local = remote, local
        super().__init__(host, f"runs shellper {remote}, this is shellper {local}: install the same version "
                         f"there ({install_hint(local)}), or point ${REMOTE_ENV} at one")


def check_host(host: str) -> str:
    """``host`` if shellper.core.names.validate_host accepts it, else SshError: every command line given to
    ssh goes through here, whatever checked the host before."""
    try:
        return validate_host(host)
    except BadHost as exc:
        raise SshError(str(host)[:80], f"is not an ssh destination shellper uses ({exc.reason}; user@host, an "
                       "alias of ~/.ssh/config, ssh://user@host:port)") from None


def ssh_command() -> list[str]:
    """The ssh command and its own options, from $SHELLPER_SSH (default ``ssh``)."""
    words = shlex.split(os.environ.get(SSH_ENV) or "ssh")
    return words or ["ssh"]


def control_dir() -> str:
    """The private directory of the shared connections' sockets: this user's, mode 0700, made if missing.
    Kept short: a Unix socket's path is at most 107 bytes and ssh adds 40 for the host's hash and 17 more
    while it binds."""
    path = os.environ.get(CONTROL_DIR_ENV)
    if not path:
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        base = runtime if runtime and os.path.isdir(runtime) else "/tmp"
        path = os.path.join(base, "shellper-ssh" if base == runtime else f"shellper-ssh-{os.getuid()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise SshError("-", f"{path} must be a directory of yours with mode 0700 (it holds ssh control sockets)")
    return path


def _shared() -> bool:
    return (os.environ.get(CONTROL_ENV) or "").lower() != "none"


def control_options() -> list[str]:
    """The options that route a command through the host's shared connection (none when disabled).
    ControlMaster=no: the master is started by :func:`ensure_master` alone; a command that finds none (it
    died) connects on its own instead of becoming a master nobody manages."""
    if not _shared():
        return []
    return ["-o", f"ControlPath={control_dir()}/%C", "-o", "ControlMaster=no"]


def ssh_argv(host: str, remote: str, *, tty: bool = False, batch: bool = True) -> list[str]:
    """The command line that runs the remote shell command ``remote`` on ``host`` over its shared
    connection: ``tty`` asks for a terminal (attach), ``batch`` refuses password prompts (a Tower's
    commands: nobody is there to type)."""
    options = ["-t" if tty else "-T", *control_options(), "-o", f"ConnectTimeout={int(CONNECT_TIMEOUT)}"]
    if batch:
        options += ["-o", "BatchMode=yes"]
    return [*ssh_command(), *options, "--", check_host(host), remote]


def _remote_command() -> str:
    """$SHELLPER_REMOTE, else the path of this version's installed copy (shellper.host.selfinstall)."""
    from shellper.host.selfinstall import command

    return os.environ.get(REMOTE_ENV) or command(__version__)


def remote_shellper(args: list[str]) -> str:
    """The remote shell command running ``shellper ARGS`` (:func:`_remote_command`, each argument quoted)."""
    return " ".join([_remote_command(), *map(shlex.quote, args)])


def remote_tower(args: list[str]) -> str:
    """The remote shell command running ``tower-client ARGS``."""
    command = os.environ.get(REMOTE_TOWER_ENV)
    if not command:
        shellper = _remote_command()
        head, sep, last = shellper.rpartition("/")
        command = f"{head}{sep}tower-client" if sep and last == "shellper" else "tower-client"
    return " ".join([command, *map(shlex.quote, args)])


def ensure_master(host: str, timeout: float = CONNECT_TIMEOUT) -> int | None:
    """Start ``host``'s shared connection unless it runs (one start at a time per host, hosts at once: a
    lock per host in the control directory); its pid (None when sharing is off). HostUnreachable with
    ssh's own words when it cannot connect."""
    check_host(host)
    if not _shared():
        return None
    directory = control_dir()
    base = [*ssh_command(), "-o", f"ControlPath={directory}/%C"]
    lock = os.open(os.path.join(directory, f"lock-{_key(host)}"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        pid = _master_pid(base, host)
        if pid is not None:
            return pid
        # -f -N: ssh authenticates, then goes to the background as the master. ControlMaster=auto, not yes:
        # auto removes the socket a killed master left (yes would refuse to bind over it). Its stderr is a
        # file, not a pipe: the master keeps it open for its whole life, and a pipe would never end.
        with tempfile.TemporaryFile() as err:
            try:
                done = subprocess.run(
                    [*base, "-f", "-N", "-o", "ControlMaster=auto", "-o", f"ControlPersist={CONTROL_PERSIST}",
                     "-o", f"ConnectTimeout={int(timeout)}", "-o", "BatchMode=yes", "--", host],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, timeout=timeout + 5)
            except subprocess.TimeoutExpired:
                raise HostUnreachable(host, f"no connection within {timeout:g} s") from None
            if done.returncode != 0:
                err.seek(0)
                raise HostUnreachable(host, _last_line(err.read()) or f"ssh exited {done.returncode}")
        return _master_pid(base, host)
    finally:
        os.close(lock)


def _master_pid(base: list[str], host: str) -> int | None:
    done = subprocess.run([*base, "-O", "check", "--", host], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=CONNECT_TIMEOUT)
    text = done.stderr + done.stdout
    if done.returncode != 0 or "pid=" not in text:
        return None
    return int(text.split("pid=", 1)[1].split(")", 1)[0])


def master_pid(host: str) -> int | None:
    """The pid of ``host``'s shared connection, or None if none runs."""
    return _master_pid([*ssh_command(), "-o", f"ControlPath={control_dir()}/%C"], check_host(host))


def stop_master(host: str) -> None:
    """End ``host``'s shared connection (its sessions' bridges end with it; the sessions do not)."""
    subprocess.run([*ssh_command(), "-o", f"ControlPath={control_dir()}/%C", "-O", "exit", "--", check_host(host)],
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=CONNECT_TIMEOUT)


def run_remote(host: str, remote: str, *, input: bytes | None = None, timeout: float = 30.0,
               ensure: bool = True) -> subprocess.CompletedProcess[bytes]:
    """Run the remote shell command ``remote`` on ``host`` and collect its output; HostUnreachable when ssh
    could not connect or the host did not answer within ``timeout``. ``ensure``: start the host's shared
    connection first if it does not run (False: the caller just did)."""
    if ensure:
        ensure_master(host, min(timeout, CONNECT_TIMEOUT))
    try:
        done = subprocess.run(ssh_argv(host, remote), input=input, capture_output=True, timeout=timeout,
                              stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise HostUnreachable(host, f"no answer within {timeout:g} s") from None
    if done.returncode == SSH_UNREACHABLE:
        raise HostUnreachable(host, _last_line(done.stderr) or "ssh could not connect")
    return done


_checked: dict[str, str] = {}
"""Hosts whose shellper was found to be this version, in this process (checked once per host)."""


def check_version(host: str, timeout: float = CONNECT_TIMEOUT, say: Callable[[str], object] | None = None) -> str:
    """Start ``host``'s shared connection if need be, and check that its shellper is this version, once per
    connection: VersionMismatch otherwise, RemoteNotInstalled when the remote shell finds no shellper,
    HostUnreachable when ssh cannot connect. Without $SHELLPER_REMOTE, a host that has no copy of this
    version gets one first (:func:`install`; ``say`` is told so, for a person waiting). A version found good
    is noted in the control directory with the connection's pid, so the commands that share a connection do
    not each ask again (a remote upgraded meanwhile is checked when the connection is next made, at most
    CONTROL_PERSIST s after its last use)."""
    if host in _checked:
        return _checked[host]
    pid = ensure_master(host, timeout)
    note = _version_note(host)
    if pid is not None and note is not None:
        with contextlib.suppress(OSError):
            if Path(note).read_text() == f"{pid} {__version__}":
                _checked[host] = __version__
                return __version__
    done = run_remote(host, remote_shellper(["--version"]), timeout=timeout, ensure=False)
    text = done.stdout.decode(errors="replace").strip()
    if not os.environ.get(REMOTE_ENV) and (done.returncode != 0 or text != f"shellper {__version__}"):
        install(host, timeout, say)
        done = run_remote(host, remote_shellper(["--version"]), timeout=timeout, ensure=False)
        text = done.stdout.decode(errors="replace").strip()
    if done.returncode == SHELL_NOT_FOUND or (done.returncode != 0 and not text):
        why = _last_line(done.stderr) or f"exit {done.returncode}"
        if not os.environ.get(REMOTE_ENV):  # installed just now, and still does not run
            raise InstallFailed(host, f"the shellper installed in {_remote_command()} does not run ({why}): remove "
                                f"it to install it again, or point ${REMOTE_ENV} at one")
        raise RemoteNotInstalled(host, f"no shellper there ({why}): {install_hint(__version__)} on it, or point "
                                 f"${REMOTE_ENV} at one (unset, shellper installs itself there)")
    words = text.split()
    remote = words[1] if len(words) >= 2 and words[0] == "shellper" else text
    if remote != __version__:
        raise VersionMismatch(host, remote, __version__)
    _checked[host] = remote
    if pid is not None and note is not None:
        with contextlib.suppress(OSError):
            Path(note).write_text(f"{pid} {remote}")
    return remote


def install(host: str, timeout: float = CONNECT_TIMEOUT, say: Callable[[str], object] | None = None) -> str:
    """Install this version on ``host`` over its connection, from this installation's own files
    (shellper.host.selfinstall); the remote path. InstallFailed when the host has no Python 3.11 or newer,
    or the copy fails; a copy that is there already (another first use's) is kept."""
    from shellper.host import selfinstall

    probe = run_remote(host, "sh -s", input=selfinstall.PROBE, timeout=timeout, ensure=False)
    try:
        python = selfinstall.found_python(probe.stdout)
    except selfinstall.NoPython as exc:
        raise InstallFailed(host, f"{exc}: install one, or point ${REMOTE_ENV} at a shellper {__version__}") from None
    where = selfinstall.install_dir(__version__)
    if say is not None:
        say(f"installing shellper {__version__} on {host} in {where} (with {python})")
    files = selfinstall.payload()
    source = selfinstall.installer_input(__version__, hashlib.sha256(files).hexdigest(), len(files))
    done = run_remote(host, selfinstall.installer_command(python, len(source)), input=source + files,
                      timeout=max(timeout, INSTALL_TIMEOUT), ensure=False)
    said = _last_line(done.stdout)
    if done.returncode != 0 or not said.startswith("ok "):
        why = said.removeprefix("error ") if said else _last_line(done.stderr) or f"exit {done.returncode}"
        raise InstallFailed(host, f"could not install shellper {__version__} in {where}: {why}")
    return said[3:]


def _version_note(host: str) -> str | None:
    """Where the version found on ``host``'s current connection is noted (None: no sharing, no note).
    The note is keyed by what the remote command runs, too: another $SHELLPER_REMOTE is asked again."""
    if not _shared():
        return None
    return os.path.join(control_dir(), f"version-{_key(host, os.environ.get(REMOTE_ENV, ''))}")


def _key(*parts: str) -> str:
    """A file name's part for a host (and what else it depends on, the ssh command always among it)."""
    text = "\0".join([*parts, os.environ.get(SSH_ENV, "")])
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:24]


def _last_line(data: bytes) -> str:
    lines = [line.strip() for line in data.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""
