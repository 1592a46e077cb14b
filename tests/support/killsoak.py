"""The random-moment kill soak: kill -9 a shellper at a random moment of a random state, with bystanders
alive, then let a restarted Tower run ``tower-client reconcile --apply``; account for every process, file
and cgroup the session ever had.

One trial:

1. **Bystanders**, each writing down every signal it gets (killsoak_child.py): a plain process (a child
   of the harness, in its session), a foreign daemon (setsid + double fork, nobody's child), and a live
   shellper session ``bystander`` in the same runtime directory (and cgroup parent) whose child forks the
   same tree as the victim's. The bystander is in the Tower's registry, so reconcile must adopt it.
2. **The victim** ``victim``, whose child forks a tree that ignores SIGHUP and SIGTERM (a group member,
   one in a group of its own, a setsid + double-forked daemon, a churner forking short-lived children),
   every process of which writes its pid to a ledger; driven into the trial's state and SIGKILLed (the
   shellper, through a verified pidfd) at a random moment of it:

   ========== ==================================================================================
   launch     during ``launch()``: the daemon at an age drawn up to 0.9 x the age of the bystander's
              daemon when its launch returned (the victim's may have returned first: the note says)
   flood      while the child writes without pause and a tower reads
   backoff    after a crash, while the restart waits (1 s)
   restart    a child that crashes at once, restarted every 20-50 ms with a 0.05-0.3 s grace to end the
   loop       old tree: anywhere in the loop (spawn, run, exit, the tree's end)
   husk       after the child exited for good (exit 0: ``exited``, exit 64: ``fatal``)
   stop grace after STOP with a 0.3-1.2 s grace, which the child ignores
   SPAWN      after SPAWN of a new child: the old tree's grace (0.2-0.8 s), its end, the new spawn
   ========== ==================================================================================

3. **The Tower comes back**: ``tower-client --owner killsoak [--cgroup-parent P] reconcile --registry R
   --apply`` (R names the bystander only).
4. **Measure**: session processes surviving (the ledger, ``SHELLPER_INSTANCE``, the ledger's path in a
   command line, membership of the victim's cgroup, the victim's shellper itself), bystanders signalled
   (a signal written down, or dead), files left in the runtime directory (the bystander's own four
   excepted), cgroups left under the trial's cgroup parent (the bystander's excepted), zombies (children
   of the harness left unreaped; session processes left unreaped by a live parent other than init).
5. **Clean up** everything, whatever happened: the bystander is stopped, every other process the trial
   made is killed through a verified pidfd, cgroups are killed and removed, directories removed.

Randomness comes from one seed (printed); ``only`` re-runs chosen trials of a seed (same states and
moments; the machine's timing differs run to run).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import NoReturn

from shellper.client.blocking import Client, ClientError
from shellper.client.launch import LaunchInfo, launch
from shellper.core.config import SessionConfig
from shellper.core.exits import RestartPolicy
from shellper.core.structs import replace as replace_record
from shellper.host import warmstart
from shellper.host.cgroup import LeafName, find_mount
from shellper.host.identity import IdentityError, PidFd, ProcessGone, ProcessIdentity, open_verified, read_stat
from shellper.protocol import wire
from support.waiting import poll_until

PY = sys.executable
CHILD = str(Path(__file__).resolve().parent / "killsoak_child.py")
_TOWER_SCRIPT = Path(PY).with_name("tower-client")
TOWER_CLIENT = [str(_TOWER_SCRIPT)] if _TOWER_SCRIPT.exists() else [PY, "-m", "tower_client.cli"]
_SHELLPER_SCRIPT = Path(PY).with_name("shellper")
SHELLPER_CLI = [str(_SHELLPER_SCRIPT)] if _SHELLPER_SCRIPT.exists() else [PY, "-m", "shellper.cli"]
FORK_BOMB = """
import os, resource, signal, time
for sig in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_NPROC, (150, 150))
while True:  # churn: fork, the child leaves the session, the parent exits half of the time
    try:
        pid = os.fork()
    except OSError:
        time.sleep(0.01)
        continue
    if pid == 0:
        os.setsid()
    elif os.urandom(1)[0] < 128:
        os._exit(0)
"""
"""The fork-bomb state's child: churning (fork, the child leaves the session, the parent exits half of the
time), deaf to SIGTERM, capped at 150 processes by RLIMIT_NPROC as uid 65534."""
INTRUDER = "killsoak-intruder"
"""Another owner, whose `shellper run` of the victim's name follows the kill in the foreign-owner state."""
VICTIM = "victim"
BYSTANDER = "bystander"
OWNER = "killsoak"
"""Both sessions' owner, and the one the restarted Tower acts for."""
SESSION_FILES = (".sock", ".json", ".lock", ".log")
TOWER_GRACE = 0.2
"""The restarted Tower's SIGTERM-to-SIGKILL grace: the trees ignore SIGTERM, so every trial waits it out."""
SETTLE = 0.5
"""How long a session process still alive after apply returned may take to die before it is a survivor."""


class State(StrEnum):
    LAUNCH = "launch"
    FLOOD = "flood"
    BACKOFF = "backoff"
    RESTART_LOOP = "restart loop"
    HUSK = "husk"
    STOP_GRACE = "stop grace"
    SPAWN = "SPAWN"
    COPIED_RECORD = "copied record"
    FOREIGN_OWNER = "foreign owner"
    FORK_BOMB = "fork bomb"


class Mode(StrEnum):
    """The victim's and the bystander's containment."""

    CGROUP = "cgroup"
    NONE = "none"


class TrialFailed(Exception):
    """The trial could not be carried out as planned (not a containment failure: those are measured)."""


