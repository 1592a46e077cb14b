"""A cgroup v2 per session: the kernel's own answer to "which processes are this session's".

A session's cgroup is a leaf directory under a parent the shellper may write (``--cgroup-parent``, else
detected), named so that anyone can tell whose it is without a record::

    PARENT/<dir key>.<owner key>.<session name>.<instance id>/
        shellper/   the shellper itself (so a session started inside another one leaves the outer cgroup)
        child/      the child, which joins before it execs: everything it ever forks is inside

A process cannot leave a cgroup by setsid, double fork or re-parenting, so ending a session's tree is
``cgroup.kill`` on ``child/`` (or on the leaf, once the shellper is dead) and waiting for ``populated 0``
in ``cgroup.events``, which the kernel signals with POLLPRI: no pid list, no race with pid reuse, and
nothing outside the cgroup can be hit. Kernels without ``cgroup.kill`` (before 5.14) get freeze, SIGKILL
through pidfds of verified members, thaw.

Only a cgroup whose name carries the expected keys, whose inode is the recorded one and whose ``shellper/``
holds no process is ever killed on the strength of a record (:func:`verify_dead_session`). Under a systemd
manager, only a delegated subtree is written to: the default parent is used only where no systemd manages
the hierarchy (see :func:`default_parent`).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import select
import signal
import time
from collections.abc import Collection

from shellper.core.errors import ShellperError
from shellper.core.structs import record
from shellper.host.identity import PidFd, ProcessGone

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from _thread import LockType

V2_MOUNTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")
"""Where a cgroup v2 hierarchy is looked for: the unified mount, or the v2 part of a hybrid one."""
DEFAULT_PARENT_NAME = "shellper"
SHELLPER_SUB = "shellper"
CHILD_SUB = "child"
KEY_HEX = 12
INSTANCE_HEX = 32
MAX_DIRECT_ROUNDS = 8
"""SIGKILL rounds for processes sitting in a leaf itself (no cgroup.kill spares a part of a leaf)."""
PARENT_ENV = "SHELLPER_CGROUP_PARENT"
PROOF_XATTR = "shellper.dir"
"""The attribute a shellper sets on the leaf it makes: ``trusted.`` + this on a leaf owned by root (only a
process with CAP_SYS_ADMIN can set a trusted attribute), ``user.`` + this on a leaf owned by a delegated
user (only that user, or root, can write the leaf's attributes). Its value is the real path of the runtime
directory, which must hash to the leaf's directory key: what proves a leaf is a shellper's (:func:`proof`)."""
MAX_PROOF_BYTES = 4096
"""A proof longer than this (PATH_MAX) is none (the kernel bounds any attribute at 64 KiB)."""


class CgroupError(ShellperError):
    """A cgroup could not be created, joined, killed or removed; ``path`` says which."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"cgroup {path}: {reason}")


# --------------------------------------------------------------------------------------------- where


def find_mount() -> str | None:
    """The cgroup v2 mount point, or None (a v1-only machine, or no /sys)."""
    for mount in V2_MOUNTS:
        # v1 hierarchies have cgroup.procs too, but only v2 has cgroup.controllers
        if os.path.isfile(os.path.join(mount, "cgroup.controllers")):
            return mount
    return None


def own_cgroup(pid: int | str = "self") -> str | None:
    """The v2 cgroup of ``pid`` relative to the hierarchy's root ("/..."), or None."""
    try:
        with open(f"/proc/{pid}/cgroup", "rb") as f:
            for line in f.read().decode("utf-8", "replace").splitlines():
                if line.startswith("0::"):
                    return line[3:]
    except OSError:
        return None
    return None


LAUNCHER_ORIGIN: list[str] = []
"""In a session the warm launcher forked, from a leaf of its own: the cgroup of the caller the launcher was
started by (shellper.host.launchercgroup), set in the fork. An uncontained session goes back there
(:func:`back_to_launcher_origin`); a contained one makes its own leaf from where it is, as a cold one does."""


_MOVING: list[tuple[LockType, list[str | None]]] = []
"""The move :func:`start_back_to_launcher_origin` started: a lock held until it is done, and its outcome."""


def start_back_to_launcher_origin() -> None:
    """Start :func:`back_to_launcher_origin` in a thread of its own, if :data:`LAUNCHER_ORIGIN` is set: the move
    waits for an RCU grace period (bench/NOTES.md, "A warm run's time, end to end"), which the session's set-up
    then overlaps. The next back_to_launcher_origin() waits for it and returns its outcome; nothing may fork
    before that (a child forked meanwhile would stay where it was born).

    The file is opened here and the thread only writes: this returns once the thread is in that write, which
    holds no GIL, so the wait runs while the set-up does (a thread with Python to run first would wait for the
    GIL until the set-up blocked, and start the grace period no sooner)."""
    if not LAUNCHER_ORIGIN or _MOVING:
        return
    import _thread  # not threading: the daemon never loads it (tests/test_start_up_imports.py)

    target = LAUNCHER_ORIGIN.pop()
    done = _thread.allocate_lock()
    done.acquire()
    outcome: list[str | None] = []
    _MOVING.append((done, outcome))
    try:
        fd = os.open(os.path.join(target, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
    except OSError as exc:
        outcome.append(_not_moved(target, exc))
        done.release()
        return
    writing = _thread.allocate_lock()
    writing.acquire()

    def move() -> None:
        try:
            writing.release()
            os.write(fd, b"0")
            outcome.append(None)
        except OSError as exc:
            outcome.append(_not_moved(target, exc))
        finally:
            os.close(fd)
            done.release()

    try:
        _thread.start_new_thread(move, ())
    except RuntimeError:  # no thread to be had (a limit): the move as before, here and now
        move()
    writing.acquire()


def _not_moved(target: str, exc: OSError) -> str:
    return f"could not move into its caller's cgroup {target}: {exc.strerror}"


def back_to_launcher_origin() -> str | None:
    """Move this process into :data:`LAUNCHER_ORIGIN`, if set: where a cold start of the same caller would run
    (or wait for the move :func:`start_back_to_launcher_origin` started). Why it could not (the session then
    stays in the launcher's cgroup), else None."""
    if _MOVING:
        done, outcome = _MOVING.pop()
        done.acquire()
        return outcome[0] if outcome else "could not move into its caller's cgroup: the move failed"
    return _move_to_origin()


def _move_to_origin() -> str | None:
    if not LAUNCHER_ORIGIN:
        return None
    target = LAUNCHER_ORIGIN.pop()
    try:
        _write(os.path.join(target, "cgroup.procs"), "0")
    except OSError as exc:
        return _not_moved(target, exc)
    return None


def systemd_manages_cgroups() -> bool:
    """A systemd manager owns the hierarchy: only delegated subtrees may be written (sd_booted's test)."""
    return os.path.isdir("/run/systemd/system")


def delegated_scope() -> str | None:
    """The caller's own cgroup, if a systemd manager delegated it (``systemd-run --scope -p Delegate=yes``
    marks it with a ``trusted.delegate`` or ``user.delegate`` attribute) and it is writable; else None."""
    mount, own = find_mount(), own_cgroup()
    if mount is None or own is None or own == "/":
        return None
    path = mount + own
    for attribute in ("trusted.delegate", "user.delegate"):
        with contextlib.suppress(OSError):
            if os.getxattr(path, attribute) == b"1" and os.access(os.path.join(path, "cgroup.procs"), os.W_OK):
                return path
    return None


def default_parent() -> str | None:
    """``$SHELLPER_CGROUP_PARENT``; under a systemd manager, the caller's own cgroup if it was delegated
    (:func:`delegated_scope`), never anything systemd manages; without one, ``MOUNT/shellper`` where the
    hierarchy is writable (root, or a delegated mount); else None: the session runs without a cgroup."""
    explicit = os.environ.get(PARENT_ENV)
    if explicit:
        return os.path.abspath(explicit)
    mount = find_mount()
    if mount is None:
        return None
    if systemd_manages_cgroups():
        return delegated_scope()
    parent = os.path.join(mount, DEFAULT_PARENT_NAME)
    if os.path.isdir(parent):
        return parent if os.access(os.path.join(parent, "cgroup.procs"), os.W_OK) else None
    return parent if os.access(mount, os.W_OK) else None


def scope_command(*, manages: bool, delegated: str | None, explicit_parent: bool, systemd_run: str | None,
                  manager_socket: bool, euid: int, unit: str) -> list[str] | None:
    """The command prefix that starts a shellper in a transient, delegated systemd scope, or None.

    Wanted only where a systemd manager owns the hierarchy, no parent was named and the caller's own cgroup
    is not already delegated; possible only with ``systemd-run`` and a reachable manager (the user's, or
    the system's for root). Pure: :func:`scope_prefix` gathers the facts."""
    if not manages or delegated is not None or explicit_parent or systemd_run is None or not manager_socket:
        return None
    user = ["--user"] if euid != 0 else []
    return [systemd_run, *user, "--scope", "--quiet", "--collect", "-p", "Delegate=yes", f"--unit={unit}", "--"]


def scope_prefix(name: str, explicit_parent: str | None) -> list[str] | None:
    """:func:`scope_command` for this machine and caller (a unit named after the session, made unique)."""
    if not systemd_manages_cgroups():
        return None
    import shutil  # only under systemd

    euid = os.geteuid()
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    socket = "/run/systemd/private" if euid == 0 else os.path.join(runtime, "systemd", "private")
    return scope_command(manages=True, delegated=delegated_scope(),
                         explicit_parent=bool(explicit_parent or os.environ.get(PARENT_ENV)),
                         systemd_run=shutil.which("systemd-run"), manager_socket=bool(runtime or euid == 0)
                         and os.path.exists(socket), euid=euid, unit=f"shellper-{name}-{os.urandom(4).hex()}.scope")


def _key(text: str) -> str:
    try:  # CPython's own SHA-256, as shellper.host.record does: hashlib would map libcrypto into every shellper
        from _sha256 import sha256  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - other Pythons
        from hashlib import sha256
    return str(sha256(text.encode("utf-8", "surrogateescape")).hexdigest())[:KEY_HEX]


def dir_key(runtime_dir: str) -> str:
    """Of the real path: a Tower that reaches the directory by another spelling (a symlinked /var/run) must
    find the same cgroups."""
    return _key(os.path.realpath(runtime_dir))


def owner_key(owner: str) -> str:
    return _key(owner)


@record(frozen=True)
class LeafName:
    """What a session cgroup's name says: whose runtime directory, whose owner, which session and instance."""

    dir_key: str
    owner_key: str
    name: str
    instance_id: str

    def __str__(self) -> str:
        return f"{self.dir_key}.{self.owner_key}.{self.name}.{self.instance_id}"

    @classmethod
    def of(cls, runtime_dir: str, owner: str, name: str, instance_id: str) -> LeafName:
        return cls(dir_key(runtime_dir), owner_key(owner), name, instance_id)

    @classmethod
    def parse(cls, text: str) -> LeafName | None:
        """The parts of a leaf's name, or None for anything else (the name itself may hold dots)."""
        head, sep, instance = text.rpartition(".")
        dkey, _, rest = head.partition(".")
        okey, _, name = rest.partition(".")
        hexdigits = set("0123456789abcdef")
        if (not sep or len(instance) != INSTANCE_HEX or len(dkey) != KEY_HEX or len(okey) != KEY_HEX
                or not name or not set(instance + dkey + okey) <= hexdigits):
            return None
        return cls(dkey, okey, name, instance)


# --------------------------------------------------------------------------------------------- files


def _read(path: str) -> str:
    with open(path, "rb") as f:
        return f.read().decode("ascii", "replace")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def events_populated(text: str) -> bool:
    """``populated`` from a cgroup.events text (1 while any process is in the cgroup or below)."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "populated":
            return value.strip() == "1"
    return False


def session_cgroup_of(relative: str) -> str | None:
    """The session cgroup (relative to the hierarchy's root) that ``relative`` is, or is inside; None."""
    parts = relative.strip("/").split("/") if relative.strip("/") else []
    for i, part in enumerate(parts):
        if LeafName.parse(part) is not None:
            return "/" + "/".join(parts[: i + 1])
    return None


def member_of(pid: int, relative: str) -> bool:
    """``pid`` is in the cgroup ``relative`` (to the hierarchy's root) or one below it."""
    path = own_cgroup(pid)
    return path is not None and (path == relative or path.startswith(relative.rstrip("/") + "/"))


class SessionCgroup:
    """One session's cgroup leaf (absolute path); see the module docstring for its layout."""

    def __init__(self, path: str, mount: str) -> None:
        self.path = path
        self.mount = mount

    @property
    def relative(self) -> str:
        """The leaf as /proc/PID/cgroup names it."""
        return "/" if self.path == self.mount else "/" + os.path.relpath(self.path, self.mount)

    def sub(self, which: str | None) -> str:
        return self.path if which is None else os.path.join(self.path, which)

    def inode(self) -> int:
        return os.stat(self.path).st_ino

    # ------------------------------------------------------------------ making and joining

    @classmethod
    def create(cls, parent: str, leaf: LeafName, runtime_dir: str) -> SessionCgroup:
        """Make PARENT/leaf with its shellper/ and child/ cgroups (the parent too, if missing), and mark it as a
        shellper's with ``runtime_dir`` (:data:`PROOF_XATTR`)."""
        mount = find_mount()
        if mount is None:
            raise CgroupError(parent, "no cgroup v2 hierarchy is mounted")
        real_parent = os.path.realpath(parent)
        if real_parent != mount and not real_parent.startswith(mount + "/"):
            raise CgroupError(parent, f"is not inside the cgroup v2 hierarchy at {mount}")
        inside = session_cgroup_of(real_parent[len(mount):] or "/")
        if inside is not None:
            raise CgroupError(parent, f"is inside the cgroup of another session ({inside}): ending that session "
                              "would end this one")
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(real_parent, 0o755)
            if not os.path.isfile(os.path.join(real_parent, "cgroup.procs")):
                raise CgroupError(parent, "is not a cgroup")
            path = os.path.join(real_parent, str(leaf))
            os.mkdir(path, 0o755)
        except OSError as e:
            raise CgroupError(parent, f"cannot create a session cgroup: {e.strerror}") from e
        group = cls(path, mount)
        # Without the proof (a kernel whose cgroupfs lacks user.* attributes, before 5.7) the session is still
        # contained and ended through its record; only if its record is lost is its cgroup left for a human.
        with contextlib.suppress(OSError):
            _set_proof(path, runtime_dir)
        try:
            os.mkdir(group.sub(SHELLPER_SUB), 0o755)
            os.mkdir(group.sub(CHILD_SUB), 0o755)
        except OSError as e:
            group.remove()
            raise CgroupError(path, f"cannot create its sub-cgroups: {e.strerror}") from e
        return group

    def join(self, which: str, pid: int = 0) -> None:
        """Move ``pid`` (0: the caller) into the sub-cgroup ``which``."""
        target = os.path.join(self.sub(which), "cgroup.procs")
        try:
            _write(target, str(pid))
        except OSError as e:
            raise CgroupError(target, f"cannot move process {pid or os.getpid()} in: {e.strerror}") from e

    def open_procs(self, which: str) -> int:
        """An O_WRONLY fd on ``which``/cgroup.procs (CLOEXEC): the child writes "0" to it before exec."""
        target = os.path.join(self.sub(which), "cgroup.procs")
        try:
            return os.open(target, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as e:
            raise CgroupError(target, f"cannot open: {e.strerror}") from e

    # ------------------------------------------------------------------ looking

    def events_path(self, which: str | None = None) -> str:
        return os.path.join(self.sub(which), "cgroup.events")

    def populated(self, which: str | None = None) -> bool:
        """Any process in it (or below); False once the cgroup is gone."""
        try:
            return events_populated(_read(self.events_path(which)))
        except FileNotFoundError:
            return False

    def bare(self) -> bool:
        """The leaf is this user's and holds nothing: no process and no cgroup below it. A shellper killed
        between making its leaf and setting the proof (:meth:`create`) leaves exactly this; removing it
        (:meth:`remove`: an ``rmdir``, which the kernel refuses once anything is inside) signals nobody, so it
        needs no proof."""
        try:
            if os.stat(self.path, follow_symlinks=False).st_uid != os.geteuid():
                return False
            with os.scandir(self.path) as entries:
                if any(entry.is_dir(follow_symlinks=False) for entry in entries):
                    return False
        except OSError:
            return False
        return not self.populated()

    def procs(self, which: str | None = None, *, spare: str | None = None) -> list[int]:
        """Pids directly in ``which`` and every cgroup below it but ``spare``'s (a snapshot: verify before use)."""
        out: list[int] = []
        top = self.sub(which)
        for root, dirs, _files in os.walk(top):
            if spare is not None and root == top and spare in dirs:
                dirs.remove(spare)
            with contextlib.suppress(FileNotFoundError):
                out += [int(t) for t in _read(os.path.join(root, "cgroup.procs")).split()]
        return out

    def direct_procs(self) -> list[int]:
        """Pids in the leaf itself, in none of its sub-cgroups (only a process that moved itself is there)."""
        try:
            return [int(t) for t in _read(os.path.join(self.path, "cgroup.procs")).split()]
        except FileNotFoundError:
            return []

    def parts(self) -> list[str]:
        """The names of the leaf's sub-cgroups: shellper/ and child/, and any a process inside made."""
        try:
            return sorted(e.name for e in os.scandir(self.path) if e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return []

    def pinned_members(self, which: str | None = None, *, spare: str | None = None,
                       direct: bool = False) -> list[PidFd]:
        """Pidfds of the processes in ``which`` (but ``spare``'s part; with ``direct``, only those in the leaf
        itself), each verified to be a member after it was pinned."""
        relative = self.relative if which is None else self.relative.rstrip("/") + "/" + which
        excluded = relative.rstrip("/") + "/" + spare if spare is not None else None
        pinned: list[PidFd] = []
        for pid in self.direct_procs() if direct else self.procs(which, spare=spare):
            try:
                fd = PidFd.open(pid)
            except ProcessGone:
                continue
            try:
                where = own_cgroup(pid)
                ok = (member_of(pid, relative) and fd.is_unreaped() and (not direct or where == relative)
                      and (excluded is None or not member_of(pid, excluded)))
            except OSError:
                ok = False
            if ok:
                pinned.append(fd)
            else:
                fd.close()
        return pinned

    def signal_members(self, sig: int, which: str | None = None, *, spare: str | None = None) -> int:
        """Send ``sig`` to every verified member (but ``spare``'s part); how many were signalled."""
        sent = 0
        for fd in self.pinned_members(which, spare=spare):
            with fd, contextlib.suppress(ProcessGone, PermissionError):
                fd.send_signal(sig)
                sent += 1
        return sent

    # ------------------------------------------------------------------ ending

    def kill(self, which: str | None = None) -> None:
        """SIGKILL everything in ``which`` (None: the whole leaf), atomically where the kernel can."""
        target = self.sub(which)
        try:
            _write(os.path.join(target, "cgroup.kill"), "1")
            return
        except FileNotFoundError:
            if not os.path.isdir(target):
                return
        except OSError as e:
            raise CgroupError(target, f"cgroup.kill failed: {e.strerror}") from e
        # Before Linux 5.14: a frozen process cannot fork, so signal the members and thaw.
        freeze = os.path.join(target, "cgroup.freeze")
        try:
            _write(freeze, "1")
            self.signal_members(signal.SIGKILL, which)
        finally:
            with contextlib.suppress(OSError):
                _write(freeze, "0")

    def wait_empty(self, timeout: float, which: str | None = None) -> bool:
        """Block until nothing is left in ``which`` (POLLPRI on cgroup.events, no timed loop) or ``timeout``."""
        deadline = time.monotonic() + max(0.0, timeout)
        try:
            fd = os.open(self.events_path(which), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return True
        try:
            poller = select.poll()
            poller.register(fd, select.POLLPRI | select.POLLERR)
            while events_populated(os.pread(fd, 4096, 0).decode("ascii", "replace")):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                poller.poll(max(1, math.ceil(left * 1000)))
            return True
        finally:
            os.close(fd)

    def wait_empty_outside(self, spare: str, timeout: float) -> bool:
        """:meth:`wait_empty` for everything in the leaf but ``spare``'s part, up to ``timeout``."""
        deadline = time.monotonic() + max(0.0, timeout)
        for part in self.parts():
            if part != spare and not self.wait_empty(deadline - time.monotonic(), part):
                return False
        direct = self.pinned_members(direct=True)
        try:
            if not all(fd.wait_dead(max(0.0, deadline - time.monotonic())) for fd in direct):
                return False
        finally:
            for fd in direct:
                fd.close()
        return not self.direct_procs()  # an exited process leaves its cgroup's list at once, zombie or not

    def kill_outside(self, spare: str, timeout: float) -> bool:
        """SIGKILL everything in the leaf but ``spare``'s part (cgroup.kill of every other sub-cgroup, pidfd
        SIGKILL of what sits in the leaf itself, in rounds: it may fork meanwhile) and wait up to ``timeout``
        for it to go; True if it did."""
        deadline = time.monotonic() + max(0.0, timeout)
        for _ in range(MAX_DIRECT_ROUNDS):
            for part in self.parts():
                if part != spare:
                    self.kill(part)
            for fd in self.pinned_members(direct=True):
                with fd, contextlib.suppress(ProcessGone, PermissionError):
                    fd.send_signal(signal.SIGKILL)
            if self.wait_empty_outside(spare, deadline - time.monotonic()):
                return True
            if time.monotonic() >= deadline:
                return False
        return False

    def remove(self) -> bool:
        """rmdir every cgroup of the leaf, deepest first (child/, shellper/ and any a process inside made),
        and the leaf; False if one is still populated (EBUSY), so the leaf stays."""
        if not os.path.isdir(self.path):
            return True
        ok = True
        for root, _dirs, _files in os.walk(self.path, topdown=False):
            try:
                os.rmdir(root)
            except FileNotFoundError:
                continue
            except OSError as e:
                if e.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                    raise CgroupError(root, f"cannot remove: {e.strerror}") from e
                ok = False
        return ok and not os.path.isdir(self.path)

    def leave(self) -> None:
        """Move the caller out of the leaf so it can be removed: to the leaf's parent, else the hierarchy's
        root; never back into another session's cgroup it may have come from (that one may be ending)."""
        for target in (os.path.dirname(self.path), self.mount):
            try:
                _write(os.path.join(target, "cgroup.procs"), "0")
                return
            except OSError as e:
                failure = e
        raise CgroupError(self.path, f"cannot move out of it: {failure.strerror}")


# --------------------------------------------------------------------------------------------- proof


def _proof_attribute(st: os.stat_result) -> str:
    return ("trusted." if st.st_uid == 0 else "user.") + PROOF_XATTR


def _set_proof(path: str, runtime_dir: str) -> None:
    """Mark a leaf just made (by this process, so owned by its euid) as a shellper's; OSError if it cannot."""
    os.setxattr(path, _proof_attribute(os.stat(path)), os.fsencode(os.path.realpath(runtime_dir)))


def proof(path: str) -> tuple[str | None, str]:
    """The runtime directory a leaf's proof names, if the leaf is verifiably a shellper's: (directory, "") or
    (None, why not). The proof is the attribute :func:`_set_proof` set, in the namespace only the leaf's
    maker could write (``trusted.`` for a leaf owned by root, ``user.`` for one owned by this process's
    user; another user's leaf is never ours), naming a directory whose key is the one in the leaf's name.
    A hand-made cgroup named like a session's has none: both keys in a name are hashes of public strings."""
    leaf = LeafName.parse(os.path.basename(path))
    if leaf is None:
        return None, f"{path} is not named like a session cgroup"
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError as e:
        return None, f"{path}: {e.strerror}"
    if st.st_uid not in (0, os.geteuid()):
        return None, f"{path} belongs to uid {st.st_uid}"
    attribute = _proof_attribute(st)
    try:
        value = os.getxattr(path, attribute, follow_symlinks=False)
    except OSError as e:
        why = "none" if e.errno == errno.ENODATA else e.strerror
        return None, f"{path} carries no shellper proof ({attribute}: {why}): not made by a shellper"
    if len(value) > MAX_PROOF_BYTES:
        return None, f"{path}: its {attribute} is too long to be a shellper's"
    directory = os.fsdecode(value)
    if _key(directory) != leaf.dir_key:
        return None, f"{path}: its {attribute} names {directory!r}, whose key is not the one in its name"
    return directory, ""


# --------------------------------------------------------------------------------------------- records


def verify_cgroup(path: str | None, inode: int | None, runtime_dir: str, name: str,
                  instance_id: str, owner: str | None = None) -> tuple[SessionCgroup | None, str]:
    """The cgroup a record names, if it is verifiably that session's: (cgroup, "") or (None, why not; "gone").

    It must sit in the v2 hierarchy, carry this runtime directory's key, the session's name and instance
    in its name, and still be the recorded directory (inode): a copied record or a recreated name is not.
    """
    if path is None:
        return None, "the record names no cgroup"
    mount = find_mount()
    if mount is None or os.path.normpath(path) != path or not path.startswith(mount + "/"):
        return None, f"{path} is not in the cgroup v2 hierarchy"
    leaf = LeafName.parse(os.path.basename(path))
    if leaf is None or leaf.dir_key != dir_key(runtime_dir) or leaf.name != name or leaf.instance_id != instance_id:
        return None, f"{path} is not the cgroup of session {name!r} of {runtime_dir}"
    if owner is not None and leaf.owner_key != owner_key(owner):
        return None, f"{path} is not a cgroup of owner {owner!r}"
    group = SessionCgroup(path, mount)
    try:
        found = group.inode()
    except FileNotFoundError:
        return None, "gone"
    except OSError as e:
        return None, f"{path}: {e.strerror}"
    if inode is not None and found != inode:
        return None, f"{path} is not the recorded cgroup (inode {found}, recorded {inode})"
    return group, ""


def verify_dead_session(path: str | None, inode: int | None, runtime_dir: str, name: str,
                        instance_id: str, owner: str | None = None) -> tuple[SessionCgroup | None, str]:
    """:func:`verify_cgroup`, and no live shellper in ``shellper/``: what may be killed as a dead session's
    leftovers (a live, if unreachable, shellper is ended only by :func:`shellper.host.cleanup.terminate_shellper`)."""
    group, why = verify_cgroup(path, inode, runtime_dir, name, instance_id, owner)
    if group is None:
        return None, why
    if group.populated(SHELLPER_SUB):
        return None, f"a process is still in {group.sub(SHELLPER_SUB)}: the shellper lives"
    return group, ""


@record(frozen=True)
class OrphanCgroup:
    """A session cgroup of a runtime directory that no record names; ``shellper_alive``: its shellper/ is
    populated (a live shellper whose files are gone, or a stranger that moved in), so it is reported, never
    killed; ``unproven``: why it is not verifiably a shellper's (:func:`proof`; "" if it is), so it is
    reported, never signalled; ``bare``: unproven, but :meth:`SessionCgroup.bare`, so it may be removed."""

    path: str
    leaf: LeafName
    populated: bool
    shellper_alive: bool
    unproven: str = ""
    bare: bool = False


def _leaves(parent: str) -> list[tuple[str, LeafName]]:
    """Every cgroup under ``parent`` named like a session's leaf: (its path, its parsed name); none if the
    parent cannot be listed."""
    try:
        entries = sorted(os.listdir(parent))
    except OSError:
        return []
    return [(os.path.join(parent, entry), leaf) for entry in entries if (leaf := LeafName.parse(entry)) is not None]


def find_session_cgroups(parent: str, runtime_dir: str, skip: Collection[str] = ()) -> list[OrphanCgroup]:
    """Every session cgroup under ``parent`` that carries ``runtime_dir``'s key (records not consulted), but
    those at a path in ``skip`` (a caller's known ones: their proof and state are not read)."""
    key = dir_key(runtime_dir)
    mount = find_mount()
    out: list[OrphanCgroup] = []
    if mount is None:
        return out
    for path, leaf in _leaves(parent):
        if leaf.dir_key != key:
            continue
        group = SessionCgroup(path, mount)
        if group.path in skip:
            continue
        _, unproven = proof(group.path)
        out.append(OrphanCgroup(group.path, leaf, group.populated(), group.populated(SHELLPER_SUB), unproven,
                                bool(unproven) and group.bare()))
    return out


def _gone(path: str) -> bool:
    """Nothing is at ``path`` (ENOENT, ENOTDIR); a path we may not look at is not gone."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return False


@record(frozen=True)
class LeakedLeaf:
    """A session cgroup of this owner, verifiably a shellper's, whose runtime directory (``directory``, from
    its proof) no longer exists: discovery goes by directory, so nothing else would ever look at it again."""

    path: str
    directory: str
    populated: bool


def find_leaked_leaves(parent: str, owner: str) -> list[LeakedLeaf]:
    """Every session cgroup under ``parent`` whose name carries ``owner``'s key, whose :func:`proof` holds,
    and whose runtime directory is gone (a shellper killed, then its directory removed)."""
    mount = find_mount()
    out: list[LeakedLeaf] = []
    if mount is None:
        return out
    key = owner_key(owner)
    for path, leaf in _leaves(parent):
        if leaf.owner_key != key:
            continue
        directory, _ = proof(path)
        if directory is None or not _gone(directory):
            continue
        out.append(LeakedLeaf(path, directory, SessionCgroup(path, mount).populated()))
    return out
