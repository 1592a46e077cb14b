"""Stopping a session from outside it: STOP over its socket, then making sure it is gone.

:func:`stop_session` is ``shellper stop`` below the CLI (``run --replace`` uses it too): STOP to the shellper
that answers (pinned by a pidfd before asking), a shellper that does not answer ended with signals, a dead
one's leftovers ended and its files removed, and in every case the proof that it is gone. What it cannot do
it raises as :class:`StopFailed`, saying what is left and what to do.

:func:`terminate_recorded` ends the shellper a record names, STOP first (only to the recorded instance, from
the recorded pid) and signals where STOP cannot be delivered: :func:`shellper.host.cleanup.terminate_shellper`
with the socket spoken here, which that layer leaves to its callers. ``shellper stop`` uses it for a live
shellper whose lock file was removed, and tower_client's apply for every session it terminates.
"""

from __future__ import annotations

import contextlib
import os
import time
from enum import StrEnum

from shellper.client.blocking import Client, ClientError, peer_pid
from shellper.core.defaults import DEFAULT_GRACE, KILL_SECONDS
from shellper.core.errors import ShellperError
from shellper.core.names import socket_path
from shellper.core.states import SessionState
from shellper.core.structs import record
from shellper.host.cleanup import CONFIRM_TIMEOUT, StopNotDelivered, Termination, terminate_shellper
from shellper.host.paths import PathError, SessionPaths, file_kind, session_files
from shellper.host.record import LockError, SessionLock
from shellper.protocol import wire
from shellper.protocol.connection import InstanceMismatch, PeerMismatch

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable

    from shellper.host.identity import PidFd
    from shellper.host.record import SessionRecord


# --------------------------------------------------------------------------------------------- STOP, delivered


def send_stop(path: str, grace: float, check: Callable[[Client, wire.Welcome], None], *, client_name: str,
              timeout: float = 5.0) -> Client:
    """Connect to ``path`` as the tower, let ``check`` refuse the shellper that answered (by raising), and
    send STOP with ``grace``. Returns the connection, open: the caller closes it once the shellper is gone.

    StopNotDelivered when nothing answers or the connection fails; what ``check`` raises is passed on.
    Either way nothing is left open.
    """
    try:
        client = Client(path, wire.Role.TOWER, client_name=client_name, timeout=timeout)
        welcome = client.connect(replay_bytes=0)  # closes the socket again if it fails
    except ClientError as exc:
        raise StopNotDelivered(str(exc)) from exc
    try:
        check(client, welcome)
        try:
            client.send(wire.Stop(grace=grace))
        except ClientError as exc:
            raise StopNotDelivered(str(exc)) from exc
    except BaseException:
        client.close()
        raise
    return client


def check_recorded(client: Client, welcome: wire.Welcome, record: SessionRecord) -> None:
    """InstanceMismatch or PeerMismatch unless the shellper that answered is the one ``record`` names: its
    instance id in WELCOME, its pid both in WELCOME and at the other end of the socket."""
    if welcome.instance_id != record.instance_id:
        raise InstanceMismatch(client.path, record.instance_id, welcome.instance_id)
    seen = peer_pid(client.sock) if client.sock is not None else None
    if seen != record.shellper_pid or welcome.shellper_pid != record.shellper_pid:
        raise PeerMismatch(client.path, record.shellper_pid, seen)


def terminate_recorded(record: SessionRecord, paths: SessionPaths, *, grace: float, client_name: str,
                       connect_timeout: float = 5.0, stop_timeout: float | None = None,
                       confirm_timeout: float = CONFIRM_TIMEOUT,
                       check: Callable[[Client, wire.Welcome], None] | None = None) -> Termination:
    """End the shellper ``record`` names and its whole tree (:func:`shellper.host.cleanup.terminate_shellper`),
    asking it to STOP first if its socket answers as that shellper (:func:`check_recorded`, after ``check``);
    InstanceMismatch, PeerMismatch, or what ``check`` raises, with nothing signalled, if it answers as another."""

    def ask_stop() -> Client:
        def recorded(client: Client, welcome: wire.Welcome) -> None:
            if check is not None:
                check(client, welcome)
            check_recorded(client, welcome, record)

        return send_stop(paths.socket, grace, recorded, client_name=client_name, timeout=connect_timeout)

    return terminate_shellper(record, paths, grace=grace, ask_stop=ask_stop, stop_timeout=stop_timeout,
                              confirm_timeout=confirm_timeout)