@dataclass(frozen=True)
class KillSoakConfig:
    mode: Mode
    trials: int
    seed: int
    only: frozenset[int] | None = None
    """Run only these trial indices (a seed's reproduction), whatever ``trials`` says; None: all."""
    progress: Callable[[str], None] | None = None
    warm: bool = False
    """Every trial's launches go through a warm launcher started in its runtime directory first (the caller's
    SHELLPER_LAUNCHER must say on); it is ended with the trial, and its files are not the trial's leftovers."""


@dataclass
class TrialResult:
    index: int
    state: State
    kill_at: float = 0.0
    """Seconds from the start of the state (the daemon's fork, the flood, the exit, STOP, SPAWN) to the kill."""
    note: str = ""
    left_by_kill: int = 0
    """Session processes alive when the Tower came back (what reconcile had to end)."""
    survivors: list[str] = field(default_factory=list)
    signalled: list[str] = field(default_factory=list)
    files_left: list[str] = field(default_factory=list)
    cgroups_left: list[str] = field(default_factory=list)
    zombies: list[str] = field(default_factory=list)
    apply_rc: int | None = None
    apply_output: str = ""
    error: str = ""
    """Why the trial could not be carried out (the harness's or the product's failure to get that far)."""
    cleanup: list[str] = field(default_factory=list)
    """What cleaning up had to do beyond the plan (e.g. the bystander's STOP left processes)."""
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return bool(self.survivors or self.signalled or self.files_left or self.cgroups_left or self.zombies
                    or self.error or self.apply_rc != 0 or self.cleanup)


# --------------------------------------------------------------------------------------------- /proc


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    state: str
    start: int
    argv: tuple[str, ...]
    cgroup: str | None
    instance: str | None

    @property
    def ident(self) -> str:
        return f"{self.pid}@{self.start}"


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def processes() -> dict[int, Proc]:
    """Every process now, with what the harness tells sessions apart by."""
    out: dict[int, Proc] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            st = read_stat(pid)
        except IdentityError:
            continue
        if st is None:
            continue
        raw = _read(f"/proc/{pid}/cmdline") or b""
        argv = tuple(a.decode("utf-8", "replace") for a in raw.split(b"\0")[:-1])
        env = _read(f"/proc/{pid}/environ") or b""
        instance = None
        for item in env.split(b"\0"):
            if item.startswith(b"SHELLPER_INSTANCE="):
                instance = item[18:].decode("ascii", "replace")
        cg = None
        for line in (_read(f"/proc/{pid}/cgroup") or b"").decode("utf-8", "replace").splitlines():
            if line.startswith("0::"):
                cg = line[3:]
        out[pid] = Proc(pid, st.ppid, st.state, st.start_time, argv, cg, instance)
    return out


def alive(pid: int, start: int) -> bool:
    try:
        st = read_stat(pid)
    except IdentityError:
        return False
    return st is not None and st.state != "Z" and st.start_time == start


def kill_pinned(pid: int, start: int, timeout: float = 5.0) -> bool:
    """SIGKILL the process ``pid`` started at ``start`` ticks (never another holding its pid); True if it died."""
    try:
        fd = open_verified(ProcessIdentity(_BOOT, pid, start), allow_zombie=True)
    except IdentityError:
        return True
    with fd:
        with contextlib.suppress(ProcessGone, PermissionError):
            fd.send_signal(signal.SIGKILL)
        return fd.wait_dead(timeout)


def wait_dead(pid: int, start: int, timeout: float) -> bool:
    """Wait (on a pidfd) until the process ``pid`` started at ``start`` has exited; True if it has."""
    try:
        fd = open_verified(ProcessIdentity(_BOOT, pid, start), allow_zombie=True)
    except IdentityError:
        return True
    with fd:
        return fd.wait_dead(timeout)


def process_age(start_ticks: int) -> float:
    """Seconds since a process started, from its start ticks (10 ms resolution)."""
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return max(0.0, uptime - start_ticks / _HZ)


_HZ = os.sysconf("SC_CLK_TCK")


def _boot_id() -> str:
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


_BOOT = _boot_id()


def daemon_of(name: str, run_dir: str) -> Proc | None:
    """The detached shellper of session ``name`` (``python -m shellper.daemon NAME DIR``): not the
    intermediate process (the harness's child) nor a child forked by the daemon that has not exec'd yet.
    Reads only command lines, then the stat of those that match: it runs while the daemon starts."""
    tail = b"\0".join((b"shellper.daemon", name.encode(), run_dir.encode())) + b"\0"
    cands: dict[int, Proc] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (_read(f"/proc/{entry}/cmdline") or b"").endswith(tail):
            with contextlib.suppress(IdentityError):
                st = read_stat(int(entry))
                if st is not None and st.state != "Z":
                    cands[int(entry)] = Proc(int(entry), st.ppid, st.state, st.start_time, (), None, None)
    inner = {pid: p for pid, p in cands.items() if p.ppid != os.getpid()}
    for p in inner.values():
        if p.ppid not in inner:
            return p
    return None


def harness_zombies() -> list[str]:
    out = []
    me = os.getpid()
    for p in processes().values():
        if p.ppid == me and p.state == "Z":
            out.append(f"{p.pid} (harness child {' '.join(p.argv[-3:]) or '?'})")
    return out


# --------------------------------------------------------------------------------------------- cgroups


def cgroup_dirs(top: str) -> list[str]:
    """Every cgroup directory below ``top``, deepest first."""
    found = []
    for root, dirs, _files in os.walk(top):
        found += [os.path.join(root, d) for d in dirs]
    return sorted(found, key=lambda p: p.count("/"), reverse=True)


def remove_cgroup_tree(top: str, keep_top: bool = False) -> list[str]:
    """Kill whatever is in ``top`` and below, then remove the directories; the problems, if any."""
    problems = []
    for path in [*cgroup_dirs(top), *([] if keep_top else [top])]:
        if not os.path.isdir(path):
            continue
        procs = (_read(os.path.join(path, "cgroup.procs")) or b"").split()
        if procs:
            with contextlib.suppress(OSError), open(os.path.join(path, "cgroup.kill"), "w") as f:
                f.write("1")
            if not _wait_unpopulated(path, 5.0):
                problems.append(f"{path}: still populated after cgroup.kill")
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            problems.append(f"{path}: {e.strerror}")
    return problems


