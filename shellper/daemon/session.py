"""The session: one shellper's child, output, clients and record, wired together on one event loop.

Everything that happens is a reaction to a file descriptor or a signal (PTY readable, socket readable,
SIGCHLD, SIGTERM, SIGUSR1); the loop holds no periodic timer, so an idle session costs nothing. Timers are
one-shot and exist only while something is pending: a connection's handshake deadline and a closed
connection's linger (shellper.daemon.clientconn), a scheduled restart and a husk's time-to-live
(shellper.daemon.lifecycle), the stall check while output is held (shellper.daemon.pacing), and the
deadlines of ending a tree (shellper.daemon.tree) and of a stop's last frames to its clients (here).

The parts, one job each: :class:`~shellper.daemon.lifecycle.Lifecycle` (the child: spawn, exits,
restarts, SPAWN, signals), :class:`~shellper.daemon.tree.SessionTree` (containment, ending the tree),
:class:`~shellper.daemon.output.Output` (PTY to ring to clients, with pacing),
:class:`~shellper.daemon.inputqueue.InputQueue` (clients to PTY),
:class:`~shellper.daemon.registry.ClientRegistry` (who is connected),
:class:`~shellper.daemon.journal.Journal` (state, events, the record and its lock) and
:class:`~shellper.daemon.files.SessionFiles` (the socket and the session's files). :class:`Session` wires
them, starts and stops them in order, and is the one object a connection talks to
(shellper.daemon.clientconn.SessionPort).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable

from shellper import __version__
from shellper.core.config import SessionConfig, resolve_stderr_mode
from shellper.core.owner import default_owner
from shellper.core.peertext import quote_peer
from shellper.daemon.clientconn import ClientConn
from shellper.daemon.files import SessionFiles
from shellper.daemon.inputqueue import InputQueue
from shellper.daemon.journal import Journal
from shellper.daemon.lifecycle import Lifecycle
from shellper.daemon.output import Output
from shellper.daemon.reactor import Future, Reactor
from shellper.daemon.registry import ClientRegistry
from shellper.daemon.tree import OwnerRemains, SessionTree
from shellper.host.identity import boot_id, start_time
from shellper.host.logfile import LogFile
from shellper.host.paths import SessionPaths, unlink_if_socket
from shellper.host.reaper import SurvivorError, set_child_subreaper
from shellper.host.record import SessionRecord, cmdline_sha256, new_instance_id
from shellper.host.shellstate import foreground_cwd
from shellper.protocol import wire

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import Any

    from shellper.core.exitrecord import ExitRecord
    from shellper.daemon.legacyconn import LegacyCodec


def _legacy_codec() -> type[LegacyCodec]:
    # Imported on a version-1 client's first frame: most sessions never see one (bench/NOTES.md, "Lazy imports").
    from shellper.daemon.legacyconn import LegacyCodec

    return LegacyCodec


WORKDIR_SCAN = 64 * 1024
"""Output searched back for the shell's last OSC 7 (a prompt writes one); older than that, the kernel says."""


