"""Sessions over ssh beside local ones: ``python -m bench.remote`` (needs sshd; tests/support/sshd.py starts
one on a loopback port, installing openssh-server as root where it is missing).

The harness plays the terminal (bench/harness.py) for five ways to a child's terminal: ``shellper attach``
here (``local``), ``shellper attach alpha:NAME`` (``ssh``: ``ssh -t`` to the remote attach, the shared
connection), ``ssh -t alpha dtach -a`` and ``ssh -t alpha tmux attach``, each ssh through the same
ControlMaster; and two ways for a program (a Tower) to read a remote session: ``shellper bridge`` over
ssh (``RemoteClient``) and ssh's own stream-local forwarding of the session's socket. The "remote" host
is this machine through sshd, so the figures are the cost of the ssh path itself (encryption, the extra
processes and copies), not of a network.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.child import BANNER, MARKER, flood_bytes
from bench.harness import Lab, MiB, Terminal, child_argv, median, percentile, shellper_cli, wait_file
from bench.workloads import DTACH_CLEAR
from shellper.client.blocking import Client
from shellper.host import ssh
from shellper.protocol import wire

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

FLOOD = 32 * MiB
RUNS = 3
TRIPS = 300


def _ssh(*args: str, tty: bool = False) -> list[str]:
    return [*ssh.ssh_command(), "-t" if tty else "-T", *ssh.control_options(), "alpha", *args]


class Kind:
    """One way to the child: start(argv) -> attach argv and what the terminal shows once attached."""

    def __init__(self, name: str, lab: Lab, tmux: str | None) -> None:
        self.name, self.lab, self.tmux = name, lab, tmux

    def attach(self, mode: list[str]) -> tuple[Terminal, Callable[[], None]]:
        lab = self.lab
        term = lab.terminal()
        session = lab.name(self.name[:3])
        if self.name in ("local", "ssh"):
            info = lab.shellpers.start(session, child_argv(*mode, "--banner"))
            del info
            argv = lab.shellpers.attach_argv(session)
            if self.name == "ssh":
                argv = [*shellper_cli(), "--dir", str(lab.dir), "attach", f"alpha:{session}", "--detach-key", "none"]
            term.spawn(argv)
            term.read_until(BANNER, timeout=30)
            return term, lambda: (lab.release(term), lab.shellpers.stop(session))
        if self.name == "dtach":
            assert lab.dtachs is not None
            ready = lab.ready_file(session)
            pid = lab.dtachs.start(session, child_argv(*mode, "--ready-file", str(ready)))
            wait_file(ready, pid=pid)
            term.spawn(_ssh(*lab.dtachs.attach_argv(session), tty=True))
            term.read_until(DTACH_CLEAR, timeout=30)
            return term, lambda: (lab.release(term), lab.dtachs.stop(session))  # type: ignore[union-attr]
        assert self.tmux is not None
        sock = str(lab.dir / f"{session}.tmux")
        subprocess.run([self.tmux, "-S", sock, "-f", "/dev/null", "new-session", "-d", "-x", "80", "-y", "24",
                        *child_argv(*mode, "--banner")], check=True)
        term.spawn(_ssh(self.tmux, "-S", sock, "attach", tty=True))
        term.read_until(BANNER.strip(), timeout=30)

        def stop() -> None:
            lab.release(term)
            subprocess.run([self.tmux, "-S", sock, "kill-server"], capture_output=True)

        return term, stop


def flood(kind: Kind) -> tuple[float, int]:
    """Seconds from the go byte to the marker on the terminal, and bytes the terminal got."""
    term, stop = kind.attach(["flood", str(FLOOD)])
    try:
        t0 = time.perf_counter()
        term.write(b"g")
        got = term.read_until(MARKER.strip(), timeout=300)
        return got.done_at - t0, got.bytes
    finally:
        stop()


def echo(kind: Kind) -> list[float]:
    """Microseconds per key and its echo; the key is looked for in what comes back, since tmux redraws
    (escape sequences around it) and an attach may still be writing its start-up modes."""
    term, stop = kind.attach(["echo"])
    try:
        trips = []
        for i in range(20 + TRIPS):
            t0 = time.perf_counter()
            term.write(b"a")
            got = term.read_until(b"a", timeout=10)
            if i >= 20:
                trips.append((got.done_at - t0) * 1e6)
        return trips
    finally:
        stop()


def tower_flood(lab: Lab, how: str) -> float:
    """MiB/s of a flood read by a program: through ``shellper bridge`` over ssh, or a forwarded socket."""
    name = lab.name("tw")
    ready = lab.ready_file(name)
    info = lab.shellpers.start(name, child_argv("flood", str(FLOOD), "--ready-file", str(ready)))
    forwarded = lab.dir / f"{name}.fwd"
    try:
        wait_file(ready, pid=info.pid)
        client: Client
        if how == "bridge":
            from shellper.client.remote import RemoteClient

            client = RemoteClient("alpha", name, directory=str(lab.dir), timeout=30)
        else:
            subprocess.run([*ssh.ssh_command(), *ssh.control_options(), "-O", "forward", "-L",
                            f"{forwarded}:{lab.shellpers.socket(name)}", "alpha"], check=True, capture_output=True)
            client = Client(forwarded, "tower", timeout=30)
        with client:
            client.connect(replay_bytes=0)
            end = client.output.next_offset + flood_bytes(FLOOD)
            t0 = time.perf_counter()
            client.write(b"g")
            while client.output.next_offset < end:
                frame = client.recv(timeout=60)
                assert frame is None or not isinstance(frame, wire.Gap), frame
            return FLOOD / MiB / (time.perf_counter() - t0)
    finally:
        if how == "forward":
            subprocess.run([*ssh.ssh_command(), *ssh.control_options(), "-O", "cancel", "-L",
                            f"{forwarded}:{lab.shellpers.socket(name)}", "alpha"], capture_output=True)
            with contextlib.suppress(FileNotFoundError):
                forwarded.unlink()
        lab.shellpers.stop(name)


def command_latency(lab: Lab) -> dict[str, float]:
    """ms for ``shellper ls`` here, over the shared connection, and a bare ``ssh alpha true`` through it."""
    def timed(argv: list[str]) -> float:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=True)
            times.append((time.perf_counter() - t0) * 1000)
        return median(times)

    direct = [*ssh.ssh_command(), "-T", "-o", "ControlPath=none", "alpha", "true"]
    return {"ls_local_ms": timed([*shellper_cli(), "--dir", str(lab.dir), "ls"]),
            "ls_ssh_ms": timed([*shellper_cli(), "--host", "alpha", "--dir", str(lab.dir), "ls"]),
            "ssh_true_ms": timed(_ssh("true")), "ssh_true_own_handshake_ms": timed(direct)}


def connect_latency(lab: Lab) -> dict[str, float]:
    """ms from nothing to WELCOME and REPLAY for a program: here, through the bridge, and through a
    stream-local forwarding set up for the connection (as a reconnection would have to)."""
    from shellper.client.remote import RemoteClient

    name = lab.name("cl")
    lab.shellpers.start(name, child_argv("echo", "--banner"))
    forwarded = lab.dir / f"{name}.fwd"
    spec = f"{forwarded}:{lab.shellpers.socket(name)}"
    times: dict[str, list[float]] = {"local": [], "bridge": [], "forward": []}
    try:
        for _ in range(5):
            t0 = time.perf_counter()
            with lab.shellpers.connect(name, replay_bytes=0):
                times["local"].append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            with RemoteClient("alpha", name, directory=str(lab.dir), timeout=30) as client:
                client.connect(replay_bytes=0)
                times["bridge"].append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            subprocess.run([*ssh.ssh_command(), *ssh.control_options(), "-O", "forward", "-L", spec, "alpha"],
                           check=True, capture_output=True)
            with Client(forwarded, "tower", timeout=30) as plain:
                plain.connect(replay_bytes=0)
                times["forward"].append((time.perf_counter() - t0) * 1000)
            subprocess.run([*ssh.ssh_command(), *ssh.control_options(), "-O", "cancel", "-L", spec, "alpha"],
                           capture_output=True)
            forwarded.unlink(missing_ok=True)
    finally:
        lab.shellpers.stop(name)
    return {f"connect_{k}_ms": median(v) for k, v in times.items()}


@contextlib.contextmanager
def _world() -> Iterator[None]:
    from support.sshd import _env, ssh_world

    with ssh_world() as world, _env(world.env()):
        ssh.ensure_master("alpha")
        yield


def main() -> None:
    results: dict[str, Any] = {"flood_bytes": FLOOD, "runs": RUNS, "trips": TRIPS,
                               "load": os.getloadavg()}
    with _world(), Lab(dtach_binary=shutil.which("dtach")) as lab:
        kinds = [Kind(k, lab, shutil.which("tmux")) for k in ("local", "ssh", "dtach", "tmux")
                 if (k != "dtach" or lab.dtachs) and (k != "tmux" or shutil.which("tmux"))]
        floods: dict[str, list[float]] = {k.name: [] for k in kinds}
        for _ in range(RUNS):
            for k in kinds:
                seconds, _got = flood(k)
                floods[k.name].append(FLOOD / MiB / seconds)
        for k in kinds:
            trips = echo(k)
            results[f"{k.name}_echo_p50_us"] = percentile(trips, 50)
            results[f"{k.name}_echo_p99_us"] = percentile(trips, 99)
            results[f"{k.name}_flood_mib_s"] = median(floods[k.name])
        for how in ("bridge", "forward"):
            results[f"tower_{how}_mib_s"] = median([tower_flood(lab, how) for _ in range(RUNS)])
        results["tower_local_mib_s"] = median([_local_tower(lab) for _ in range(RUNS)])
        results.update(command_latency(lab))
        results.update(connect_latency(lab))
    results["load_after"] = os.getloadavg()
    print(json.dumps(results, indent=1))


def _local_tower(lab: Lab) -> float:
    name = lab.name("tl")
    ready = lab.ready_file(name)
    info = lab.shellpers.start(name, child_argv("flood", str(FLOOD), "--ready-file", str(ready)))
    try:
        wait_file(ready, pid=info.pid)
        with lab.shellpers.connect(name, "tower", replay_bytes=0) as client:
            end = client.output.next_offset + flood_bytes(FLOOD)
            t0 = time.perf_counter()
            client.write(b"g")
            while client.output.next_offset < end:
                client.recv(timeout=60)
            return FLOOD / MiB / (time.perf_counter() - t0)
    finally:
        lab.shellpers.stop(name)


if __name__ == "__main__":
    main()
