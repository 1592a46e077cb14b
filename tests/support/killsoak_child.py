"""Processes for the random-moment kill soak (support/killsoak.py): ``python killsoak_child.py ROLE ARGS``.

* ``session LEDGER SIGNALS GEN THEN [all]``: a session's child. It forks a tree that a hang-up or SIGTERM does
  not end: a member of its group, one in a group of its own, a daemon (setsid + double fork) and a churner
  that keeps forking short-lived children. The child and all of them ignore SIGHUP and SIGTERM (writing
  each one they get to SIGNALS; with ``all``, every signal a bystander notes). Every process of the tree
  appends ``PID START_TICKS ROLE GEN INSTANCE`` to LEDGER as soon as it exists (INSTANCE: its
  ``SHELLPER_INSTANCE``), and its parent appends it too right after the fork, so the harness can account
  for every pid the tree ever had. Once the tree stands it prints ``READY <GEN>.`` and then: ``idle``
  (pause forever), ``flood`` (after one byte of input, write without pause) or ``exit:N`` (exit with status N).
* ``bystander SIGNALS PIDFILE``: a plain process that writes every signal it gets to SIGNALS and waits;
  it writes ``PID START_TICKS`` to PIDFILE once its handlers are in place.
* ``foreign SIGNALS PIDFILE``: the same as a daemon outside any session (setsid, double fork); the
  processes in between exit at once.

A signal that can be caught is written as ``PID ROLE SIGNUM``; a churned child killed by a signal is
written as ``PID churnkid killed SIGNUM`` by the churner; SIGKILL itself shows as a dead process. Timing
here (how often the churner forks) is the workload, never synchronisation.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time

RECORDED = [s for s in signal.valid_signals()
            if s not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD) and 0 < s < signal.SIGRTMIN]
"""What a bystander writes down: everything catchable but SIGCHLD (which its own children send)."""
PATTERN = bytes(33 + (i * 7) % 94 for i in range(4093))


def start_ticks(pid: int | str = "self") -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return "?"


class Tree:
    """The ledger and signal file shared (O_APPEND, one write per line) by every process of a tree."""

    def __init__(self, ledger: str, signals: str, gen: str, watch_all: bool) -> None:
        self.ledger = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.signals = os.open(signals, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.tail = f"{gen} {os.environ.get('SHELLPER_INSTANCE', '-')}"
        self.watched = RECORDED if watch_all else [signal.SIGHUP, signal.SIGTERM]
        self.role = "child"

    def enter(self, role: str) -> None:
        """This process is ``role``: record it, and record (not obey) hang-ups and SIGTERM."""
        self.role = role
        for sig in self.watched:
            signal.signal(sig, self._note)
        os.write(self.ledger, f"{os.getpid()} {start_ticks()} {role} {self.tail}\n".encode())

    def _note(self, signum: int, _frame: object) -> None:
        os.write(self.signals, f"{os.getpid()} {self.role} {signum}\n".encode())

    def forked(self, pid: int, role: str) -> None:
        """The parent's entry for a child just forked (the child may not have run yet)."""
        os.write(self.ledger, f"{pid} {start_ticks(pid)} {role} {self.tail}\n".encode())

    def fork(self, role: str) -> int:
        pid = os.fork()
        if pid == 0:
            self.enter(role)
        else:
            self.forked(pid, role)
        return pid


def idle() -> None:
    while True:
        signal.pause()


def churn(tree: Tree) -> None:
    """Fork a child every few tens of ms that lives a few tens of ms; note any killed by a signal."""
    rng = random.Random(os.getpid())
    while True:
        pid = tree.fork("churnkid")
        if pid == 0:
            time.sleep(rng.uniform(0.01, 0.06))  # the kid's own lifetime
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            os.write(tree.signals, f"{pid} churnkid killed {os.WTERMSIG(status)}\n".encode())
        time.sleep(rng.uniform(0.005, 0.03))


def session(ledger: str, signals: str, gen: str, then: str, watch_all: bool) -> None:
    tree = Tree(ledger, signals, gen, watch_all)
    tree.enter("child")
    ready_r, ready_w = os.pipe()
    for role in ("group", "own-group", "daemon", "churn"):
        pid = tree.fork(role if role != "daemon" else "daemon-1")
        if pid == 0:
            os.close(ready_r)
            if role == "own-group":
                os.setpgid(0, 0)
            elif role == "daemon":
                os.setsid()
                if tree.fork("daemon"):
                    os._exit(0)
            os.write(ready_w, b"x")
            os.close(ready_w)
            if role == "churn":
                churn(tree)
            idle()
        if role == "daemon":
            os.waitpid(pid, 0)
    os.close(ready_w)
    got = 0
    while got < 4:  # one byte from each of the four
        chunk = os.read(ready_r, 16)
        if not chunk:
            break
        got += len(chunk)
    os.close(ready_r)
    os.write(1, f"READY {gen}.\n".encode())
    if then == "flood":
        os.read(0, 1)  # the tower is there: a flood before it would have left READY behind the ring
        block = PATTERN * 16
        while True:
            os.write(1, block)
    if then.startswith("exit:"):
        os._exit(int(then[5:]))
    idle()


def bystander(signals: str, pidfile: str, role: str) -> None:
    fd = os.open(signals, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def note(signum: int, _frame: object) -> None:
        os.write(fd, f"{os.getpid()} {role} {signum}\n".encode())

    for sig in RECORDED:
        signal.signal(sig, note)
    tmp = pidfile + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()} {start_ticks()}\n")
    os.rename(tmp, pidfile)  # whole, or not there
    idle()


def main(argv: list[str]) -> None:
    role = argv[0]
    if role == "session":
        session(argv[1], argv[2], argv[3], argv[4], argv[5:] == ["all"])
    elif role == "bystander":
        bystander(argv[1], argv[2], "plain")
    elif role == "foreign":
        if os.fork():
            os._exit(0)
        os.setsid()
        if os.fork():
            os._exit(0)
        bystander(argv[1], argv[2], "foreign")
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