# --------------------------------------------------------------------------------------------- stop_session


class StopFailed(ShellperError):
    """The session could not be stopped, or not wholly: the message says what is left and what to do."""


class Unreachable(ShellperError):
    """The session's socket could not be connected to, and nothing says the session is stopping: ``error``
    says why (the caller knows how to word it for its user)."""

    def __init__(self, error: ClientError) -> None:
        super().__init__(str(error))
        self.error = error


class StopWay(StrEnum):
    """How :func:`stop_session` stopped a session."""

    ASKED = "asked"
    """It took STOP, ended its tree and removed its files."""
    ASKED_NAME_TAKEN = "asked, name taken"
    """As ASKED, and a new session of the same name has started since (its files are there)."""
    SILENT = "silent"
    """Its shellper did not answer (stopped, blocked in the kernel, hung): ended with signals."""
    LOCK_MISSING = "lock missing"
    """Its shellper lived without its lock file (a tmp cleaner): ended as a Tower ends one."""
    ALREADY_GONE = "already gone"
    """Its shellper was dead: what its tree left running was ended and its files removed."""


@record(frozen=True)
class Stopped:
    """What :func:`stop_session` did: ``method`` ("stop" or "signals") for SILENT and LOCK_MISSING; ``ended``,
    for ALREADY_GONE, the processes its tree left running, ended here."""

    way: StopWay
    method: str = ""
    ended: int = 0


STOP_EXIT_WAIT = 5.0
"""Seconds ``stop`` waits, once the shellper has closed the connection, for it to exit: it first gives its
other clients up to 2 s to take their last frames, then removes its files."""

STOP_ATTEMPTS = 3
"""Connections ``stop`` makes to deliver STOP while other tower connections replace its own."""

STARTING_WAIT = 1.0
"""Seconds ``stop`` gives a name with a log but no record and a free lock to be taken by a shellper that is
starting (its log comes first, then its lock): cleaning its files then would take its log and its name."""

PROC_STATES = {"T": "stopped (SIGSTOP)", "t": "stopped by a debugger", "D": "blocked in the kernel (D state)"}
"""What /proc's state letter says a shellper that does not answer, or does not exit, is doing."""


def stop_session(directory: str, name: str, *, grace: float | None, client_name: str,
                 notify: Callable[[str], None] | None = None) -> Stopped:
    """STOP over the socket, then make sure: the shellper (pinned by a pidfd before asking) has exited and
    its files are gone. A closed connection alone proves neither (the shellper killed or stopped mid-way).
    ``grace``: seconds between SIGTERM and SIGKILL (None: the session's own); ``notify`` is told, before it
    starts, why a shellper that does not answer is ended with signals.

    Another stop may race this one (a `shellper stop`, a `run --replace`): a session that is already on its
    way out (it closes the connection, or its socket is gone, while the recorded shellper pinned at the
    start is alive) is waited for, and when another tower connection replaces ours before the shellper has
    read our STOP, it is sent again (STOP_ATTEMPTS), but only to the shellper this stop first reached.

    StopFailed with what is left; Unreachable when nothing answers and nothing says it is stopping."""
    paths = SessionPaths.for_name(directory, name)
    if not SessionLock.is_locked(paths.lock) and session_files(paths) and not starting(paths):
        return _stop_stale(paths, DEFAULT_GRACE if grace is None else grace, client_name)
    recorded = read_record_if_any(paths)
    pin = _pin_recorded(paths, recorded)
    try:
        instance: str | None = None
        failure = ""
        for _ in range(STOP_ATTEMPTS):
            client = Client(socket_path(directory, name), wire.Role.TOWER, client_name=client_name)
            try:
                client.connect(replay_bytes=0)
            except ClientError as exc:
                if instance is None:
                    silent = silent_shellper(paths, exc)
                    if silent is not None:
                        return _stop_silent(paths, *silent, DEFAULT_GRACE if grace is None else grace, notify)
                    if pin is None or recorded is None or not on_its_way_out(exc, paths, recorded.instance_id):
                        raise Unreachable(exc) from None
                break  # on its way out: STOPped by us before, or by another stop meanwhile
            with client:
                welcome = client.welcome
                assert welcome is not None
                if instance is not None and welcome.instance_id != instance:
                    break  # the shellper we were stopping is gone and a new session has the name: not ours
                _refuse_foreign(paths, None, welcome.name)
                instance = welcome.instance_id
                if pin is None or (welcome.instance_id, welcome.shellper_pid) != (
                        recorded.instance_id if recorded else None, pin.pid):
                    if pin is not None:
                        pin.close()
                    pin = _pin_shellper(client, recorded)
                delivered, failure = _send_stop(client, paths, grace, pin)
                if delivered:
                    break
        if failure:
            _failed_stop(paths, pin, recorded, failure)
        return _confirm_stopped(paths, pin, recorded)
    finally:
        if pin is not None:
            pin.close()


