"""The session: one PTY child, its scrollback, its clients and its supervisor, on one event loop.

Everything that happens is a reaction to a file descriptor or a signal (PTY readable, socket readable,
SIGCHLD, SIGTERM); the loop holds no periodic timer, so an idle session costs nothing. The only timers
are one-shot: a pending client's handshake deadline, a scheduled restart, the husk time-to-live.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections import deque
from collections.abc import Callable

from shellper import __version__
from shellper.core.config import ConfigError, SessionConfig, resolve_stderr_mode
from shellper.core.containment import Containment
from shellper.core.exitrecord import ExitRecord
from shellper.core.exits import Action, ExitEvidence, Supervisor, describe_exit, exit_record
from shellper.core.owner import default_owner
from shellper.core.ring import Scrollback
from shellper.core.states import SessionState
from shellper.daemon.clientconn import ClientConn
from shellper.daemon.pacing import OutputPacer
from shellper.daemon.reactor import Future, Handle, Lock, Reactor
from shellper.daemon.starved import Starvation
from shellper.daemon.transport import close_listener, listen_unix
from shellper.host.cgroup import (
    CHILD_SUB,
    SHELLPER_SUB,
    CgroupError,
    LeafName,
    SessionCgroup,
    default_parent,
    delegated_scope,
    events_populated,
    find_mount,
    own_cgroup,
    session_cgroup_of,
)
from shellper.host.child import Child, SpawnError, build_env, check_spawnable, spawn_child
from shellper.host.child import resize as resize_child
from shellper.host.identity import IdentityError, PidFd, ProcessGone, boot_id, start_time
from shellper.host.logfile import LogFile
from shellper.host.paths import (
    PathError,
    SessionPaths,
    ensure_runtime_dir,
    remove_record_temps,
    socket_error,
    unlink_if_regular,
    unlink_if_socket,
)
from shellper.host.reaper import OwnTree, reap_children_nohang, set_child_subreaper
from shellper.host.record import (
    MAX_EXITS,
    AlreadyRunning,
    LockError,
    RecordError,
    SessionLock,
    SessionRecord,
    cmdline_sha256,
    new_instance_id,
    read_record,
    write_record,
)
from shellper.host.shellpers import live_shellpers
from shellper.protocol import wire

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs each shellper ~2.5 ms and 0.5 MiB
if TYPE_CHECKING:
    from typing import Any

READ_CHUNK = 64 * 1024
"""Bytes asked for per read. Reads go into one reused buffer and are copied out at their real size
(a PTY read is mostly 4 KiB): os.read allocates the whole request and shrinks it, which fragments the
heap (a 1 GiB flood left 1.0-1.1 MiB more heap than this does; 256 KiB os.reads left ~25 MiB)."""
READS_PER_WAKEUP = 4
"""Reads per wakeup: drain what is there, but let clients and signals in between."""
FORWARD_BATCH = 8000
"""Bytes read after which they go to the ring and the clients without waiting for the wakeup's other
reads, so the client (a terminal, a tower) works on them while the shellper reads on: in a flood, every
two reads (a PTY hands over at most 4,095 bytes per read). Not while the shellper waits for a CPU longer
than it runs (shellper.daemon.starved): then each hand-off's wakeup of a client costs more than it gains, and a
wakeup's reads go out together (up to READ_CHUNK). Against one hand-off per wakeup, in 64 MiB floods
taking turns (7 rounds): through attach 70.6 -> 83.4 MiB/s, to a tower 59.6 -> 70.5. With 50 sessions
flooding at once (5 rounds), two hand-offs per wakeup regardless cost 15 % of the aggregate and 24 %
more CPU; deciding by starvation, the aggregate and CPU are those of one per wakeup (86.0 vs 83.5 MiB/s,
14.3 vs 14.5 s)."""
SHORT_READ = 512
"""A read this small drained the PTY (a keystroke's echo, a prompt): the read after it would only
fail with EAGAIN, which costs a syscall and an exception on every keystroke. Epoll is level-triggered,
so anything written meanwhile wakes us again."""
STDERR_TAIL_BYTES = 8 * 1024
EVENT_HISTORY = 1000
INPUT_HIGH_WATER = 1024 * 1024
"""Pending keyboard input above which we stop reading from the sending client (the child is slow)."""
REQUESTED_WINDOW = 10.0
"""An exit within this many seconds of a terminating SIGNAL from a client counts as requested."""
_STATE_AFTER = {Action.RESTART: SessionState.BACKOFF, Action.EXITED: SessionState.EXITED,
                Action.FATAL: SessionState.FATAL}
KILL_ROUNDS = 8
"""SIGKILL rounds of a teardown without a cgroup before what is left is logged as surviving."""
TERMINATING = {signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGKILL}


class Session:
    """Holds the child, the ring and the clients; decides what follows each exit."""

    def __init__(self, config: SessionConfig, paths: SessionPaths, log: LogFile, loop: Reactor) -> None:
        self.config = config
        self.paths = paths
        self.log = log
        self.loop = loop
        self.scrollback = Scrollback(config.ring_bytes)
        self.supervisor = Supervisor(config.policy)
        self.instance_id = new_instance_id()
        self.boot_id = boot_id()
        self.pid = os.getpid()
        self.start_time = start_time(self.pid) or 0
        self._pgid, self._sid = os.getpgid(0), os.getsid(0)
        self._cmdline_sha256 = cmdline_sha256()
        self.cols, self.rows = config.cols, config.rows
        self.owner = config.owner or default_owner()
        self.containment = Containment.NONE
        self.cgroup: SessionCgroup | None = None
        """The session's cgroup (shellper.host.cgroup), once made; None: containment none."""
        self._cgroup_id: int | None = None
        self.state: SessionState = SessionState.STARTING
        self.state_reason = ""
        self.child: Child | None = None
        self.child_argv = list(config.argv)
        self.child_cwd = config.cwd
        self.child_env = dict(config.env)
        self.last_output_at: float | None = None
        self.last_exit: ExitRecord | None = None
        self.exits: deque[ExitRecord] = deque(maxlen=MAX_EXITS)
        self.exit_count = 0
        self.restarts = 0
        self.next_restart_at: float | None = None
        self.created_at = time.time()
        self.clients: dict[int, ClientConn] = {}
        self.connections: set[ClientConn] = set()
        """Every open connection, attached or still in its handshake: what the client limit counts."""
        self.tower: ClientConn | None = None
        self.events: deque[wire.Event] = deque(maxlen=EVENT_HISTORY)
        self.event_seq = 0
        self.stderr_tail = bytearray()
        read_buffer = bytearray(READ_CHUNK)  # see READ_CHUNK
        self._read_into, self._read_view = (read_buffer,), memoryview(read_buffer)
        self._starvation = Starvation()  # see FORWARD_BATCH
        self._next_client_id = 1
        self._input = bytearray()
        self._input_paused: set[ClientConn] = set()
        self._restart_handle: Handle | None = None
        self._husk_handle: Handle | None = None
        self._requested_at = 0.0
        self._stop_requested = False
        self._replacing = False
        self._spawn_lock = Lock()
        self._server: socket.socket | None = None
        self._lock: SessionLock | None = None
        self.record_error: str | None = None
        """Why the last record write failed (disk full, directory gone); None once one succeeds."""
        self.stop_error: str | None = None
        """Why the stop failed, if it did: the session was ended anyway, and serve() returns 1."""
        self.paced: list[ClientConn] = []
        """The clients output waits for, within bounds (shellper.daemon.pacing): the tower and the terminals."""
        self.pacer = OutputPacer(loop, max(1, config.ring_bytes // 2), readers=lambda: self.paced,
                                 end=lambda: self.scrollback.end, pause=self._hold_output,
                                 resume=self._release_output, log=log.write)

    # ----------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Lock, spawn the first child, listen. Raises (and cleans up) if any step fails."""
        self._lock = SessionLock.acquire(self.paths.lock, self.config.name)
        try:
            self._end_previous()
            unlink_if_socket(self.paths.socket)  # stale: the lock says nobody owns it
            with contextlib.suppress(OSError):
                set_child_subreaper()
            self._contain()
            self._spawn(self.child_argv, self.child_cwd, self.child_env, first=True)
            self._listen()
        except BaseException:
            self._cleanup_child_fds()
            if self.cgroup is not None:
                with contextlib.suppress(CgroupError):
                    self.cgroup.kill(CHILD_SUB)
                    self.cgroup.wait_empty(5.0, CHILD_SUB)
            if self.child is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.child.pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(self.child.pid, 0)
            self._remove_files(keep_log=False)  # a session that never started leaves nothing behind
            self._release_cgroup()
            raise
        self.loop.add_signal_handler(signal.SIGCHLD, self._on_sigchld)
        self.loop.add_signal_handler(signal.SIGTERM, self.request_stop)
        self.loop.add_signal_handler(signal.SIGINT, self.request_stop)
        self.loop.add_signal_handler(signal.SIGHUP, lambda: None)
        self.loop.add_signal_handler(signal.SIGUSR1, self._on_sigusr1)
        self.log.write(f"shellper {__version__} started: pid={self.pid} session={self.config.name} "
                       f"socket={self.paths.socket}")
        self._on_sigchld()  # a child that died before the handler existed (its exit writes the record)

    def info_line(self) -> dict[str, Any]:
        """What the launcher prints once the socket accepts connections."""
        return {
            "name": self.config.name, "pid": self.pid, "start_time": self.start_time, "boot_id": self.boot_id,
            "instance_id": self.instance_id, "child_pid": self.child.pid if self.child else None,
            "owner": self.owner, "containment": self.containment,
            "socket": str(self.paths.socket), "record": str(self.paths.record), "log": str(self.paths.log),
        }

    def request_stop(self, grace: float | None = None) -> None:
        if self._stop_requested:
            return
        self._stop_requested = True
        stop = self.loop.create_task(self._stop(self.config.grace if grace is None else grace))
        stop.add_done_callback(self._after_stop)

    def _after_stop(self, stop: Future[None]) -> None:
        """A stop that failed still ends the session: a shellper stuck in ``stopping`` would keep its name
        and its processes, answer nobody and never exit. Its log stays, to say why."""
        error = stop.exception()
        if error is None:
            return
        self.stop_error = f"{type(error).__name__}: {error}"
        self.log.write(f"stop failed ({self.stop_error}): ending the session anyway; its log is kept")
        ending = self.loop.create_task(self._end_after_failed_stop())
        ending.add_done_callback(lambda _: self.loop.stop())

    async def _end_after_failed_stop(self) -> None:
        """What a stop must not skip, each step on its own: the child's tree (SIGKILL now: the grace may
        have passed already), the cgroup, the files."""
        try:
            await self._terminate_tree(0.0)
        except Exception as exc:
            self.log.write(f"could not end the session's processes: {type(exc).__name__}: {exc}")
        self._release_cgroup()  # never raises: says in the log what it could not do
        try:
            self._remove_files(keep_log=True)
        except Exception as exc:
            self.log.write(f"could not remove the session's files: {type(exc).__name__}: {exc}")
        self.log.write("stopped after a failed stop")

    async def _stop(self, grace: float) -> None:
        self._set_state(SessionState.STOPPING, "stop requested")
        self._cancel_timers()
        self._requested_at = time.monotonic()
        await self._terminate_tree(grace)
        self._on_sigchld()
        if self.child is not None:  # exit not seen (reaped elsewhere?): report it anyway
            self._child_gone(None, requested=True)
        closing = [client.closed for client in self.clients.values()]
        for client in list(self.clients.values()):
            client.close_after_flush()
        if closing:  # let the last frames (EXIT) reach the clients; a stuck one does not hold us up
            await self.loop.wait(closing, timeout=2.0)
        if self._server is not None:
            close_listener(self.loop, self._server)
            self._server = None
        self.log.write("stopped")
        self._release_cgroup()  # before the record that names it
        self._remove_files(keep_log=False)
        self.loop.stop()

    def _remove_files(self, keep_log: bool) -> None:
        # Displaced (our files were removed and another shellper took the name): its files, not ours.
        displaced = os.path.lexists(self.paths.lock) and not self._lock_file_is_ours()
        if displaced:
            self.log.write(f"{self.paths.lock} is another shellper's: leaving the session's files to it")
        else:
            unlink_if_socket(self.paths.socket)
            unlink_if_regular(self.paths.record)
        if self._lock_file_is_ours():  # then nobody else writes this record: the temps are a killed writer's
            remove_record_temps(self.paths)
        if self._lock is not None:
            self._lock.release()  # unlinks the lock file only if it is still ours
            self._lock = None
        if not keep_log:
            self.log.close()
            if not displaced:
                unlink_if_regular(self.paths.log)
                unlink_if_regular(self.paths.log + ".1")

    def _end_previous(self) -> None:
        """A killed shellper's record is about to be overwritten: end what its tree left running first (its
        cgroup, or what carries its mark), or nothing would ever find it again."""
        try:
            previous = read_record(self.paths.record)
        except (OSError, RecordError):
            return
        if previous.owner != self.owner:
            self.log.write(f"instance {previous.instance_id} was owner {previous.owner!r}'s: what it left running "
                           "is theirs to end")
            return
        from tower_client.survivors import reap_survivors  # only on this path: a name reused after a crash

        try:
            report = reap_survivors(previous, directory=self.paths.dir, grace=self.config.grace)
        except (IdentityError, CgroupError, OSError) as exc:
            self.log.write(f"could not end what instance {previous.instance_id} left running: {exc}")
            return
        if report.pids or report.suspect:
            self.log.write(f"instance {previous.instance_id} left {list(report.pids)} running: ended"
                           + (f"; not ended: {report.suspect}" if report.suspect else ""))

    def _contain(self) -> None:
        """Make the session's cgroup and move this shellper into its shellper/ part (shellper.host.cgroup).

        Under ``auto`` a machine without a writable cgroup v2 hierarchy runs the session uncontained, and
        says so in the record and the log; under ``cgroup`` it does not start."""
        if self.config.containment == Containment.NONE:
            self._leave_outer_session()
            return
        parent = self.config.cgroup_parent or default_parent()
        try:
            if parent is None:
                raise CgroupError("(none)", "no writable cgroup v2 parent: give --cgroup-parent, or run as root "
                                  "or with a delegated cgroup")
            scope = delegated_scope()
            group = SessionCgroup.create(parent, LeafName.of(self.paths.dir, self.owner, self.config.name,
                                                             self.instance_id))
            try:
                self._cgroup_id = group.inode()
            except OSError:
                group.remove()
                raise
        except (CgroupError, OSError) as exc:
            if self.config.containment == Containment.CGROUP:  # the launcher shows this: say which option made it fatal
                raise ConfigError("--containment cgroup", str(exc)) from exc
            self.log.write(f"running without a cgroup: {exc}")
            self._leave_outer_session()
            return
        self.cgroup = group
        self.containment = Containment.SYSTEMD_SCOPE if scope is not None and scope == parent else Containment.CGROUP
        self.log.write(f"cgroup {group.path}")

    def join_own_cgroup(self) -> None:
        """Move into the session cgroup's shellper/ part, once the launcher has been told we are ready.

        Off the launch path on purpose: a migration between cgroups waits for an RCU grace period (5-20 ms
        here: bench/NOTES.md). Until then this shellper stays where it was started, which matters only for
        a session started inside another one, for those few milliseconds."""
        if self.cgroup is None:
            return
        try:
            self.cgroup.join(SHELLPER_SUB)
        except CgroupError as exc:
            self.log.write(f"could not move into {self.cgroup.sub(SHELLPER_SUB)}: {exc}")

    def _leave_outer_session(self) -> None:
        """Without a cgroup of our own, still not inside another session's: ending that one would end this.
        Move to the nearest cgroup above it (where the hierarchy lets us)."""
        mount, here = find_mount(), own_cgroup()
        outer = session_cgroup_of(here) if here is not None else None
        if mount is None or outer is None:
            return
        target = mount + os.path.dirname(outer)
        try:
            with open(os.path.join(target, "cgroup.procs"), "w") as procs:
                procs.write("0")
        except OSError as exc:
            self.log.write(f"runs inside session cgroup {outer} and could not leave it ({exc.strerror}): ending "
                           "that session ends this one")
            return
        self.log.write(f"left session cgroup {outer} for {target}")

    def _release_cgroup(self) -> None:
        """Leave the session's cgroup and remove it: called once its child/ part is empty."""
        group = self.cgroup
        if group is None:
            return
        try:
            group.leave()
            if not group.remove():
                self.log.write(f"cgroup {group.path} is not empty; left in place")
        except (CgroupError, OSError) as exc:
            self.log.write(f"could not remove cgroup {group.path}: {exc}")
        self.cgroup = None

    def _cancel_timers(self) -> None:
        for handle in (self._restart_handle, self._husk_handle):
            if handle is not None:
                handle.cancel()
        self._restart_handle = self._husk_handle = None
        self.next_restart_at = None

    def _on_sigusr1(self) -> None:
        """Repair what someone removed (the runtime directory was cleaned) or could not be written (the
        disk was full): the socket, the lock and the record. Connected clients never notice."""
        if self._server is None:
            return
        if os.path.exists(self.paths.socket):
            self._write_record()  # retry a write that failed (atomic: a reader never sees it torn)
            return
        self.log.write("socket missing: recreating it")
        close_listener(self.loop, self._server)
        self._server = None
        self._relisten()

    def _lock_file_is_ours(self) -> bool:
        if self._lock is None or not self._lock.held:
            return False
        try:
            now = os.stat(self.paths.lock, follow_symlinks=False)
            mine = os.fstat(self._lock.fileno())
        except OSError:
            return False
        return (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)

    def _listen(self) -> None:
        """Bind the socket already 0600 (umask), so no other user can connect in between."""
        old_umask = os.umask(0o177)
        try:
            self._server = listen_unix(self.loop, str(self.paths.socket), lambda: ClientConn(self))
        except OSError as exc:  # a bare errno would not say which file, nor what to do
            raise socket_error(str(self.paths.socket), exc) from exc
        finally:
            os.umask(old_umask)

    def _relisten(self) -> None:
        """Directory (checked like at launch), then the lock (without a lock file the name would look free
        and a Tower would clean our files away), then the socket and the record."""
        try:
            ensure_runtime_dir(self.paths.dir)
            self.log.close()  # the next line reopens it at its path: the old file went with the directory
            if not self._lock_file_is_ours():
                old, self._lock = self._lock, SessionLock.acquire(self.paths.lock, self.config.name)
                if old is not None:
                    old.release()  # its file is gone: this only closes it
            self._listen()
            self._write_record()
            self.log.write(f"socket recreated: {self.paths.socket}")
        except AlreadyRunning as exc:
            self.log.write(f"not recreating the socket: {exc}")
        except (OSError, PathError, LockError) as exc:
            self.log.write(f"could not recreate socket: {exc}")

    # ----------------------------------------------------------------------------------- the child

    def _child_env(self, env: dict[str, str]) -> dict[str, str]:
        # SHELLPER_INSTANCE marks the whole tree: what outlives a killed shellper can be found (tower_client.survivors)
        return build_env(env, {"SHELLPER_SESSION": self.config.name, "SHELLPER_INSTANCE": self.instance_id},
                         self.config.term, inherit=True)

    def _spawn(self, argv: list[str], cwd: str, env: dict[str, str], *, first: bool = False) -> bool:
        """Start a child; on exec failure either raise (first start) or treat it as a permanent exit."""
        full_env = self._child_env(env)
        join_fd = -1
        try:
            if self.cgroup is not None:
                join_fd = self.cgroup.open_procs(CHILD_SUB)
            child = spawn_child(argv, cwd=cwd, env=full_env, cols=self.cols, rows=self.rows,
                                stderr_mode=resolve_stderr_mode(self.config.stderr_mode, argv),
                                cgroup_procs_fd=join_fd)
        except (SpawnError, CgroupError) as exc:
            if first:
                raise
            self.log.write(f"spawn failed: {exc}")
            self._handle_exit(ExitEvidence(code=None, signal=None, core=False, uptime=0.0, requested=False,
                                           spawn_error=str(exc)), child_pid=None)
            return False
        finally:
            if join_fd >= 0:
                os.close(join_fd)
        self.child = child
        self.stderr_tail.clear()
        for fd in child.output_fds():
            self.loop.add_reader(fd, self._on_pty_readable, child, fd)
        self._set_state(SessionState.RUNNING, "")
        self.log.write(f"spawned pid={child.pid} argv={argv!r}")
        self._event("spawned", {"child_pid": child.pid, "argv": argv})
        return True

    def _on_pty_readable(self, child: Child, fd: int) -> None:
        batch: list[bytes] = []
        size = 0
        forward_at = READ_CHUNK if self._starvation.starved else FORWARD_BATCH
        for _ in range(READS_PER_WAKEUP):
            try:
                chunk = self._read_view[:os.readv(fd, self._read_into)].tobytes()
            except BlockingIOError:
                break
            except OSError:  # EIO: every slave end is closed
                chunk = b""
            if not chunk:
                self.loop.remove_reader(fd)
                break
            batch.append(chunk)
            size += len(chunk)
            if size >= forward_at:
                self._output_from(child, fd, batch)
                batch, size = [], 0
            elif len(chunk) < SHORT_READ:
                break
        if batch:
            self._output_from(child, fd, batch)

    def _output_from(self, child: Child, fd: int, chunks: list[bytes]) -> None:
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._starvation.output(len(data))
        if fd == child.stderr_fd:
            self.stderr_tail += data
            if len(self.stderr_tail) > STDERR_TAIL_BYTES:
                del self.stderr_tail[:-STDERR_TAIL_BYTES]
        self._output(data)

    def _output(self, data: bytes) -> None:
        """Append to the ring and hand to every client that is caught up."""
        old_end = self.scrollback.end
        self.scrollback.append(data)
        self.last_output_at = time.time()
        if self.clients:
            frame = b""  # the DATA frame, built once and only for a client that takes frames
            for client in self.clients.values():
                if not frame and client.terminal is None:
                    frame = wire.encode_data(data)
                client.on_output(old_end, data, frame)
            if self.paced:
                self.pacer.on_output()

    def _hold_output(self) -> None:
        """A paced client is far behind: stop reading the child's output until it catches up."""
        if self.child is not None:
            for fd in self.child.output_fds():
                self.loop.remove_reader(fd)

    def _release_output(self) -> None:
        child = self.child
        if child is not None:
            for fd in child.output_fds():
                self.loop.add_reader(fd, self._on_pty_readable, child, fd)

    def _notice(self, text: str) -> None:
        """A one-line notice for people attached; it is part of the output stream (and the ring)."""
        self._output(b"\r\n\x1b[7m[shellper] " + text.encode() + b"\x1b[0m\r\n")

    def _drain_child_output(self, child: Child) -> None:
        for fd in child.output_fds():
            with contextlib.suppress(OSError):
                self._on_pty_readable(child, fd)

    def _cleanup_child_fds(self) -> None:
        self.pacer.forget()
        child = self.child
        if child is None:
            return
        for fd in child.output_fds():
            with contextlib.suppress(ValueError, OSError):
                self.loop.remove_reader(fd)
            with contextlib.suppress(ValueError, OSError):
                self.loop.remove_writer(fd)
        child.close()

    def write_input(self, data: bytes, client: ClientConn) -> None:
        if self.child is None:
            client.send_error("not_running", "the child is not running; input dropped", wire.FrameType.DATA)
            return
        if not self._input:  # the usual case, a keystroke: straight to the PTY
            try:
                written = os.write(self.child.master_fd, data)
            except BlockingIOError:
                written = 0
            except OSError as exc:
                self.log.write(f"input write failed: {exc}")
                return
            if written == len(data):
                return
            self._input += data[written:]
            self._flush_input()
        else:
            self._input += data
        if len(self._input) > INPUT_HIGH_WATER:
            client.pause_input()
            self._input_paused.add(client)

    def _flush_input(self) -> None:
        child = self.child
        if child is None:
            self._input.clear()
            self._resume_input()
            return
        try:
            while self._input:
                n = os.write(child.master_fd, self._input[:65536])
                del self._input[:n]
        except BlockingIOError:
            pass
        except OSError as exc:
            self.log.write(f"input write failed: {exc}")
            self._input.clear()
        with contextlib.suppress(ValueError, OSError):
            if self._input:
                self.loop.add_writer(child.master_fd, self._flush_input)
            else:
                self.loop.remove_writer(child.master_fd)
        if len(self._input) <= INPUT_HIGH_WATER // 2:
            self._resume_input()

    def _resume_input(self) -> None:
        """Read again from the clients held back while the child was not taking their input."""
        for client in self._input_paused:
            client.resume_input()
        self._input_paused.clear()

    def resize(self, cols: int, rows: int) -> None:
        self.cols, self.rows = cols, rows
        if self.child is not None:
            resize_child(self.child, cols, rows)
        self._event("resized", {"cols": cols, "rows": rows})

    def send_signal(self, name: str, client: ClientConn) -> None:
        bare = wire.bare_signal(name)
        if bare is None:
            client.send_error("bad_signal", f"signal {name!r} is not one of {', '.join(wire.SIGNALS)}",
                              wire.FrameType.SIGNAL)
            return
        if self.child is None:
            client.send_error("not_running", "the child is not running", wire.FrameType.SIGNAL)
            return
        signum = signal.Signals["SIG" + bare]
        if signum in TERMINATING:
            self._requested_at = time.monotonic()
        self.log.write(f"signal {signum.name} to group {self.child.pid} from client {client.client_id}")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.child.pid, signum)

    async def respawn(self, spawn: wire.Spawn, client: ClientConn | None) -> None:
        """SPAWN: end the current child's tree (death confirmed), then start the new one.

        Serialised with other spawns: two SPAWNs in a row must not leave two children.
        """
        async with self._spawn_lock:
            if self._stop_requested:
                return
            problem = self._unspawnable(spawn)
            if problem is not None:  # refused before anything ends: the running child is left alone
                self.log.write(f"SPAWN refused: {problem}")
                if client is not None:
                    client.send_error("spawn_failed", problem, wire.FrameType.SPAWN)
                return
            await self._respawn(spawn, client)

    def _unspawnable(self, spawn: wire.Spawn) -> str | None:
        """Why this SPAWN's command cannot start (empty, not found, a bad cwd or variable), or None."""
        argv = self.child_argv if spawn.argv is None else list(spawn.argv)
        cwd = self.child_cwd if spawn.cwd is None else spawn.cwd
        env = self.child_env if spawn.env is None else dict(spawn.env)
        try:
            check_spawnable(argv, cwd, self._child_env(env))
        except (SpawnError, ValueError) as exc:
            return str(exc)
        return None

    async def _respawn(self, spawn: wire.Spawn, client: ClientConn | None) -> None:
        self._cancel_timers()
        self._requested_at = time.monotonic()
        self._replacing = True  # the old child's exit says state "starting": no notice, no husk timer
        try:
            await self._terminate_tree(self.config.grace)
            self._on_sigchld()
        finally:
            self._replacing = False
        self._cancel_timers()
        if spawn.argv is not None:
            self.child_argv = list(spawn.argv)
        if spawn.cwd is not None:
            self.child_cwd = spawn.cwd
        if spawn.env is not None:
            self.child_env = dict(spawn.env)
        if spawn.clear_ring:
            self.scrollback.clear()
        self.supervisor.reset()
        if self._stop_requested:
            return
        if not self._spawn(self.child_argv, self.child_cwd, self.child_env) and client is not None:
            client.send_error("spawn_failed", self.state_reason, wire.FrameType.SPAWN)
        self._write_record()

    async def _terminate_tree(self, grace: float) -> None:
        """SIGTERM the child's group and every descendant, wait ``grace``, SIGKILL, and confirm death.

        Without a cgroup, every process is pinned by a pidfd and only signalled if, after the pinning, it is
        still under a pinned parent of this shellper (shellper.host.reaper.OwnTree): a pid recycled since /proc
        listed it is never hit."""
        if self.cgroup is not None:
            await self._terminate_cgroup(self.cgroup, grace)
            return
        try:
            # A session started from inside this one is not part of it: its shellper ends its own tree.
            tree = OwnTree(spare=frozenset(live_shellpers()) - {self.pid})
        except (OSError, IdentityError) as exc:  # no pidfd to spare (EMFILE): a stop must not hang on it
            self.log.write(f"cannot pin the process tree, nothing signalled: {exc}")
            return
        try:
            self._pin_new(tree)
            if not tree.alive():
                return
            if self.child is not None:
                tree.signal_group(self.child.pid, signal.SIGCONT)
                tree.signal_group(self.child.pid, signal.SIGTERM)
            await self._signal_and_wait(tree.alive(), signal.SIGTERM, grace)
            # SIGKILL in rounds: a process forked between a round's scan and its parent's death is found
            # (re-parented to us, the subreaper) by the next. Each round's victims can fork no more.
            for _ in range(KILL_ROUNDS):
                self._pin_new(tree)
                if not tree.alive():
                    return
                await self._signal_and_wait(tree.alive(), signal.SIGKILL, 5.0)
            self._pin_new(tree)
            left = [fd.pid for fd in tree.alive()]
            if left:
                self.log.write(f"processes survived SIGKILL: {left}")
        finally:
            tree.close()

    async def _terminate_cgroup(self, group: SessionCgroup, grace: float) -> None:
        """SIGTERM every verified member of child/, wait ``grace`` for it to empty, then cgroup.kill."""
        if not group.populated(CHILD_SUB):
            self._on_sigchld()
            return
        group.signal_members(signal.SIGTERM, CHILD_SUB)
        group.signal_members(signal.SIGCONT, CHILD_SUB)
        if not await self._cgroup_emptied(group, grace):
            try:
                group.kill(CHILD_SUB)
            except CgroupError as exc:
                self.log.write(f"could not kill the child's cgroup: {exc}")
            if not await self._cgroup_emptied(group, 5.0):
                self.log.write(f"processes survived cgroup.kill: {group.procs(CHILD_SUB)}")
        self._on_sigchld()

    async def _cgroup_emptied(self, group: SessionCgroup, timeout: float) -> bool:
        """Wait until child/ holds no process (the kernel flags cgroup.events with POLLPRI) or ``timeout``."""
        deadline = time.monotonic() + timeout
        try:
            fd = os.open(group.events_path(CHILD_SUB), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return True
        try:
            while events_populated(os.pread(fd, 4096, 0).decode("ascii", "replace")):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                if not await self.loop.wait([self.loop.priority_readable(fd)], timeout=left):
                    self.loop.remove_reader(fd)
            return True
        finally:
            self.loop.forget_fd(fd)
            os.close(fd)

    def _pin_new(self, tree: OwnTree) -> None:
        try:
            tree.scan()
        except (OSError, IdentityError) as exc:  # what is pinned so far still gets the signals
            self.log.write(f"could not pin every descendant: {exc}")

    async def _signal_and_wait(self, members: list[PidFd], sig: int, timeout: float) -> None:
        """Signal pinned processes and wait, without blocking the loop, until they exit or ``timeout``."""
        waiters: list[Future[None]] = []
        for member in members:
            with contextlib.suppress(ProcessGone, PermissionError):
                member.send_signal(sig)
            waiters.append(self.loop.readable(member.fileno()))
        try:
            if waiters:
                await self.loop.wait(waiters, timeout=timeout)
        finally:
            for member in members:
                self.loop.remove_reader(member.fileno())
        self._on_sigchld()

    def _on_sigchld(self) -> None:
        """Reap every child (we are a subreaper: orphans of the session land here too)."""
        for pid, status in reap_children_nohang():
            if self.child is not None and pid == self.child.pid:
                self._child_gone(status)

    def _child_gone(self, status: int | None, requested: bool = False) -> None:
        child = self.child
        assert child is not None
        self._drain_child_output(child)
        self._cleanup_child_fds()
        self.child = None
        self._input.clear()  # meant for the child that is gone: the clients it held back may send again
        self._resume_input()
        now = time.monotonic()
        requested = requested or self._stop_requested or (now - self._requested_at) < REQUESTED_WINDOW
        tail = bytes(self.stderr_tail).decode("utf-8", "replace")
        evidence = ExitEvidence.from_wait_status(status, now - child.started_at, requested=requested,
                                                 stderr_tail=tail)
        self._handle_exit(evidence, child_pid=child.pid)

    def _handle_exit(self, evidence: ExitEvidence, child_pid: int | None) -> None:
        import random  # only here: keeps it out of the start-up path

        decision = self.supervisor.on_exit(evidence, time.monotonic(), random.random())
        if self._stop_requested:
            state = SessionState.STOPPING
        elif self._replacing:
            state = SessionState.STARTING
        else:
            state = _STATE_AFTER[decision.action]
        record = exit_record(evidence, decision, state=state, child_pid=child_pid, at=time.time(),
                             breaker=self.supervisor.snapshot())
        self.last_exit = record
        self.exits.append(record)
        self.exit_count += 1
        self.restarts = decision.restart_count
        self.log.write(f"child {child_pid} {describe_exit(evidence)}: {decision.classification.cls.value}; "
                       f"{decision.reason}")
        if state is SessionState.BACKOFF:
            self.next_restart_at = time.time() + decision.delay
        self.state, self.state_reason = state, decision.reason
        self._write_record()  # the exit is on disk before anyone hears of it
        exit_frame = wire.Exit.of(record)
        exit_bytes = wire.encode(exit_frame)
        for client in list(self.clients.values()):
            client.send_exit_at(self.scrollback.end, exit_bytes, exit_frame)
        self._event("exited", record.to_wire())
        if state is SessionState.BACKOFF:
            self._notice(f"child {describe_exit(evidence)}; restarting in {decision.delay:.2g} s "
                         f"(restart {decision.restart_count})")
            self._restart_handle = self.loop.call_later(decision.delay, self._restart_now)
            self._event("restart_scheduled", {"delay": decision.delay, "at": self.next_restart_at})
        elif state.ended:
            self._notice(f"child {describe_exit(evidence)}; {decision.reason}")
            if state is SessionState.FATAL:
                self._event("gave_up", {"reason": decision.reason})
            if self.config.husk_ttl is not None:
                self._husk_handle = self.loop.call_later(self.config.husk_ttl, self.request_stop)

    def _restart_now(self) -> None:
        self._restart_handle = None
        self.next_restart_at = None
        if self._stop_requested or self.child is not None:
            return
        self.loop.create_task(self._restart_task()).add_done_callback(self._child_task_done("restart"))

    def start_respawn(self, spawn: wire.Spawn, client: ClientConn | None) -> None:
        """SPAWN, in a task whose failure is never silent."""
        self.loop.create_task(self.respawn(spawn, client)).add_done_callback(self._child_task_done("SPAWN", client))

    def _child_task_done(self, what: str, client: ClientConn | None = None) -> Callable[[Future[None]], None]:
        """A restart or SPAWN that failed (a bug, an OS error) is said to the client that asked, and, if it
        left no child (the session in backoff or starting, nothing scheduled), makes the session fatal,
        saying why, for the Tower to SPAWN or STOP."""
        def done(task: Future[None]) -> None:
            error = task.exception()
            if error is None or self._stop_requested:
                return
            reason = f"{what} failed: {type(error).__name__}: {error}"
            self.log.write(reason)
            if client is not None:
                client.send_error("spawn_failed", reason, wire.FrameType.SPAWN)
            if self.child is not None:
                return
            self._cancel_timers()
            self._set_state(SessionState.FATAL, reason)
            self._notice(reason)
            self._event("gave_up", {"reason": reason})
        return done

    async def _restart_task(self) -> None:
        async with self._spawn_lock:  # a SPAWN may have started a child meanwhile
            if self._stop_requested or self.child is not None:
                return
            await self._terminate_tree(self.config.grace)  # leftovers of the old child would fight the new one
            if not self._stop_requested and self.child is None:
                self._spawn(self.child_argv, self.child_cwd, self.child_env)
                self._write_record()

    # ----------------------------------------------------------------------------------- clients

    def new_client_id(self) -> int:
        cid = self._next_client_id
        self._next_client_id += 1
        return cid

    def register(self, client: ClientConn) -> None:
        if client.role == "tower":
            old = self.tower
            if old is not None and old is not client:
                old.send_error("replaced", f"a new tower connection (client {client.client_id}) replaced this one",
                               None, fatal=True)
            self.tower = client
        self.clients[client.client_id] = client
        if client.role in ("tower", "terminal"):
            self.paced.append(client)
        self._event("client_attached", {"client_id": client.client_id, "role": client.role, "client": client.name})

    def unregister(self, client: ClientConn, reason: str) -> None:
        if self.clients.pop(client.client_id, None) is None:
            return
        if self.tower is client:
            self.tower = None
        if client in self.paced:
            self.paced.remove(client)
            self.pacer.on_progress()  # one fewer to wait for
        self._input_paused.discard(client)
        self._event("client_detached", {"client_id": client.client_id, "role": client.role, "reason": reason})

    def welcome(self, role: str, terminal: bool = False) -> wire.Welcome:
        return wire.Welcome(
            version=wire.PROTOCOL_VERSION, name=self.config.name, shellper_pid=self.pid,
            shellper_start_time=self.start_time, boot_id=self.boot_id, instance_id=self.instance_id,
            state=self.state, cols=self.cols, rows=self.rows, ring_start=self.scrollback.start,
            ring_end=self.scrollback.end, child_pid=self.child.pid if self.child else None,
            state_reason=self.state_reason, last_output_at=self.last_output_at,
            exit=self.last_exit.to_wire() if self.last_exit is not None else None, event_seq=self.event_seq,
            role=role, terminal=terminal or None)

    def status(self) -> wire.StatusReply:
        now = time.time()
        info: dict[str, Any] = {
            "name": self.config.name, "shellper_pid": self.pid, "instance_id": self.instance_id,
            "child_pid": self.child.pid if self.child else None,
            "child_uptime": round(time.monotonic() - self.child.started_at, 3) if self.child else None,
            "uptime": round(now - self.created_at, 3), "state_reason": self.state_reason,
            "argv": self.child_argv, "cwd": self.child_cwd, "cols": self.cols, "rows": self.rows,
            "ring_start": self.scrollback.start, "ring_end": self.scrollback.end,
            "ring_capacity": self.config.ring_bytes, "last_output_at": self.last_output_at,
            "exit_count": self.exit_count, "restarts": self.restarts,
            "last_exit": self.last_exit.to_wire() if self.last_exit is not None else None,
            "next_restart_at": self.next_restart_at, "event_seq": self.event_seq,
            "clients": [c.describe() for c in self.clients.values()],
            "record_error": self.record_error, "output_held": self.pacer.holding,
            "owner": self.owner, "containment": self.containment,
            "cgroup": self.cgroup.path if self.cgroup is not None else None,
        }
        return wire.StatusReply(state=self.state, info=info)

    def events_after(self, seq: int) -> list[wire.Event]:
        held = [e for e in self.events if e.seq > seq]
        first_held = self.events[0].seq if self.events else self.event_seq + 1
        if seq + 1 < first_held and seq < self.event_seq:
            missed = wire.Event(seq=0, kind="events_missed", time=time.time(),
                                data={"from": seq + 1, "to": first_held - 1})
            return [missed, *held]
        return held

    def _event(self, kind: str, data: dict[str, Any]) -> None:
        self.event_seq += 1
        event = wire.Event(seq=self.event_seq, kind=kind, time=time.time(), data=data)
        self.events.append(event)
        frame = wire.encode(event)
        for client in self.clients.values():
            if client.wants_events:
                client.send_control_at(self.scrollback.end, frame)

    def _set_state(self, state: SessionState, reason: str) -> None:
        self.state, self.state_reason = state, reason
        self._write_record()

    def _write_record(self) -> None:
        if self._lock is None:  # stopped: the files are gone for good
            return
        if not self._lock_file_is_ours():
            # Displaced (our files were removed; another shellper may own the name now): this identity must
            # not replace whatever record is at the path.
            problem = (f"not writing {self.paths.record}: {self.paths.lock} is not the lock this shellper "
                       "holds (removed, or another shellper has the name); its files are left alone")
            if self.record_error != problem:
                self.log.write(problem)
            self.record_error = problem
            return
        child = self.child
        record = SessionRecord(
            name=self.config.name, boot_id=self.boot_id, shellper_pid=self.pid,
            shellper_start_time=self.start_time, instance_id=self.instance_id, shellper_pgid=self._pgid,
            shellper_sid=self._sid, cmdline_sha256=self._cmdline_sha256,
            child_pid=child.pid if child else None, child_pgid=child.pid if child else None,
            child_start_time=child.start_time if child else None, command=self.child_argv, cwd=self.child_cwd,
            socket=str(self.paths.socket), state=self.state, state_reason=self.state_reason,
            created_at=self.created_at, last_exit_at=self.last_exit.time if self.last_exit is not None else None,
            next_restart_at=self.next_restart_at, exits=list(self.exits), exit_count=self.exit_count,
            restarts=self.restarts, breaker=self.supervisor.snapshot(), ring_bytes=self.config.ring_bytes,
            stderr_mode=resolve_stderr_mode(self.config.stderr_mode, self.child_argv), version=__version__,
            owner=self.owner, containment=self.containment,
            cgroup=self.cgroup.path if self.cgroup is not None else None, cgroup_id=self._cgroup_id)
        try:
            write_record(self.paths.record, record)
        except (OSError, RecordError) as exc:  # disk full, directory removed: keep serving, say so
            if self.record_error is None:
                self.log.write(f"could not write record {self.paths.record}: {exc}")
            self.record_error = str(exc)
        else:
            if self.record_error is not None:
                self.log.write(f"record written again after: {self.record_error}")
            self.record_error = None


def serve(config: SessionConfig, paths: SessionPaths, log: LogFile,
          on_ready: Callable[[dict[str, Any]], None]) -> int:
    """Run a session until it stops. ``on_ready`` gets the info line once the socket accepts."""
    loop = Reactor()

    def report(exc: BaseException) -> None:  # a bug in one callback must not take the session down
        import traceback  # only on this path: it costs start-up ~4 ms

        log.write(f"internal error: {type(exc).__name__}: {exc}\n{''.join(traceback.format_exception(exc))}")

    loop.on_error = report
    try:
        session = Session(config, paths, log, loop)
        session.start()
        on_ready(session.info_line())
        loop.call_soon(session.join_own_cgroup)
        loop.run()
    finally:
        loop.close()
    return 1 if session.stop_error is not None else 0