class Session:
    """Who this shellper is, its parts, its socket and files; what its connections may ask of it."""

    def __init__(self, config: SessionConfig, paths: SessionPaths, log: LogFile, loop: Reactor) -> None:
        self.config = config
        self.paths = paths
        self.log = log
        self.loop = loop
        self.instance_id = new_instance_id()
        self.boot_id = boot_id()
        self.pid = os.getpid()
        self.start_time = start_time(self.pid) or 0
        self._pgid, self._sid = os.getpgid(0), os.getsid(0)
        self._cmdline_sha256 = cmdline_sha256()
        self.owner = config.owner or default_owner()
        self.created_at = time.time()
        self.labels: dict[str, str] = {}
        """shellper set's labels (shellper.core.labels), kept in the record."""
        clients: dict[int, ClientConn] = {}
        self.output = Output(loop, log, config.ring_bytes, clients)
        self.scrollback = self.output.scrollback
        self.input = InputQueue(loop, log)
        self.registry = ClientRegistry(clients, self.output, self.input)
        self.journal = Journal(paths, log, describe=self._describe, publish=self.registry.send_event)
        self.tree = SessionTree(loop, log, config, paths, self.owner, self.instance_id)
        self.lifecycle = Lifecycle(loop, log, config, self.instance_id, output=self.output, input_queue=self.input,
                                   registry=self.registry, journal=self.journal, tree=self.tree,
                                   request_stop=self.request_stop)
        self.files = SessionFiles(loop, log, paths, config.name, self.journal,
                                  lambda: ClientConn(self, load_legacy=_legacy_codec))
        self.output.screen.resize(self.lifecycle.cols, self.lifecycle.rows)
        self.stop_error: str | None = None
        """Why the stop failed, if it did: the session was ended anyway, and serve() returns 1."""
        self._stop_waiters: list[tuple[ClientConn, int]] = []
        """STOPs with an id (version 3), answered once the tree has ended, before the connections close."""
        self._stopped_child: int | None = None

    # ----------------------------------------------------------------------------------- start and stop

    def start(self, *, as_original: bool = False) -> None:
        """Lock, spawn the first child, listen. Raises (and cleans up) if any step fails.

        ``as_original`` (legacy-main): a first command that cannot start is the child's exit, as the
        original's (node-pty's exec fails in the forked child), not a failed start; and the log, the file the
        Tower opened as our stderr, is the Tower's: never removed."""
        self.journal.take_lock(self.config.name)
        try:
            self.tree.end_previous()
            unlink_if_socket(self.paths.socket)  # stale: the lock says nobody owns it
            with contextlib.suppress(OSError):
                set_child_subreaper()
            self.tree.contain()
            self.lifecycle.spawn_first(may_fail=as_original)
            self.files.listen()
        except BaseException as exc:
            child = self.lifecycle.child
            self.lifecycle.close_child()
            self.tree.kill_at_once(child.pid if child is not None else None)
            if isinstance(exc, OwnerRemains):  # the record is that owner's only way to its processes: kept
                self.journal.release_lock()
            else:
                self.files.remove(keep_log=as_original)  # a session that never started leaves nothing behind
            self.tree.release()
            raise
        self.loop.add_signal_handler(signal.SIGCHLD, self.lifecycle.reap)
        self.loop.add_signal_handler(signal.SIGTERM, self.request_stop)
        self.loop.add_signal_handler(signal.SIGINT, self.request_stop)
        self.loop.add_signal_handler(signal.SIGHUP, lambda: None)
        self.loop.add_signal_handler(signal.SIGUSR1, self.files.repair)
        self.log.write(f"shellper {__version__} started: pid={self.pid} session={self.config.name} "
                       f"socket={self.paths.socket}")
        self.lifecycle.reap()  # a child that died before the handler existed (its exit writes the record)

    def info_line(self) -> dict[str, Any]:
        """What the launcher prints once the socket accepts connections."""
        child = self.lifecycle.child
        return {
            "name": self.config.name, "shellper_pid": self.pid, "shellper_start_time": self.start_time,
            "pid": self.pid, "start_time": self.start_time, "boot_id": self.boot_id,  # the names before WELCOME's
            "instance_id": self.instance_id, "child_pid": child.pid if child else None,
            "owner": self.owner, "containment": self.tree.containment,
            "socket": str(self.paths.socket), "record": str(self.paths.record), "log": str(self.paths.log),
        }

    def request_stop(self, grace: float | None = None) -> None:
        if not self.lifecycle.begin_stop():
            return
        child = self.lifecycle.child
        self._stopped_child = child.pid if child is not None else None
        stop = self.loop.create_task(self._stop(self.config.grace if grace is None else grace))
        stop.add_done_callback(self._after_stop)

    def stop_for(self, client: ClientConn, rid: int | None, grace: float | None) -> None:
        """A client's STOP: with an id, answered once the tree has ended (a STOP during a stop joins it)."""
        if rid is not None:
            self._stop_waiters.append((client, rid))
        self.request_stop(grace)

    def _answer_stops(self, code: str | None, message: str = "") -> None:
        waiters, self._stop_waiters = self._stop_waiters, []
        for client, rid in waiters:
            if code is None:
                client.answer(wire.FrameType.STOP, rid, {"child_pid": self._stopped_child}, queued=True)
            else:
                client.refuse(wire.FrameType.STOP, rid, code, message, queued=True)

    @property
    def stopping(self) -> bool:
        return self.lifecycle.stop_requested

    def _after_stop(self, stop: Future[None]) -> None:
        """A stop that failed still ends the session: a shellper stuck in ``stopping`` would keep its name
        and its processes, answer nobody and never exit. Its log stays, to say why."""
        error = stop.exception()
        if error is None:
            return
        if isinstance(error, SurvivorError):  # the pids named, a bounded few: a fork bomb leaves hundreds
            shown = ", ".join(map(str, error.pids[:20])) + (", ..." if len(error.pids) > 20 else "")
            self.stop_error = f"{len(error.pids)} process(es) survived SIGKILL: {shown}"
            self._answer_stops("internal", f"stop failed: {self.stop_error}; the record is kept, to find them by")
        else:
            self.stop_error = f"{type(error).__name__}: {error}"
            self._answer_stops("internal", f"stop failed ({self.stop_error}); the session is ended anyway")
        self.log.write(f"stop failed ({self.stop_error}): ending the session anyway; its log is kept")
        ending = self.loop.create_task(self._end_after_failed_stop(stop))
        ending.add_done_callback(lambda _: self.loop.stop())

    async def _end_after_failed_stop(self, stop: Future[None] | None = None) -> None:
        """What a stop must not skip, each step on its own: the child's tree (SIGKILL now: the grace may
        have passed already), the cgroup, the files."""
        left: tuple[int, ...] = ()
        try:
            # Survivors of the stop's own freezing and killing: another round would only double the wait.
            known = stop.exception() if stop is not None else None
            if isinstance(known, SurvivorError):
                left = known.pids
            else:
                left = await self.lifecycle.terminate_tree(0.0)
        except Exception as exc:
            left = (-1,)  # unknown: kept as if something survived
            self.log.write(f"could not end the session's processes: {type(exc).__name__}: {exc}")
        self.tree.release()  # never raises: says in the log what it could not do
        if left:
            self.log.write("the record is kept: a reconcile (or `shellper stop NAME`) finds what survived by it")
        try:
            self.files.remove(keep_log=True, keep_record=bool(left))
        except Exception as exc:
            self.log.write(f"could not remove the session's files: {type(exc).__name__}: {exc}")
        self.log.write("stopped after a failed stop")

    async def _stop(self, grace: float) -> None:
        await self.lifecycle.stop_child(grace)
        self._answer_stops(None)
        closing = self.registry.close_all()
        if closing:  # let the last frames (EXIT) reach the clients; a stuck one does not hold us up
            await self.loop.wait(closing, timeout=2.0)
        self.files.close()
        self.log.write("stopped")
        self.tree.release()  # before the record that names it
        self.files.remove(keep_log=False, retire_log=True)
        self.loop.stop()

    # ----------------------------------------------------------------------------------- the record

    def _describe(self) -> SessionRecord:
        """The record as it should read now (shellper.daemon.journal writes it)."""
        life, tree = self.lifecycle, self.tree
        child = life.child
        return SessionRecord(
            name=self.config.name, boot_id=self.boot_id, shellper_pid=self.pid,
            shellper_start_time=self.start_time, instance_id=self.instance_id, shellper_pgid=self._pgid,
            shellper_sid=self._sid, cmdline_sha256=self._cmdline_sha256,
            child_pid=child.pid if child else None, child_pgid=child.pid if child else None,
            child_start_time=child.start_time if child else None, command=life.child_argv, cwd=life.child_cwd,
            socket=str(self.paths.socket), state=self.journal.state, state_reason=self.journal.state_reason,
            created_at=self.created_at, last_exit_at=life.last_exit.time if life.last_exit is not None else None,
            next_restart_at=life.next_restart_at, exits=list(life.exits), exit_count=life.exit_count,
            restarts=life.restarts, breaker=life.supervisor.snapshot(), ring_bytes=self.config.ring_bytes,
            stderr_mode=resolve_stderr_mode(self.config.stderr_mode), version=__version__,
            owner=self.owner, containment=tree.containment,
            cgroup=tree.cgroup.path if tree.cgroup is not None else None, cgroup_id=tree.cgroup_id,
            labels=dict(self.labels))

    # ----------------------------------------------------------------------------------- for connections

    @property
    def handshake_timeout(self) -> float:
        return self.config.handshake_timeout

    @property
    def frame_timeout(self) -> float:
        return self.config.frame_timeout

    @property
    def max_unread_bytes(self) -> int:
        return self.config.max_unread_bytes

    def hold_partial(self, delta: int) -> bool:
        return self.registry.hold_partial(delta)

    @property
    def cols(self) -> int:
        return self.lifecycle.cols

    @property
    def rows(self) -> int:
        return self.lifecycle.rows

    def admit(self, client: ClientConn) -> bool:
        return self.registry.admit(client)

    def new_client_id(self) -> int:
        return self.registry.new_client_id()

    def register(self, client: ClientConn) -> None:
        self.registry.register(client)
        self.log.write(f"client {client.client_id} attached: {client.role}, pid {client.peer_pid} "
                       f"({quote_peer(client.name)})")
        self.journal.event("client_attached", {"client_id": client.client_id, "role": client.role,
                                               "client": client.name})

    def disconnect(self, client: ClientConn, reason: str) -> None:
        if self.registry.remove(client):
            self.log.write(f"client {client.client_id} detached: {client.role}, pid {client.peer_pid} ({reason})")
            self.journal.event("client_detached", {"client_id": client.client_id, "role": client.role,
                                                   "reason": reason})

    def welcome(self, role: str, terminal: bool = False) -> wire.Welcome:
        life, last = self.lifecycle, self.lifecycle.last_exit
        return wire.Welcome(
            version=wire.PROTOCOL_VERSION, name=self.config.name, shellper_pid=self.pid,
            shellper_start_time=self.start_time, boot_id=self.boot_id, instance_id=self.instance_id,
            state=self.journal.state, cols=life.cols, rows=life.rows, ring_start=self.scrollback.start,
            ring_end=self.scrollback.end, child_pid=life.child.pid if life.child else None,
            state_reason=self.journal.state_reason, last_output_at=self.output.last_output_at,
            exit=last.to_wire() if last is not None else None, event_seq=self.journal.event_seq,
            role=role, terminal=terminal or None)

    def ended_exit(self) -> ExitRecord | None:
        """The last exit while no child runs (what a client attaching now is told); None while one does."""
        return self.lifecycle.last_exit if self.lifecycle.child is None else None

    def status(self) -> wire.StatusReply:
        now = time.time()
        life, journal, tree = self.lifecycle, self.journal, self.tree
        child, last = life.child, life.last_exit
        info: dict[str, Any] = {
            "name": self.config.name, "shellper_pid": self.pid, "instance_id": self.instance_id,
            "child_pid": child.pid if child else None,
            "child_uptime": round(time.monotonic() - child.started_at, 3) if child else None,
            "uptime": round(now - self.created_at, 3), "state_reason": journal.state_reason,
            "argv": life.child_argv, "cwd": life.child_cwd, "cols": life.cols, "rows": life.rows,
            "ring_start": self.scrollback.start, "ring_end": self.scrollback.end,
            "ring_capacity": self.config.ring_bytes, "last_output_at": self.output.last_output_at,
            "exit_count": life.exit_count, "restarts": life.restarts,
            "last_exit": last.to_wire() if last is not None else None,
            "next_restart_at": life.next_restart_at, "event_seq": journal.event_seq,
            "clients": self.registry.describe(),
            "record_error": journal.record_error, "output_held": self.output.pacer.holding,
            "owner": self.owner, "containment": tree.containment,
            "cgroup": tree.cgroup.path if tree.cgroup is not None else None,
            "labels": dict(self.labels),
        }
        info["working_dir"], info["working_dir_from"] = self._working_dir()
        return wire.StatusReply(state=journal.state, info=info)

    def _working_dir(self) -> tuple[str | None, str | None]:
        """Where the running child is now, and how that is known: the last OSC 7 its shell wrote (``osc7``;
        ``HOST:PATH`` when it names another host), else the kernel's word (``proc``, shellper.host.shellstate)."""
        child = self.lifecycle.child
        if child is None:
            return None, None
        ring = self.scrollback
        tail = ring.read(max(ring.start, ring.end - WORKDIR_SCAN), WORKDIR_SCAN).data
        announced = None
        if b"7;" in tail:  # the parser (the screen model's) is loaded only for a shell that may have announced
            from shellper.core.terminal.workdir import last_announced

            announced = last_announced(tail)
        if announced is not None:
            here = announced.host in ("", "localhost", os.uname().nodename)
            return (announced.path if here else f"{announced.host}:{announced.path}"), "osc7"
        path = foreground_cwd(child.pid, child.master_fd)
        return path, "proc" if path is not None else None

    def events_after(self, seq: int) -> list[wire.Event]:
        return self.journal.events_after(seq)

    @property
    def event_seq(self) -> int:
        """The last numbered event's seq (0: none yet)."""
        return self.journal.event_seq

    def write_input(self, data: bytes, client: ClientConn) -> None:
        self.input.write(data, client)

    def screen_reply(self, request: wire.ScreenRequest) -> wire.ScreenReply:
        return self.output.screen.reply(request)

    def set_labels(self, changes: dict[str, str]) -> dict[str, str]:
        """A LABELS request: the labels changed (all or none: BadLabel) and the record written; the labels now."""
        from shellper.core.labels import apply_changes

        self.labels = apply_changes(self.labels, changes)
        self.log.write(f"labels set: {', '.join(f'{k}={v}' for k, v in sorted(changes.items()))}")
        self.journal.write_record()
        return dict(self.labels)

    def rendered_replay(self, scrollback: int, limit: int | None = None) -> bytes:
        return self.output.screen.rendered(scrollback, limit)

    def resize(self, cols: int, rows: int) -> None:
        self.output.screen.resize(cols, rows)
        self.lifecycle.resize(cols, rows)

    def send_signal(self, name: str, client: ClientConn, rid: int | None = None) -> None:
        self.lifecycle.send_signal(name, client, rid)

    def start_respawn(self, spawn: wire.Spawn, client: ClientConn | None, *, checked: bool = True) -> None:
        self.lifecycle.start_respawn(spawn, client, checked=checked)

    def output_taken(self) -> None:
        """A paced client took output: output held for it may flow again (shellper.daemon.pacing)."""
        self.output.pacer.on_progress()


def serve(config: SessionConfig, paths: SessionPaths, log: LogFile,
          on_ready: Callable[[dict[str, Any]], None]) -> int:
    """Run a session until it stops. ``on_ready`` gets the info line once the socket accepts."""
    loop = Reactor()

    def report(exc: BaseException) -> None:  # a bug in one callback must not take the session down
        import traceback  # only here: it costs start-up (bench/NOTES.md, "Start-up: what the avoided imports cost")

        log.write(f"internal error: {type(exc).__name__}: {exc}\n{''.join(traceback.format_exception(exc))}")

    loop.on_error = report
    try:
        session = Session(config, paths, log, loop)
        session.journal.defer_sync()  # the record's fsyncs wait until the caller has its answer
        session.start()
        on_ready(session.info_line())
        loop.call_soon(session.journal.sync)
        loop.call_soon(session.tree.join)
        loop.run()
    finally:
        loop.close()
    return 1 if session.stop_error is not None else 0