def starting(paths: SessionPaths) -> bool:
    """A shellper may be starting under this name: only its log (and no record) is there, and its lock is
    taken within STARTING_WAIT. A launch killed before its lock leaves such a log too: it waits that long."""
    if os.path.lexists(paths.record) or os.path.lexists(paths.socket):
        return False
    deadline = time.monotonic() + STARTING_WAIT
    while time.monotonic() < deadline:
        time.sleep(0.02)
        try:
            if SessionLock.is_locked(paths.lock):
                return True
        except LockError:
            return False
    return False


def lock_freed(paths: SessionPaths, timeout: float) -> bool:
    """Without a pidfd: wait for the session lock to be free (its holder gone), polling until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if not SessionLock.is_locked(paths.lock):
                return True
        except LockError:
            return False
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def read_record_if_any(paths: SessionPaths) -> SessionRecord | None:
    from shellper.host.record import RecordError, read_record

    try:
        return read_record(paths.record)
    except (OSError, RecordError):
        return None


def on_its_way_out(error: ClientError, paths: SessionPaths, instance: str | None = None) -> bool:
    """The connection failed as it does to a shellper that is stopping: closed after accepting; or its socket
    is gone or silent and its record is gone, says stopping, or is no longer that of ``instance`` (the
    shellper we pinned). A starting session has no socket yet either, but a record that says so."""
    from shellper.client.blocking import ConnectionRefused, SessionGone, SessionNotFound

    if isinstance(error, SessionGone):
        return True
    if not isinstance(error, SessionNotFound | ConnectionRefused):
        return False
    now = read_record_if_any(paths)
    return now is None or now.state == SessionState.STOPPING or (instance is not None
                                                                 and now.instance_id != instance)


def silent_shellper(paths: SessionPaths, error: ClientError) -> tuple[SessionRecord, str] | None:
    """For a connection that timed out (not refused, not missing): the record and, in words, what its shellper
    is doing instead of answering, when the recorded shellper is alive (this boot, its start ticks)."""
    from shellper.client.blocking import Timeout
    from shellper.host.identity import read_stat
    from shellper.host.shellpers import record_is_alive

    if not isinstance(error, Timeout):
        return None
    found = read_record_if_any(paths)
    if found is None or not record_is_alive(found):
        return None
    st = read_stat(found.shellper_pid)
    doing = PROC_STATES.get(st.state if st is not None else "")
    return found, f"pid {found.shellper_pid} does not answer: " + (
        f"{doing}?" if doing else "hung? (it runs but does not answer)")


def _send_stop(client: Client, paths: SessionPaths, grace: float | None, pin: PidFd | None) -> tuple[bool, str]:
    """STOP, then read until the shellper closes the connection: (True, why the stop failed, "" if it did
    not: a version-3 shellper answers a STOP with an id, not ok when processes survived it). (False, "") if
    another tower connection replaced ours first (the shellper may never have read our STOP)."""
    from shellper.client.blocking import RemoteError, SessionGone

    # the shellper's own bound: its grace, then freezing and killing a tree
    bound = (DEFAULT_GRACE if grace is None else grace) + KILL_SECONDS + 15.0
    deadline = time.monotonic() + bound
    stop_id = 1 if client.conn.replies else None
    failure = ""
    try:
        client.send(wire.Stop(grace=grace, id=stop_id))
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise StopFailed(f"stop: session {paths.name!r} did not stop within {bound:g} s: "
                                 + _what_remains(paths, pin))
            frame = client.recv(timeout=left)
            if isinstance(frame, wire.Reply) and stop_id is not None and frame.id == stop_id and not frame.ok:
                failure = frame.message or frame.code
            elif isinstance(frame, wire.Error):
                if frame.code == "replaced":
                    return False, ""
                raise RemoteError(client.path, frame)
    except SessionGone:
        return True, failure


def _failed_stop(paths: SessionPaths, pin: PidFd | None, recorded: SessionRecord | None, failure: str) -> None:
    """The shellper said its stop failed (processes survived SIGKILL): once it is gone, say so, naming what
    still runs; never "stopped". Its record is kept: it is how they are found again."""
    if pin is not None:
        pin.wait_dead(STOP_EXIT_WAIT)
    note = _survivors_note(read_record_if_any(paths) or recorded, paths)
    raise StopFailed(f"stop: session {paths.name!r}: {failure}{note}; {_files_left(paths, session_files(paths))}: "
                     f"`shellper stop {paths.name}` again, or a Tower's reconcile, ends what is left and removes them")


def _pin_recorded(paths: SessionPaths, recorded: SessionRecord | None) -> PidFd | None:
    """A pidfd on the recorded shellper, taken before connecting, if it is alive and the record is this
    session's own: only ever waited on, never signalled."""
    from shellper.host.identity import IdentityError, ProcessIdentity, open_verified
    from shellper.host.ownfiles import not_own

    if recorded is None or not_own(paths, recorded) is not None:
        return None
    try:
        return open_verified(ProcessIdentity(recorded.boot_id, recorded.shellper_pid, recorded.shellper_start_time))
    except IdentityError:
        return None


