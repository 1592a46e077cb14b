"""The session's place in the runtime directory: its socket (bound 0600, made again after SIGUSR1 when
someone removed it) and, at the end, its files removed, unless another shellper has the name by then."""

from __future__ import annotations

import os

from shellper.daemon.transport import close_listener, listen_unix
from shellper.host.logfile import keep_stopped_log
from shellper.host.paths import (
    PathError,
    ensure_runtime_dir,
    remove_record_temps,
    socket_error,
    unlink_if_regular,
    unlink_if_socket,
)
from shellper.host.record import AlreadyRunning, LockError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable

    from shellper.daemon.clientconn import ClientConn
    from shellper.daemon.journal import Journal
    from shellper.daemon.reactor import Reactor
    from shellper.host.logfile import LogFile
    from shellper.host.paths import SessionPaths


class SessionFiles:
    """The listening socket and the session's files (the record and its lock are the journal's to write)."""

    def __init__(self, loop: Reactor, log: LogFile, paths: SessionPaths, name: str, journal: Journal,
                 connection: Callable[[], ClientConn]) -> None:
        self.loop = loop
        self.log = log
        self.paths = paths
        self.name = name
        self.journal = journal
        self._connection = connection
        """Makes the connection object for each accepted client."""
        self._server: socket.socket | None = None

    def listen(self) -> None:
        """Bind the socket already 0600 (umask), so no other user can connect in between."""
        old_umask = os.umask(0o177)
        try:
            self._server = listen_unix(self.loop, str(self.paths.socket), self._connection)
        except OSError as exc:  # a bare errno would not say which file, nor what to do
            raise socket_error(str(self.paths.socket), exc) from exc
        finally:
            os.umask(old_umask)

    def close(self) -> None:
        """Stop accepting connections."""
        if self._server is not None:
            close_listener(self.loop, self._server)
            self._server = None

    def repair(self) -> None:
        """Repair what someone removed (the runtime directory was cleaned) or could not be written (the
        disk was full): the socket, the lock and the record. Connected clients never notice."""
        if self._server is None:
            return
        if os.path.exists(self.paths.socket):
            self.journal.write_record()  # retry a write that failed (atomic: a reader never sees it torn)
            return
        self.log.write("socket missing: recreating it")
        self.close()
        self._relisten()

    def _relisten(self) -> None:
        """Directory (checked like at launch), then the lock (without a lock file the name would look free
        and a Tower would clean our files away), then the socket and the record."""
        try:
            ensure_runtime_dir(self.paths.dir)
            self.log.close()  # the next line reopens it at its path: the old file went with the directory
            self.journal.retake_lock(self.name)
            self.listen()
            self.journal.write_record()
            self.log.write(f"socket recreated: {self.paths.socket}")
        except AlreadyRunning as exc:
            self.log.write(f"not recreating the socket: {exc}")
        except (OSError, PathError, LockError) as exc:
            self.log.write(f"could not recreate socket: {exc}")

    def remove(self, keep_log: bool, *, retire_log: bool = False, keep_record: bool = False) -> None:
        """Remove the socket, the record (and temps a killed writer left), the lock and, unless kept, the log:
        with ``retire_log`` (a stop) it moves to logs/NAME.log instead. ``keep_record``: processes survived
        the stop, and the record is how a reconcile finds them (their instance mark)."""
        # Displaced (our files were removed and another shellper took the name): its files, not ours.
        displaced = os.path.lexists(self.paths.lock) and not self.journal.lock_is_ours()
        if displaced:
            self.log.write(f"{self.paths.lock} is another shellper's: leaving the session's files to it")
        else:
            unlink_if_socket(self.paths.socket)
            if not keep_record:
                unlink_if_regular(self.paths.record)
        if self.journal.lock_is_ours():  # then nobody else writes this record: the temps are a killed writer's
            remove_record_temps(self.paths)
        if not keep_log:  # before the lock goes: then the name's next shellper cannot have a log here yet
            self.log.close()
            if displaced:
                pass
            elif retire_log:
                self._keep_stopped_log()
            else:
                unlink_if_regular(self.paths.log)
                unlink_if_regular(self.paths.log + ".1")
        self.journal.release_lock()

    def _keep_stopped_log(self) -> None:
        """The log moves to logs/NAME.log (shellper.host.logfile.keep_stopped_log); where it cannot, it goes."""
        try:
            kept = keep_stopped_log(self.paths.dir, self.paths.name)
        except OSError as exc:
            self.log.write(f"could not keep the log in logs/: {exc}")
            self.log.close()
            unlink_if_regular(self.paths.log)
            unlink_if_regular(self.paths.log + ".1")
            return
        if kept is not None:
            self.log.path = kept  # a late line goes to the kept log, not to a new NAME.log
