"""The child's life: spawned, reaped (this shellper is a subreaper), its exit classified, restarted after a
backoff or not (shellper.core.exits.Supervisor), replaced on SPAWN, signalled on SIGNAL, ended on STOP."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import deque

from shellper.core.config import resolve_stderr_mode
from shellper.core.exits import ExitEvidence, RestartAction, Supervisor, describe_exit, exit_record
from shellper.core.signals import signal_name, signal_number
from shellper.core.states import SessionState
from shellper.daemon.reactor import Lock
from shellper.host.cgroup import CgroupError
from shellper.host.child import SpawnError, build_env, check_spawnable, spawn_child
from shellper.host.child import resize as resize_child
from shellper.host.reaper import SurvivorError, reap_children_nohang
from shellper.host.record import MAX_EXITS
from shellper.protocol import wire

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable

    from shellper.core.config import SessionConfig
    from shellper.core.exitrecord import ExitRecord
    from shellper.daemon.clientconn import ClientConn
    from shellper.daemon.inputqueue import InputQueue
    from shellper.daemon.journal import Journal
    from shellper.daemon.output import Output
    from shellper.daemon.reactor import Future, Handle, Reactor
    from shellper.daemon.registry import ClientRegistry
    from shellper.daemon.tree import SessionTree
    from shellper.host.child import Child
    from shellper.host.logfile import LogFile

REQUESTED_WINDOW = 10.0
"""An exit of the child a client's terminating SIGNAL (or a SPAWN, a STOP) was sent to, within this many
seconds of it, counts as requested. Only that child's: a SPAWN's new child that exits on its own is not."""
_STATE_AFTER = {RestartAction.RESTART: SessionState.BACKOFF, RestartAction.EXITED: SessionState.EXITED,
                RestartAction.FATAL: SessionState.FATAL}
TERMINATING = {signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGKILL}


class Lifecycle:
    """Holds the current child, its command and size, and the exits so far; decides what follows each exit."""

    def __init__(self, loop: Reactor, log: LogFile, config: SessionConfig, instance_id: str, *, output: Output,
                 input_queue: InputQueue, registry: ClientRegistry, journal: Journal, tree: SessionTree,
                 request_stop: Callable[[], None]) -> None:
        self.loop = loop
        self.log = log
        self.config = config
        self.instance_id = instance_id
        self.output = output
        self.input = input_queue
        self.registry = registry
        self.journal = journal
        self.tree = tree
        self._request_stop = request_stop
        """Ends the session: what a husk does when its time-to-live is up."""
        self.supervisor = Supervisor(config.policy)
        self.child: Child | None = None
        self.child_argv = list(config.argv)
        self.child_cwd = config.cwd
        self.child_env = dict(config.env)
        self.cols, self.rows = config.cols, config.rows
        self.last_exit: ExitRecord | None = None
        self.exits: deque[ExitRecord] = deque(maxlen=MAX_EXITS)
        self.exit_count = 0
        self.restarts = 0
        self.next_restart_at: float | None = None
        self.stop_requested = False
        """A STOP (or SIGTERM) is ending the session: nothing restarts or spawns any more."""
        self._restart_handle: Handle | None = None
        self._husk_handle: Handle | None = None
        self._requested_at = 0.0
        self._requested_pid: int | None = None
        """The child a request to end was aimed at (``_requested_at``): only its exit counts as requested."""
        self._replacing = False
        self._spawn_lock = Lock()
        self.on_exit: Callable[[ExitRecord], None] | None = None
        """Told of each exit once it is recorded (legacy-main logs the original's "PTY exited" line)."""

    # ----------------------------------------------------------------------------------- spawning

    def spawn_first(self, *, may_fail: bool = False) -> None:
        """Start the session's first child; raises if it cannot start (the session does not either), unless
        ``may_fail``: then that is the child's exit, and the session goes on without one."""
        self._spawn(self.child_argv, self.child_cwd, self.child_env, first=not may_fail)

    def _child_env(self, env: dict[str, str]) -> dict[str, str]:
        # SHELLPER_INSTANCE marks the whole tree: what outlives a killed shellper can be found (shellper.host.survivors)
        return build_env(env, {"SHELLPER_SESSION": self.config.name, "SHELLPER_INSTANCE": self.instance_id},
                         self.config.term, inherit=True)

    def _spawn(self, argv: list[str], cwd: str, env: dict[str, str], *, first: bool = False) -> bool:
        """Start a child; on exec failure either raise (first start) or treat it as a permanent exit."""
        full_env = self._child_env(env)
        join_fd = -1
        try:
            join_fd = self.tree.child_procs_fd()
            child = spawn_child(argv, cwd=cwd, env=full_env, cols=self.cols, rows=self.rows,
                                stderr_mode=resolve_stderr_mode(self.config.stderr_mode),
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
        self.input.attach(child)
        self.output.attach(child)
        self.journal.set_state(SessionState.RUNNING, "", announce=False)
        # The program, not its arguments: a log outlives the process (logs/, 7 days), and arguments can
        # carry secrets (--api-key), which `ps` shows only while the child runs; the record has the command.
        self.log.write(f"spawned pid={child.pid}: {argv[0]!r:.200} with {len(argv) - 1} arguments")
        self.journal.event("spawned", {"child_pid": child.pid, "argv": argv})
        self.journal.announce_state()
        return True

    def close_child(self) -> None:
        """Stop reading and writing the child's descriptors, and close them."""
        self.output.detach()
        self.input.detach()
        if self.child is not None:
            self.child.close()

    # ----------------------------------------------------------------------------------- its exit

    def reap(self) -> None:
        """Reap every child (we are a subreaper: orphans of the session land here too)."""
        for pid, status in reap_children_nohang():
            if self.child is not None and pid == self.child.pid:
                self._child_gone(status)

    def _child_gone(self, status: int | None, requested: bool = False) -> None:
        child = self.child
        assert child is not None
        self.output.drain(child)
        self.close_child()  # the input meant for it is dropped: the clients it held back may send again
        self.child = None
        now = time.monotonic()
        requested = requested or self.stop_requested or (
            child.pid == self._requested_pid and now - self._requested_at < REQUESTED_WINDOW)
        evidence = ExitEvidence.from_wait_status(status, now - child.started_at, requested=requested,
                                                 stderr_tail=self.output.exit_evidence())
        self._handle_exit(evidence, child_pid=child.pid)

    def _handle_exit(self, evidence: ExitEvidence, child_pid: int | None) -> None:
        import random  # only here: keeps it out of the start-up path

        decision = self.supervisor.on_exit(evidence, time.monotonic(), random.random())
        if self.stop_requested:
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
        self.log.write(f"child {child_pid} {describe_exit(evidence)}: {decision.classification.exit_class.value}; "
                       f"{decision.reason}")
        if self.on_exit is not None:
            self.on_exit(record)
        if state is SessionState.BACKOFF:
            self.next_restart_at = time.time() + decision.delay
        details = {"restart_at": self.next_restart_at} if state is SessionState.BACKOFF else None
        # the exit is on disk before anyone hears of it; its state event follows the exit's
        reason = record.reason if state is SessionState.STARTING else decision.reason  # a SPAWN: not "not restarted"
        self.journal.set_state(state, reason, announce=False, details=details)
        exit_frame = wire.Exit.of(record)
        self.registry.send_exit(wire.encode(exit_frame), exit_frame)
        self.journal.event("exited", record.to_wire())
        self.journal.announce_state()
        if state is SessionState.BACKOFF:
            self._note(f"child {describe_exit(evidence)}; restarting in {decision.delay:.2g} s "
                               f"(restart {decision.restart_count})")
            self._restart_handle = self.loop.call_later(decision.delay, self._restart_now)
            self.journal.event("restart_scheduled", {"delay": decision.delay, "at": self.next_restart_at})
        elif state.ended:
            self._note(f"child {describe_exit(evidence)}; {decision.reason}")
            if state is SessionState.FATAL:
                self.journal.event("gave_up", {"reason": decision.reason})
            if self.config.husk_ttl is not None:
                self.log.write(f"husk: the session stops itself in {self.config.husk_ttl:g} s (husk_ttl) unless "
                               "a SPAWN or STOP comes first")
                self._husk_handle = self.loop.call_later(self.config.husk_ttl, self._husk_expired)
            else:
                self.log.write("husk: the session stays until a SPAWN or STOP (no husk_ttl)")

    def _note(self, text: str) -> None:
        """A note of the shellper's own into the output stream, and the EVENT that says which bytes it took,
        so a client can tell them from the child's (PROTOCOL.md 8.5)."""
        where = self.output.notice(text)
        if where is not None:
            self.journal.event(wire.NOTE_EVENT, {"offset": where[0], "length": where[1], "text": text})

    def _husk_expired(self) -> None:
        self._husk_handle = None
        self.log.write(f"husk: {self.config.husk_ttl:g} s (husk_ttl) since the child ended: stopping")
        self._request_stop()

    # ----------------------------------------------------------------------------------- restarts and SPAWN

    def _restart_now(self) -> None:
        self._restart_handle = None
        self.next_restart_at = None
        if self.stop_requested or self.child is not None:
            return
        self.loop.create_task(self._restart_task()).add_done_callback(self._child_task_done("restart"))

    def start_respawn(self, spawn: wire.Spawn, client: ClientConn | None, *, checked: bool = True) -> None:
        """SPAWN, in a task whose failure is never silent."""
        self.loop.create_task(self.respawn(spawn, client, checked=checked)).add_done_callback(
            self._child_task_done("SPAWN", client, spawn.id))

    def _child_task_done(self, what: str, client: ClientConn | None = None,
                         rid: int | None = None) -> Callable[[Future[None]], None]:
        """A restart or SPAWN that failed (a bug, an OS error) is said to the client that asked, and, if it
        left no child (the session in backoff or starting, nothing scheduled), makes the session fatal,
        saying why, for the Tower to SPAWN or STOP."""
        def done(task: Future[None]) -> None:
            error = task.exception()
            if error is not None and client is not None and rid is not None and self.stop_requested:
                client.refuse(wire.FrameType.SPAWN, rid, "stopping", "the session is stopping", queued=True)
            if error is None or self.stop_requested:
                return
            reason = f"{what} failed: {type(error).__name__}: {error}"
            self.log.write(reason)
            if client is not None:
                client.refuse(wire.FrameType.SPAWN, rid, "spawn_failed", reason, queued=True)
            if self.child is not None:
                return
            self._cancel_timers()
            self.journal.set_state(SessionState.FATAL, reason)
            self._note(reason)
            self.journal.event("gave_up", {"reason": reason})
        return done

    async def _restart_task(self) -> None:
        async with self._spawn_lock:  # a SPAWN may have started a child meanwhile
            if self.stop_requested or self.child is not None:
                return
            await self.terminate_tree(self.config.grace)  # leftovers of the old child would fight the new one
            if not self.stop_requested and self.child is None:
                self._spawn(self.child_argv, self.child_cwd, self.child_env)
                self.journal.write_record()

    async def respawn(self, spawn: wire.Spawn, client: ClientConn | None, *, checked: bool = True) -> None:
        """SPAWN: end the current child's tree (death confirmed), then start the new one. The client that
        asked is answered (with a REPLY if the SPAWN had an id; a failure of the task itself is answered
        by _child_task_done).

        ``checked``: a command that cannot start is refused before anything ends. Unchecked (a version-1
        SPAWN, as the original's node-pty did), the old child is ended all the same and the failure is the
        new child's exit.

        Serialised with other spawns: two SPAWNs in a row must not leave two children.
        """
        async with self._spawn_lock:
            if self.stop_requested:
                if client is not None and spawn.id is not None:
                    client.refuse(wire.FrameType.SPAWN, spawn.id, "stopping", "the session is stopping", queued=True)
                return
            problem = self._unspawnable(spawn) if checked else None
            if problem is not None:  # refused before anything ends: the running child is left alone
                self.log.write(f"SPAWN refused: {problem}")
                if client is not None:
                    client.refuse(wire.FrameType.SPAWN, spawn.id, "spawn_failed", problem, queued=True)
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
        self._mark_requested()
        self._replacing = True  # the old child's exit says state "starting": no notice, no husk timer
        try:
            await self.terminate_tree(self.config.grace)
            self.reap()
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
            self.output.scrollback.clear()
        self.supervisor.reset()
        if self.stop_requested:
            if client is not None and spawn.id is not None:
                client.refuse(wire.FrameType.SPAWN, spawn.id, "stopping", "the session is stopping", queued=True)
            return
        started = self._spawn(self.child_argv, self.child_cwd, self.child_env)
        self.journal.write_record()
        if client is None:
            return
        if started and self.child is not None:
            client.answer(wire.FrameType.SPAWN, spawn.id, {"child_pid": self.child.pid, "argv": self.child_argv},
                          queued=True)
        else:
            client.refuse(wire.FrameType.SPAWN, spawn.id, "spawn_failed", self.journal.state_reason, queued=True)

    def _cancel_timers(self) -> None:
        for handle in (self._restart_handle, self._husk_handle):
            if handle is not None:
                handle.cancel()
        self._restart_handle = self._husk_handle = None
        self.next_restart_at = None

    # ----------------------------------------------------------------------------------- requests

    def resize(self, cols: int, rows: int) -> None:
        self.cols, self.rows = cols, rows
        if self.child is not None:
            resize_child(self.child, cols, rows)
        self.journal.event("resized", {"cols": cols, "rows": rows})

    def send_signal(self, name: str, client: ClientConn, rid: int | None = None) -> None:
        bare = wire.bare_signal(name)
        signum = None if bare is None else signal_number(bare)
        if signum is None:
            client.refuse(wire.FrameType.SIGNAL, rid, "bad_signal",
                          f"signal {name!r} is not one of {', '.join(wire.SIGNALS)}")
            return
        if self.child is None:
            client.refuse(wire.FrameType.SIGNAL, rid, "not_running", "the child is not running")
            return
        if signum in TERMINATING:
            self._mark_requested()
        self.log.write(f"signal {signal_name(signum)} to group {self.child.pid} from client {client.client_id}")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.child.pid, signum)
        client.answer(wire.FrameType.SIGNAL, rid, {"signal": signal_name(signum), "pid": self.child.pid})

    def _mark_requested(self) -> None:
        """A client (or the shellper) is ending the current child: its exit, and only its, is requested."""
        self._requested_at = time.monotonic()
        self._requested_pid = self.child.pid if self.child is not None else None

    # ----------------------------------------------------------------------------------- the end

    def begin_stop(self) -> bool:
        """From now on nothing restarts or spawns; False if a stop had already begun."""
        if self.stop_requested:
            return False
        self.stop_requested = True
        return True

    async def stop_child(self, grace: float) -> None:
        """A stop's first part: end the child's whole tree and report its exit."""
        self.journal.set_state(SessionState.STOPPING, "stop requested")
        self._cancel_timers()
        self._mark_requested()
        left = await self.terminate_tree(grace)
        self.reap()
        if self.child is not None:  # exit not seen (reaped elsewhere?): report it anyway
            self._child_gone(None, requested=True)
        if left:  # a stop that leaves processes running has failed, whatever else went well
            raise SurvivorError(left)

    async def terminate_tree(self, grace: float) -> tuple[int, ...]:
        """End the child's tree (shellper.daemon.tree), reaping as its processes die; what survived."""
        return await self.tree.terminate(grace, self.child.pid if self.child is not None else None, self.reap)