def _pin_shellper(client: Client, recorded: SessionRecord | None) -> PidFd | None:
    """A pidfd on the shellper that answered: the record's (boot id, pid, start ticks) when the record
    names the instance that answered, else the socket's peer if it is the pid WELCOME claims; None if
    neither can be had (then the lock tells when it is gone)."""
    from shellper.host.identity import IdentityError, PidFd, ProcessIdentity, open_verified

    welcome = client.welcome
    assert welcome is not None
    try:
        if recorded is not None and (recorded.instance_id, recorded.shellper_pid) == (welcome.instance_id,
                                                                                      welcome.shellper_pid):
            return open_verified(ProcessIdentity(recorded.boot_id, recorded.shellper_pid,
                                                 recorded.shellper_start_time))
        peer = peer_pid(client.sock) if client.sock is not None else None
        if peer is not None and peer == welcome.shellper_pid:
            return PidFd.open(peer)  # it holds the connection open, so this pid is still the peer's
    except IdentityError:
        pass
    return None


def _stop_silent(paths: SessionPaths, recorded: SessionRecord, why: str, grace: float,
                 notify: Callable[[str], None] | None) -> Stopped:
    """A live shellper that does not answer cannot be asked to STOP: end it and its tree with signals, after
    the identity checks tower_client's reconcile makes (its pid, start ticks, program and session files)."""
    from shellper.host.identity import IdentityError

    _refuse_foreign(paths, recorded)
    if notify is not None:
        notify(why)
    try:
        term = terminate_shellper(recorded, paths, grace=grace)
    except IdentityError as exc:
        raise StopFailed(f"stop: session {paths.name!r}: pid {recorded.shellper_pid} could not be verified as its "
                         f"shellper: {exc}; nothing signalled") from None
    if term.kept:
        raise StopFailed(f"stop: session {paths.name!r}: ended via {term.method}, but {term.kept}")
    return Stopped(StopWay.SILENT, term.method)