def _wait_unpopulated(path: str, timeout: float) -> bool:
    import select

    try:
        fd = os.open(os.path.join(path, "cgroup.events"), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    try:
        poller = select.poll()
        poller.register(fd, select.POLLPRI)
        deadline = time.monotonic() + timeout
        while b"populated 1" in os.pread(fd, 4096, 0):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            poller.poll(max(1, int(left * 1000)))
        return True
    finally:
        os.close(fd)


def _short_leaf(path: str) -> str:
    leaf = LeafName.parse(os.path.basename(path))
    return os.path.basename(path) if leaf is None else f"{leaf.name}.{leaf.instance_id[:8]}"


def cgroup_available() -> str | None:
    """The cgroup v2 mount if the harness can make cgroups there, else None."""
    mount = find_mount()
    if mount is None or os.geteuid() != 0 or not os.access(mount, os.W_OK):
        return None
    return mount


# --------------------------------------------------------------------------------------------- one trial


def _trial_failed(message: str) -> NoReturn:
    raise TrialFailed(message)


def _wait_for(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.005) -> object:
    """support.waiting.poll_until, failing the trial (which the harness reports) rather than the test."""
    return poll_until(predicate, timeout, interval, what, fail=_trial_failed)


def _clean_env() -> dict[str, str]:
    """The harness's environment without any shellper marker it may have been started under, but its choice of the
    warm launcher (without it the CLI it runs would start one, and leave its files and cgroup to the trial)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SHELLPER_") or k == "SHELLPER_LAUNCHER"}


@dataclass
class Ledger:
    """The processes a session tree wrote down: (pid, start ticks) -> role; and the instance ids seen."""

    path: str
    entries: dict[tuple[int, int], str] = field(default_factory=dict)
    instances: set[str] = field(default_factory=set)

    def load(self) -> Ledger:
        for line in (_read(self.path) or b"").decode("utf-8", "replace").splitlines():
            parts = line.split()
            if len(parts) == 5 and parts[0].isdigit() and parts[1].isdigit():
                self.entries[(int(parts[0]), int(parts[1]))] = parts[2]
                if parts[4] != "-":
                    self.instances.add(parts[4])
        return self


class Trial:
    def __init__(self, cfg: KillSoakConfig, run_parent: str | None, index: int, state: State) -> None:
        self.cfg = cfg
        self.index = index
        self.state = state
        self.rng = random.Random(f"{cfg.seed}/{cfg.mode}/{index}")
        self.result = TrialResult(index, state)
        self.work = tempfile.mkdtemp(prefix="ks-", dir="/tmp")
        os.chmod(self.work, 0o700)
        self.run = os.path.join(self.work, "r")
        os.mkdir(self.run, 0o700)
        self.cg_parent: str | None = None
        if run_parent is not None:
            self.cg_parent = os.path.join(run_parent, f"t{index}")
            os.mkdir(self.cg_parent)
        self.env = _clean_env()
        if cfg.warm:
            from shellper.client.warm import start_launcher
            from support.launchers import wait_listening

            start_launcher(self.run)
            wait_listening(self.run)
        self.plain: subprocess.Popen[bytes] | None = None
        self.plain_id: tuple[int, int] | None = None
        self.foreign_id: tuple[int, int] | None = None
        self.bystander: LaunchInfo | None = None
        self.daemon_life = 0.1
        """How old the bystander's daemon was when its launch() returned (its fork to its socket accepting)."""
        self.fork_delay = 0.05
        """From the bystander's launch() call to its daemon's fork (the intermediate interpreter's start)."""
        self.killed = 0.0
        self.victim: LaunchInfo | None = None
        self.victim_shellper: tuple[int, int] | None = None
        self.tower: Client | None = None
        self.intruder = False
        """Another owner's session of the victim's name runs (the foreign-owner state)."""
        self.jail: str | None = None
        """Under none, the fork bomb's cgroup of the trial's own: the harness's net, never the product's."""

    def path(self, name: str) -> str:
        return os.path.join(self.work, name)

    # ------------------------------------------------------------------ sessions

    def child_argv(self, who: str, gen: int, then: str) -> list[str]:
        argv = [PY, CHILD, "session", self.path(f"{who}.ledger"), self.path(f"{who}.signals"), str(gen), then]
        return [*argv, "all"] if who == BYSTANDER else argv

    def config(self, name: str, argv: list[str], grace: float = 1.0,
               policy: RestartPolicy | None = None) -> SessionConfig:
        return SessionConfig(name=name, argv=argv, dir=self.run, cwd=self.work, env=self.env, grace=grace,
                             ring_bytes=1 << 20, policy=policy or RestartPolicy(), owner=OWNER,
                             containment=self.cfg.mode.value, cgroup_parent=self.cg_parent)

    def connect(self, info: LaunchInfo) -> Client:
        client = Client(info.socket, "tower", client_name="killsoak", timeout=10.0)
        client.connect()
        return client

    @staticmethod
    def until(client: Client, done: Callable[[wire.Frame, bytes], bool], timeout: float = 15.0) -> None:
        """Read frames (output collected, the replay first) until ``done(frame, output)``."""
        assert client.replay is not None
        out = bytearray(client.replay.data)
        if done(client.replay, bytes(out)):
            return
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TrialFailed(f"timed out; last output {bytes(out[-200:])!r}")
            frame = client.recv(timeout=left)
            if frame is None:
                continue
            if isinstance(frame, wire.Data):
                out += frame.data
                del out[:-4096]
            if done(frame, bytes(out)):
                return

    def ready(self, client: Client, gen: int = 0) -> None:
        needle = f"READY {gen}.".encode()
        self.until(client, lambda _f, out: needle in out)

    # ------------------------------------------------------------------ setup

    def setup(self) -> None:
        self.plain = subprocess.Popen([PY, CHILD, "bystander", self.path("plain.signals"), self.path("plain.pid")],
                                      stdin=subprocess.DEVNULL, env=self.env)
        foreign = subprocess.Popen([PY, CHILD, "foreign", self.path("foreign.signals"), self.path("foreign.pid")],
                                   stdin=subprocess.DEVNULL, env=self.env)
        try:
            started = time.monotonic()
            self.bystander = launch(self.config(BYSTANDER, self.child_argv(BYSTANDER, 0, "idle")))
            self.daemon_life = max(0.01, process_age(self.bystander.start_time))
            self.fork_delay = max(0.0, time.monotonic() - started - self.daemon_life)
        finally:
            foreign.wait(30)  # it forks and exits at once; the daemon is nobody's child
        self.plain_id = self._pidfile("plain.pid")
        self.foreign_id = self._pidfile("foreign.pid")
        with self.connect(self.bystander) as tower:
            self.ready(tower)

    def _pidfile(self, name: str) -> tuple[int, int]:
        text = _wait_for(lambda: _read(self.path(name)), 15.0, name)
        assert isinstance(text, bytes)
        pid, start = text.split()
        return int(pid), int(start)

    # ------------------------------------------------------------------ states

    def launch_victim(self, then: str, grace: float = 1.0, policy: RestartPolicy | None = None) -> Client:
        self.victim = launch(self.config(VICTIM, self.child_argv(VICTIM, 0, then), grace, policy))
        self.victim_shellper = (self.victim.pid, self.victim.start_time)
        self.tower = self.connect(self.victim)
        self.ready(self.tower)
        return self.tower

    def kill_victim(self, started: float) -> None:
        assert self.victim_shellper is not None
        pid, start = self.victim_shellper
        self.killed = time.monotonic()
        self.result.kill_at = round(self.killed - started, 4)
        if not kill_pinned(pid, start, 10.0):
            raise TrialFailed(f"the victim's shellper {pid} did not die of SIGKILL")

    def read_until(self, client: Client, moment: float) -> int:
        """Take what comes (output, exits) until ``moment``; how many EXIT frames came."""
        exits = 0
        with contextlib.suppress(ClientError):
            while (left := moment - time.monotonic()) > 0:
                if isinstance(client.recv(timeout=left), wire.Exit):
                    exits += 1
        return exits

    def drive(self) -> None:
        getattr(self, "_" + self.state.name.lower())()

    def _launch(self) -> None:
        """SIGKILL the daemon at an age drawn up to what the bystander's daemon was when its launch() returned."""
        box: dict[str, object] = {}

        def run() -> None:
            try:
                box["info"] = launch(self.config(VICTIM, self.child_argv(VICTIM, 0, "idle")))
            except Exception as exc:
                box["error"] = exc
            box["done"] = time.monotonic()

        target = self.rng.uniform(0.0, 0.9 * self.daemon_life)
        thread = threading.Thread(target=run, name="killsoak-launch")
        thread.start()
        found: object = None
        try:
            time.sleep(0.8 * self.fork_delay)  # the launcher's interpreter is starting: nothing to kill yet
            found = _wait_for(lambda: daemon_of(VICTIM, self.run) or "done" in box, 15.0,
                              "the victim's daemon to be forked", interval=0.002)
            if isinstance(found, Proc):
                time.sleep(max(0.0, target - process_age(found.start)))  # the random moment
                self.victim_shellper = (found.pid, found.start)
                self.kill_victim(time.monotonic() - process_age(found.start))
        finally:
            thread.join(30)
        if thread.is_alive():
            raise TrialFailed("launch() did not return within 30 s of the kill")
        info = box.get("info")
        if isinstance(info, LaunchInfo):
            self.victim = info
        if not isinstance(found, Proc):  # launch() returned before the daemon was seen: kill it now
            if not isinstance(info, LaunchInfo):
                raise TrialFailed(f"the victim did not launch: {box.get('error')}")
            self.victim_shellper = (info.pid, info.start_time)
            self.kill_victim(time.monotonic() - process_age(info.start_time))
        returned = box["done"]
        assert isinstance(returned, float)
        if isinstance(info, LaunchInfo):
            self.result.note = "launch() returned first" if returned <= self.killed else "launch() returned"
        else:
            self.result.note = "launch() raised"
        self.result.note += f" (the bystander's daemon took {self.daemon_life:.3f} s)"

    def _flood(self) -> None:
        tower = self.launch_victim("flood")
        tower.write(b"g")
        started = time.monotonic()
        self.read_until(tower, started + self.rng.uniform(0.0, 1.0))
        self.kill_victim(started)

    def _backoff(self) -> None:
        policy = RestartPolicy(backoff_initial=1.0, backoff_max=1.0, jitter=0.0)
        tower = self.launch_victim("exit:3", policy=policy)
        exit_frame: list[wire.Exit] = []

        def backoff(frame: wire.Frame, _out: bytes) -> bool:
            if isinstance(frame, wire.Exit) and frame.state == "backoff":
                exit_frame.append(frame)
            return bool(exit_frame)

        self.until(tower, backoff)
        started = time.monotonic()
        wait = exit_frame[0].restart_in or 1.0
        time.sleep(self.rng.uniform(0.0, 0.95 * wait))
        self.kill_victim(started)

    def _restart_loop(self) -> None:
        # min_uptime 0: no crash counts as unstable, so the breaker never stops the loop
        policy = RestartPolicy(backoff_initial=0.02, backoff_max=0.05, jitter=0.0, min_uptime=0.0,
                               same_error_count=0, max_restarts=None)
        tower = self.launch_victim("exit:3", grace=self.rng.uniform(0.05, 0.3), policy=policy)
        self.until(tower, lambda f, _o: isinstance(f, wire.Exit))
        started = time.monotonic()
        exits = 1 + self.read_until(tower, started + self.rng.uniform(0.0, 1.5))
        self.kill_victim(started)
        self.result.note = f"{exits} exits seen"

    def _husk(self) -> None:
        code = self.rng.choice((0, 64))
        tower = self.launch_victim(f"exit:{code}")
        self.until(tower, lambda f, _o: isinstance(f, wire.Exit) and f.state in ("exited", "fatal"))
        started = time.monotonic()
        time.sleep(self.rng.uniform(0.0, 0.5))
        self.kill_victim(started)
        self.result.note = "exited" if code == 0 else "fatal"

    def _stop_grace(self) -> None:
        grace = self.rng.uniform(0.3, 1.2)
        tower = self.launch_victim("idle")
        tower.send(wire.Stop(grace=grace))
        started = time.monotonic()
        self.read_until(tower, started + self.rng.uniform(0.0, 1.1 * grace))
        self.kill_victim(started)
        self.result.note = f"grace {grace:.2f} s"

    def _spawn(self) -> None:
        grace = self.rng.uniform(0.2, 0.8)
        tower = self.launch_victim("idle", grace=grace)
        tower.send(wire.Spawn(argv=self.child_argv(VICTIM, 1, "idle")))
        started = time.monotonic()
        self.read_until(tower, started + self.rng.uniform(0.0, grace + 0.3))
        self.kill_victim(started)
        self.result.note = f"grace {grace:.2f} s"

    def _copied_record(self) -> None:
        """The bystander's record copied under another name, and `shellper stop` of that name, which must
        refuse and signal nothing (issue 27, defect 1: it killed the bystander); then the victim is killed
        idle. Reconcile removes the copy (a record naming another session) and must not touch the bystander."""
        shutil.copyfile(os.path.join(self.run, BYSTANDER + ".json"), os.path.join(self.run, "copy.json"))
        done = subprocess.run([*SHELLPER_CLI, "--dir", self.run, "stop", "copy", "--grace", str(TOWER_GRACE)],
                              env=self.env, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        if done.returncode == 0:
            self.result.signalled.append(f"`shellper stop copy` of the bystander's copied record said "
                                         f"{done.stdout.decode(errors='replace').strip()!r}")
        self.launch_victim("idle")
        started = time.monotonic()
        time.sleep(self.rng.uniform(0.0, 0.5))
        self.kill_victim(started)
        self.result.note = f"stop copy: exit {done.returncode}"

    def _foreign_owner(self) -> None:
        """The victim is killed idle, then another owner runs a session of its name (issue 27, defect 4): that
        is refused while what the victim left runs (its record is how our reconcile finds it), so our
        reconcile still ends it. Should it start, it is stopped once our reconcile is done."""
        self.launch_victim("idle")
        started = time.monotonic()
        time.sleep(self.rng.uniform(0.0, 0.5))
        self.kill_victim(started)
        where = ["--cgroup-parent", self.cg_parent] if self.cg_parent is not None else []
        done = subprocess.run([*SHELLPER_CLI, "--dir", self.run, "run", VICTIM, "--owner", INTRUDER, "--containment",
                               self.cfg.mode.value, *where, "--cwd", self.work, "--", "sleep", "600"], env=self.env,
                              capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        self.intruder = done.returncode == 0
        self.result.note = "the other owner's run " + ("started" if self.intruder else "was refused")
        if self.intruder:
            self.result.cleanup.append("another owner's run of the killed victim's name started: its record, "
                                       "the only way to what the victim left, is gone")

    def _stop_intruder(self) -> None:
        """The other owner's session, if it started: stopped (by name; `stop` does not ask whose it is)."""
        if not self.intruder:
            return
        self.intruder = False
        done = subprocess.run([*SHELLPER_CLI, "--dir", self.run, "stop", VICTIM, "--grace", str(TOWER_GRACE)],
                              env=self.env, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace")
            self.result.cleanup.append(f"the other owner's session did not stop: {why}")

    def _fork_bomb(self) -> None:
        """A churning fork bomb as uid 65534 (issue 27, defect 2), STOPped with a grace of 0.2-0.5 s, and the
        shellper SIGKILLed 0 to grace + 2 s into the stop: while it freezes and kills the tree, or after it
        is done (then what it did is measured). Under none the bomb first joins a cgroup of the trial's own,
        by which clean-up ends it whatever happened (the session itself is uncontained)."""
        prefix = ""
        if self.cfg.mode is Mode.NONE:
            mount = cgroup_available()
            if mount is None:
                raise TrialFailed("the fork bomb needs a cgroup v2 hierarchy to be cleaned up by")
            self.jail = os.path.join(mount, f"killsoak-jail-{os.getpid()}-{self.index}")
            os.mkdir(self.jail)
            prefix = f"echo $$ > {self.jail}/cgroup.procs && "
        argv = ["sh", "-c", prefix + f'exec setpriv --reuid=65534 --regid=65534 --clear-groups -- {PY} -c "$KS_BOMB"']
        grace = self.rng.uniform(0.2, 0.5)
        config = replace_record(self.config(VICTIM, argv, grace), cwd="/", env={**self.env, "KS_BOMB": FORK_BOMB})
        self.victim = launch(config)
        self.victim_shellper = (self.victim.pid, self.victim.start_time)
        self.tower = self.connect(self.victim)
        instance = self.victim.instance_id
        _wait_for(lambda: sum(p.instance == instance for p in processes().values()) >= 100, 30.0, "the bomb to grow",
                  interval=0.05)
        self.tower.send(wire.Stop(grace=grace))
        started = time.monotonic()
        self.read_until(self.tower, started + self.rng.uniform(0.0, grace + 2.0))
        self.kill_victim(started)
        self.result.note = f"grace {grace:.2f} s"

    # ------------------------------------------------------------------ the Tower comes back

    def reconcile(self) -> None:
        if self.tower is not None:
            self.tower.close()
        assert self.bystander is not None
        self.result.left_by_kill = len(self.victim_processes())
        registry = self.path("registry.json")
        with open(registry, "w") as f:
            json.dump({"sessions": [{"name": BYSTANDER, "instance_id": self.bystander.instance_id}]}, f)
        where = ["--cgroup-parent", self.cg_parent] if self.cg_parent is not None else []
        proc = subprocess.run([*TOWER_CLIENT, "--dir", self.run, "--owner", OWNER, *where, "reconcile", "--registry",
                               registry, "--apply", "--json", "--grace", str(TOWER_GRACE)], env=self.env,
                              capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
        self.result.apply_rc = proc.returncode
        self.result.apply_output = (proc.stdout + proc.stderr).decode("utf-8", "replace")
        try:
            outcomes = json.loads(proc.stdout)["outcomes"]
            adopted = [o for o in outcomes if o["name"] == BYSTANDER]
            if [o["result"] for o in adopted] != ["adopted"]:
                self.result.signalled.append(f"bystander session not adopted: {adopted}")
        except (ValueError, KeyError, TypeError):
            pass  # the failure shows as apply_rc and apply_output
        self._stop_intruder()  # our reconcile has left it alone (or not: then it is gone already)

    # ------------------------------------------------------------------ measure

    def instances(self) -> set[str]:
        out = Ledger(self.path(f"{VICTIM}.ledger")).load().instances
        if self.victim is not None:
            out.add(self.victim.instance_id)
        return out

    def victim_cgroups(self) -> list[str]:
        """The victim's cgroup leaves under the trial's parent (any instance), relative to the mount."""
        if self.cg_parent is None or not os.path.isdir(self.cg_parent):
            return []
        out = []
        for entry in sorted(os.listdir(self.cg_parent)):
            leaf = LeafName.parse(entry)
            if os.path.isdir(os.path.join(self.cg_parent, entry)) and (leaf is None or leaf.name != BYSTANDER):
                out.append(os.path.join(self.cg_parent, entry))
        return out

    def victim_processes(self) -> dict[int, tuple[Proc, str]]:
        """Live processes of the victim's session, each with how it was recognised."""
        procs = processes()
        ledger = Ledger(self.path(f"{VICTIM}.ledger")).load()
        instances = ledger.instances | ({self.victim.instance_id} if self.victim else set())
        mount = find_mount() or ""
        leaves = [p[len(mount):] for p in self.victim_cgroups()]
        tag = self.path(f"{VICTIM}.ledger")
        daemon = ("shellper.daemon", VICTIM, self.run)
        found: dict[int, tuple[Proc, str]] = {}
        for p in procs.values():
            if p.state == "Z" or p.pid == os.getpid():
                continue
            why = [w for w, hit in (
                ("ledger", ledger.entries.get((p.pid, p.start))),
                ("argv", tag in p.argv),
                ("shellper", p.argv[-3:] == daemon and p.ppid != os.getpid()),
                ("marker", p.instance in instances),
                ("cgroup", p.cgroup is not None and any(p.cgroup == lf or p.cgroup.startswith(lf + "/")
                                                        for lf in leaves)),
            ) if hit]
            if why:
                role = ledger.entries.get((p.pid, p.start), "?")
                found[p.pid] = (p, f"{p.pid} {role} ({', '.join(why)})")
        return found

    def measure(self) -> None:
        r = self.result
        children = [k for k, role in Ledger(self.path(f"{VICTIM}.ledger")).load().entries.items() if role == "child"]
        if self.state is State.SPAWN:
            r.note += f", {'new child had started' if len(children) > 1 else 'no new child yet'}"
        elif self.state is State.RESTART_LOOP:
            r.note += f", {len(children)} children spawned"
        # A process SIGKILLed just now may take a moment to exit; one still alive after SETTLE survived.
        deadline = time.monotonic() + SETTLE
        survivors = self.victim_processes()
        for pid, (p, _why) in list(survivors.items()):
            try:
                with PidFd.open(pid) as fd:
                    if alive(pid, p.start) and not fd.wait_dead(max(0.0, deadline - time.monotonic())):
                        continue
            except ProcessGone:
                pass
            del survivors[pid]
        r.survivors = [why for _p, why in survivors.values()]
        r.signalled += self.bystander_damage()
        keep = {BYSTANDER + suffix for suffix in SESSION_FILES} | {"logs"}  # logs/: stopped sessions' logs, kept
        if self.cfg.warm:  # its launcher serves on until the trial's end
            keep |= {warmstart.SOCKET_NAME, warmstart.LOCK_NAME, warmstart.LOG_NAME}
        r.files_left = sorted(set(os.listdir(self.run)) - keep) if os.path.isdir(self.run) else []
        r.cgroups_left = [_short_leaf(p) for p in self.victim_cgroups()]
        r.zombies = harness_zombies() + self.unreaped()

    def bystander_damage(self) -> list[str]:
        hurt = []
        for name, ident in (("plain", self.plain_id), ("foreign", self.foreign_id)):
            text = (_read(self.path(f"{name}.signals")) or b"").decode().split()
            if text:
                hurt.append(f"{name} bystander got signals {text[2::3]}")
            if ident is None or not alive(*ident):
                hurt.append(f"{name} bystander is dead")
        assert self.bystander is not None
        if not alive(self.bystander.pid, self.bystander.start_time):
            hurt.append("the bystander session's shellper is dead")
        for line in (_read(self.path(f"{BYSTANDER}.signals")) or b"").decode().splitlines():
            hurt.append(f"bystander session tree: {line}")
        for (pid, start), role in Ledger(self.path(f"{BYSTANDER}.ledger")).load().entries.items():
            if role not in ("churnkid", "daemon-1") and not alive(pid, start):
                hurt.append(f"bystander session's {role} {pid} is dead")
        return hurt

    def unreaped(self) -> list[str]:
        """Zombies of either session's tree whose parent lives and is not init (somebody should reap them),
        still there after a second (a churner reaps its child right after it exits)."""

        def zombies() -> dict[tuple[int, int], str]:
            procs = processes()
            out = {}
            for who in (VICTIM, BYSTANDER):
                for (pid, start), role in Ledger(self.path(f"{who}.ledger")).load().entries.items():
                    p = procs.get(pid)
                    if p is not None and p.start == start and p.state == "Z" and p.ppid > 1 and p.ppid in procs:
                        out[(pid, start)] = f"{who} {role} {pid} unreaped by {p.ppid}"
            return out

        found = zombies()
        deadline = time.monotonic() + 1.0
        while found and time.monotonic() < deadline:
            time.sleep(0.02)
            now = zombies()
            found = {k: v for k, v in found.items() if k in now}
        return list(found.values())

    # ------------------------------------------------------------------ clean up

    def cleanup(self) -> None:
        """End everything the trial started, whatever happened; raise if a process or cgroup could not be."""
        problems: list[str] = []
        for step in (self._stop_intruder, self._stop_bystander, self._end_processes, self._end_launcher,
                     self._remove_cgroups):
            try:
                step()
            except Exception as exc:
                problems.append(f"{step.__name__}: {type(exc).__name__}: {exc}")
        if not problems:
            shutil.rmtree(self.work, ignore_errors=True)
        if problems:
            raise RuntimeError(f"trial {self.index} ({self.work}) not cleaned up: {problems}")

    def _end_launcher(self) -> None:
        from support.launchers import end_launchers

        end_launchers(self.run)

    def _stop_bystander(self) -> None:
        notes = self.result.cleanup
        if self.tower is not None:
            self.tower.close()
        if self.bystander is None or not alive(self.bystander.pid, self.bystander.start_time):
            return
        try:
            with Client(self.bystander.socket, "tower", client_name="killsoak", timeout=10.0) as c:
                c.connect(replay_bytes=0)
                c.send(wire.Stop(grace=0.1))
                with contextlib.suppress(ClientError):
                    while c.recv(timeout=15) is not None:
                        pass
        except ClientError as exc:
            notes.append(f"STOP of the bystander failed: {exc}")
        if not wait_dead(self.bystander.pid, self.bystander.start_time, 15.0):
            notes.append("the bystander's shellper outlived STOP")
            kill_pinned(self.bystander.pid, self.bystander.start_time)
        ledger = Ledger(self.path(f"{BYSTANDER}.ledger")).load()
        left = [f"{pid} {role}" for (pid, start), role in ledger.entries.items() if alive(pid, start)]
        if left:
            notes.append(f"the bystander's STOP left processes {left}")
        files = [n for n in os.listdir(self.run) if n.startswith(BYSTANDER)]
        if files:
            notes.append(f"the bystander's STOP left files {files}")

    def _end_processes(self) -> None:
        # A fork bomb outruns kills one by one: its cgroup (the trial's jail, or the victim's) ends it at once.
        bombed = self.state is State.FORK_BOMB
        for top in ([self.jail] if self.jail is not None else []) + (self.victim_cgroups() if bombed else []):
            problems = remove_cgroup_tree(top)
            if problems:
                raise RuntimeError(f"the fork bomb's cgroup: {problems}")
        self.jail = None
        if self.plain is not None:
            self.plain.kill()
            self.plain.wait(10)
        if self.foreign_id is not None:
            kill_pinned(*self.foreign_id)
        if self.victim_shellper is not None:
            kill_pinned(*self.victim_shellper)
        for _ in range(50):  # churners fork while they are being killed: until none is left
            left = self.leftovers()
            if not left:
                return
            for p in left:
                kill_pinned(p.pid, p.start, 2.0)
        raise RuntimeError(f"could not kill {[p.pid for p in self.leftovers()]}")

    def _remove_cgroups(self) -> None:
        if self.cg_parent is not None:
            problems = remove_cgroup_tree(self.cg_parent)
            if problems:
                raise RuntimeError(f"cgroups not removed: {problems}")

    def leftovers(self) -> list[Proc]:
        """Anything of the trial still alive but the plain bystander (reaped separately)."""
        out = [p for p, _why in self.victim_processes().values()]
        tags = (self.path(f"{BYSTANDER}.ledger"), self.path("foreign.signals"))
        daemon = ("shellper.daemon", BYSTANDER, self.run)
        for p in processes().values():
            if p.state != "Z" and p.pid != os.getpid() and (any(t in p.argv for t in tags) or p.argv[-3:] == daemon):
                out.append(p)
        for who in (VICTIM, BYSTANDER):
            for (pid, start) in Ledger(self.path(f"{who}.ledger")).load().entries:
                if alive(pid, start) and all(p.pid != pid for p in out):
                    out.append(Proc(pid, 0, "?", start, (), None, None))
        return out


def run_trial(cfg: KillSoakConfig, run_parent: str | None, index: int, state: State) -> TrialResult:
    started = time.monotonic()
    trial = Trial(cfg, run_parent, index, state)
    try:
        trial.setup()
        trial.drive()
        trial.reconcile()
        trial.measure()
    except Exception as exc:
        trial.result.error = f"{type(exc).__name__}: {exc} | " + " / ".join(
            line.strip() for line in traceback.format_exc().splitlines()[-6:-1])
    finally:
        trial.cleanup()
    trial.result.seconds = round(time.monotonic() - started, 3)
    return trial.result


# --------------------------------------------------------------------------------------------- a run


def state_of(seed: int, mode: Mode, index: int) -> State:
    """Trial ``index``'s state: each block of ten trials is the ten states in an order drawn from the
    seed; the none mode takes each block's order from its sixth place, so five trials of each mode
    together cover every state. A trial's state does not depend on how many trials run."""
    block = list(State)
    random.Random(f"{seed}/plan/{index // len(block)}").shuffle(block)
    return block[(index + (0 if mode is Mode.CGROUP else 5)) % len(block)]


def plan(cfg: KillSoakConfig) -> list[tuple[int, State]]:
    indices = sorted(cfg.only) if cfg.only is not None else range(cfg.trials)
    return [(i, state_of(cfg.seed, cfg.mode, i)) for i in indices]


@contextlib.contextmanager
def run_cgroup_parent(mode: Mode) -> Iterator[str | None]:
    """The run's cgroup parent under the v2 mount (cgroup mode), removed with all below it afterwards."""
    if mode is not Mode.CGROUP:
        yield None
        return
    mount = cgroup_available()
    if mount is None:
        raise RuntimeError("no writable cgroup v2 hierarchy")
    parent = os.path.join(mount, f"killsoak-{os.getpid()}-{secrets.token_hex(3)}")
    os.mkdir(parent)
    try:
        yield parent
    finally:
        problems = remove_cgroup_tree(parent)
        if problems:
            raise RuntimeError(f"cgroups not removed: {problems}")


def run_killsoak(cfg: KillSoakConfig) -> Summary:
    results: list[TrialResult] = []
    started = time.monotonic()
    with run_cgroup_parent(cfg.mode) as parent:
        for index, state in plan(cfg):
            result = run_trial(cfg, parent, index, state)
            results.append(result)
            if cfg.progress is not None:
                cfg.progress(f"{cfg.mode} #{index} {state}: {'FAIL' if result.failed else 'ok'} "
                             f"kill at {result.kill_at:.3f} s, {result.seconds:.1f} s {result.note}")
    return Summary(cfg.mode, cfg.seed, results, round(time.monotonic() - started, 1))


# --------------------------------------------------------------------------------------------- figures


@dataclass
class Summary:
    mode: Mode
    seed: int
    results: list[TrialResult]
    seconds: float

    @property
    def failures(self) -> list[TrialResult]:
        return [r for r in self.results if r.failed]

    def totals(self, rows: list[TrialResult]) -> dict[str, int]:
        return {
            "trials": len(rows),
            "left_by_kill": sum(r.left_by_kill for r in rows),
            "survivors": sum(len(r.survivors) for r in rows),
            "survivor_trials": sum(1 for r in rows if r.survivors),
            "signalled": sum(len(r.signalled) for r in rows),
            "files_left": sum(len(r.files_left) for r in rows),
            "file_trials": sum(1 for r in rows if r.files_left),
            "cgroups_left": sum(len(r.cgroups_left) for r in rows),
            "zombies": sum(len(r.zombies) for r in rows),
            "errors": sum(1 for r in rows if r.error),
            "apply_failed": sum(1 for r in rows if r.apply_rc not in (0, None)),
            "stop_left": sum(1 for r in rows if r.cleanup),
            "seconds": round(sum(r.seconds for r in rows), 1),
        }

    def table(self) -> str:
        """Markdown: one row per state and one for all; ``N (T)`` is N processes/files in T trials."""
        head = ("| state | trials | left by the kill | survivors | bystanders signalled | files left | "
                "cgroups left | zombies | apply failed | s/trial |")
        lines = [head, "|" + "---|" * 10]
        groups = [(s.value, [r for r in self.results if r.state is s]) for s in State]
        for label, rows in [*groups, ("all", self.results)]:
            if not rows:
                continue
            t = self.totals(rows)
            per = t["seconds"] / len(rows)
            cg = f"{t['cgroups_left']}" if self.mode is Mode.CGROUP else "-"
            lines.append(f"| {label} | {t['trials']} | {t['left_by_kill']} | {t['survivors']} ({t['survivor_trials']})"
                         f" | {t['signalled']} | {t['files_left']} ({t['file_trials']}) | {cg} | {t['zombies']} | "
                         f"{t['apply_failed']} | {per:.2f} |")
        return "\n".join(lines)

    def failure_lines(self, limit: int = 40) -> list[str]:
        out = []
        for r in self.failures[:limit]:
            parts = [f"#{r.index} {r.state} kill at {r.kill_at:.3f} s {r.note}".rstrip()]
            for label, items in (("survivors", r.survivors), ("signalled", r.signalled), ("files", r.files_left),
                                 ("cgroups", r.cgroups_left), ("zombies", r.zombies), ("cleanup", r.cleanup)):
                if items:
                    parts.append(f"{label}: {items[:6]}{' ...' if len(items) > 6 else ''}")
            if r.error:
                parts.append(f"error: {r.error}")
            if r.apply_rc not in (0, None):
                parts.append(f"apply rc {r.apply_rc}: {r.apply_output[-300:]!r}")
            out.append("; ".join(parts))
        return out

    def report(self) -> str:
        t = self.totals(self.results)
        launches = [r for r in self.results if r.state is State.LAUNCH]
        early = sum(1 for r in launches if not r.note.startswith("launch() returned first"))
        return "\n".join([
            f"kill soak, containment {self.mode}: seed {self.seed}, {t['trials']} trials in {self.seconds:.0f} s",
            self.table(),
            *([f"launch: {early} of {len(launches)} killed before launch() returned"] if launches else []),
            *([f"the bystander's own STOP left something behind in {t['stop_left']} trials"] if t["stop_left"] else []),
            *([f"failures (re-run one: KILLSOAK_SEED={self.seed} KILLSOAK_ONLY=<#> .venv/bin/python -m pytest -s "
               f"'tests/test_killsoak.py::test_kill_at_a_random_moment[{self.mode}-fast]'):"]
              if self.failures else []),
            *self.failure_lines(),
        ])

    def to_dict(self) -> dict[str, object]:
        return {"mode": self.mode.value, "seed": self.seed, "seconds": self.seconds,
                "totals": self.totals(self.results),
                "by_state": {s.value: self.totals([r for r in self.results if r.state is s]) for s in State},
                "failures": [asdict(r) for r in self.failures]}