def _confirm_stopped(paths: SessionPaths, pin: PidFd | None, recorded: SessionRecord | None) -> Stopped:
    name = paths.name
    gone = pin.wait_dead(STOP_EXIT_WAIT) if pin is not None else lock_freed(paths, STOP_EXIT_WAIT)
    if not gone:
        raise StopFailed(f"stop: session {name!r}: the connection ended but the shellper did not exit: "
                         + _what_remains(paths, pin))
    left = session_files(paths)
    if not left:
        _check_cgroup_gone(recorded, paths)
        return Stopped(StopWay.ASKED)
    if SessionLock.is_locked(paths.lock) or starting(paths):  # its files now: a new shellper took the name
        return Stopped(StopWay.ASKED_NAME_TAKEN)
    pid = f" (pid {pin.pid})" if pin is not None else ""
    unwritable = _unwritable(paths.dir)
    if unwritable:
        raise StopFailed(f"stop: session {name!r}: its shellper{pid} stopped but could not remove its files: "
                         f"{paths.dir} {unwritable}; {_files_left(paths, left)}: run `shellper stop {name}` again "
                         "once it is writable")
    raise StopFailed(f"stop: session {name!r}: its shellper{pid} died before it finished stopping (killed?); "
                     f"{_files_left(paths, left)}{_survivors_note(recorded, paths)}: run `shellper stop {name}` "
                     "again to end what it left running and remove its files")


def _unwritable(directory: str | os.PathLike[str]) -> str:
    """Why nobody here can remove files in ``directory`` ("" if they can): a read-only mount, or no write
    permission."""
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return "is on a read-only file system"
    except OSError:
        return ""
    return "" if os.access(directory, os.W_OK | os.X_OK) else "is not writable"


def _check_cgroup_gone(recorded: SessionRecord | None, paths: SessionPaths) -> None:
    """The stopped session's cgroup must be gone with it: a process that moved itself into its shellper/ part
    keeps it, and is named (not signalled: nothing proves it the session's, shellper.host.survivors)."""
    if recorded is None or recorded.cgroup is None or not os.path.isdir(recorded.cgroup):
        return
    from shellper.host.cgroup import SHELLPER_SUB, CgroupError
    from shellper.host.shellpers import session_cgroup

    group = session_cgroup(recorded, str(paths.dir))
    if group is None:
        return
    if not group.populated():  # empty, yet left (the shellper could not remove it): verified ours, so do it
        with contextlib.suppress(CgroupError):
            if group.remove():
                return
    strangers = group.procs(SHELLPER_SUB)
    what = (f"process(es) {', '.join(map(str, strangers))} moved into its {SHELLPER_SUB}/ part, not verifiably "
            "the session's, so not signalled: end them, then `tower-client reconcile --apply` removes it"
            if strangers else f"processes {group.procs()} are still inside")
    raise StopFailed(f"stop: session {paths.name!r}: its shellper stopped, but its cgroup {group.path} is kept: "
                     f"{what}")


def _what_remains(paths: SessionPaths, pin: PidFd | None) -> str:
    """A live shellper and its files, and what to do about them."""
    from shellper.host.identity import read_stat

    name = paths.name
    files = _files_left(paths, session_files(paths))
    if pin is None:
        return (f"its lock is still held; {files}: run `shellper stop {name}` again once its shellper has "
                "exited, or find and end it (`shellper ls` shows its pid)")
    st = read_stat(pin.pid) if not pin.wait_dead(0) else None
    doing = PROC_STATES.get(st.state) if st is not None else None
    state = f"is {doing}" if doing else "is still running" if st is not None else "has just exited"
    cont = f"`kill -CONT {pin.pid}` lets it finish; or " if st is not None and st.state == "T" else ""
    return (f"its shellper (pid {pin.pid}) {state}; {files}: {cont}`kill -KILL {pin.pid}`, then "
            f"`shellper stop {name}` ends what it left running and removes its files")


def _files_left(paths: SessionPaths, left: list[str]) -> str:
    if not left:
        return "no files left"
    return f"files left in {paths.dir}: {', '.join(os.path.basename(p) for p in left)}"


def _survivors_note(recorded: SessionRecord | None, paths: SessionPaths) -> str:
    """The processes a dead shellper's tree left running, found by their marks (nothing is signalled)."""
    if recorded is None:
        return ""
    from shellper.host.identity import IdentityError
    from shellper.host.survivors import find_survivors

    try:
        found = find_survivors(recorded, directory=paths.dir)
    except (IdentityError, OSError, PathError):  # only a note: the error says what to do either way
        return ""
    try:
        pids = sorted(found)
    finally:
        for fd in found.values():
            fd.close()
    shown = ", ".join(map(str, pids[:20])) + (f", ... ({len(pids)} in all)" if len(pids) > 20 else "")
    return f"; processes it started still running: {shown}" if pids else ""


def _stop_stale(paths: SessionPaths, grace: float, client_name: str) -> Stopped:
    """The shellper is gone (killed, crashed, or a launch that failed) and left files: end what its tree
    left running and remove them, as tower_client's reconcile does for a dead session (identity-checked,
    under the lock). What is not the session's to remove (a symlink, a directory) is named, not touched."""
    from shellper.host.cleanup import clear_dead
    from shellper.host.reaper import SurvivorError
    from shellper.host.shellpers import record_is_alive

    name = paths.name
    recorded = read_record_if_any(paths)
    if recorded is not None:
        _refuse_foreign(paths, recorded)
    if recorded is not None and record_is_alive(recorded):
        return _stop_lockless(paths, recorded, grace, client_name)
    try:
        cleared = clear_dead(recorded, paths, grace=grace)  # as a Tower's apply clears a dead session
    except SurvivorError as exc:  # the record is how they are found again: kept, like every file
        raise StopFailed(f"stop: session {name!r}: its shellper was already gone, and processes it left "
                         f"survived SIGKILL: {', '.join(map(str, exc.pids))}; nothing removed: run `shellper "
                         f"stop {name}` again once they can die") from None
    if cleared.removed is None:
        raise StopFailed(f"stop: session {name!r} was started again meanwhile; nothing removed")
    removed, ended, kept = cleared.removed, cleared.reaped.pids, cleared.reaped.kept
    ended_note = f" and ended {len(ended)} process(es) it left running" if ended else ""
    left = session_files(paths)
    if left:
        kinds = ", ".join(f"{os.path.basename(p)} ({file_kind(p) or 'gone'})" for p in left)
        raise StopFailed(f"stop: session {name!r}: its shellper was already gone; removed {len(removed)} "
                         f"file(s){ended_note}, but left in {paths.dir}: {kinds}, which shellper never removes "
                         "(only its own sockets and regular files): check what they are and remove them yourself")
    if kept:
        raise StopFailed(f"stop: session {name!r}: its shellper was already gone; removed its "
                         f"files{ended_note}, but {kept}")
    return Stopped(StopWay.ALREADY_GONE, ended=len(ended))


def _stop_lockless(paths: SessionPaths, recorded: SessionRecord, grace: float, client_name: str) -> Stopped:
    """Its lock file was removed (a tmp cleaner), not its shellper: end it as a Tower would, verified, STOP
    going only to the recorded shellper."""
    from shellper.host.identity import IdentityError

    name = paths.name
    try:
        term = terminate_recorded(recorded, paths, grace=grace, client_name=client_name,
                                  check=lambda _, welcome: _refuse_foreign(paths, None, welcome.name))
    except (InstanceMismatch, PeerMismatch) as exc:
        answers = f"as instance {exc.found}" if isinstance(exc, InstanceMismatch) else f"from pid {exc.found}"
        raise StopFailed(f"stop: session {name!r}: its socket answers {answers}, not as the recorded shellper "
                         f"(instance {recorded.instance_id}, pid {recorded.shellper_pid}); nothing signalled") from None
    except IdentityError as exc:
        raise StopFailed(f"stop: session {name!r} has no lock file, and pid {recorded.shellper_pid} "
                         f"could not be verified as its shellper: {exc}; nothing signalled") from None
    if term.kept:
        raise StopFailed(f"stop: session {name!r}: ended via {term.method}, but {term.kept}")
    return Stopped(StopWay.LOCK_MISSING, term.method)


def _refuse_foreign(paths: SessionPaths, recorded: SessionRecord | None, welcome_name: str | None = None) -> None:
    """Nothing is signalled or removed for files that are not this name's own (a record copied from
    another session, files hard-linked from it, a socket answering as another session): acting on them
    would end that session (shellper.host.ownfiles, the check tower_client's reconcile and reap make)."""
    from shellper.host.ownfiles import mismatch, not_own

    name = paths.name
    why = mismatch(name, None, welcome_name=welcome_name) if recorded is None else not_own(paths, recorded,
                                                                                            welcome_name)
    if why is not None:
        raise StopFailed(f"stop: session {name!r}: {why}: these files may be another session's; nothing "
                         f"signalled, nothing removed (if they are litter, remove them yourself)")
