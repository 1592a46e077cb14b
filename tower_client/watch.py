"""The watch request's serving side: ``tower-client watch``, run on a session's host over ssh.

A Fleet follows a local session's shellper through a pidfd and its runtime directory through inotify;
neither crosses a network. For the sessions of another host the Fleet runs this there, over the host's
shared ssh connection (shellper.host.ssh), and reads what the two would have told it as JSON lines
(protocol/WATCH.md): a header naming the watch's version, every record of the owner's sessions with
whether its shellper lives, ``synced``, then each change as it happens (a shellper's exit, a record
written or removed). It ends when its stdin ends: the ssh channel closed, or the Tower went.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from typing import Any

from shellper import __version__
from shellper.host.identity import IdentityError, PidFd, ProcessIdentity, open_verified
from shellper.host.paths import SessionPaths
from shellper.host.record import RecordError, SessionRecord, read_record
from tower_client.inotify import Change, DirWatch

WATCH_VERSION = 1
"""The watch request's version: a Tower asking for another one gets a refusal line naming this one."""


class _Watch:
    """One watch: the records seen, a pidfd per live shellper, the lines written to ``outfd``."""

    def __init__(self, directory: str, owner: str | None, outfd: int) -> None:
        self.directory, self.owner, self.outfd = directory, owner, outfd
        self.live: dict[str, tuple[str, PidFd]] = {}
        """Session name -> (instance id, pidfd) of each shellper followed now."""
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def send(self, obj: dict[str, Any]) -> None:
        try:
            data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
            view = memoryview(data)
            while view:
                view = view[os.write(self.outfd, view):]
        except (BrokenPipeError, ConnectionResetError):  # the Tower's end went: the watch ends
            self.finish()

    def finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def look(self, name: str) -> None:
        """Read ``name``'s record; say it (with whether its shellper lives) unless it is the instance followed
        already, and follow a live one's pidfd."""
        try:
            record = read_record(SessionPaths.for_name(self.directory, name).record)
        except (OSError, RecordError, ValueError):
            return
        if self.owner is not None and record.owner != self.owner:
            return
        known = self.live.get(name)
        if known is not None and known[0] == record.instance_id:
            return
        if known is not None:
            self._unfollow(name)
        alive = self._follow(record)
        self.send({"event": "record", "name": name, "alive": alive, "record": record.to_dict()})

    def _follow(self, record: SessionRecord) -> bool:
        try:
            pidfd = open_verified(ProcessIdentity(record.boot_id, record.shellper_pid, record.shellper_start_time))
        except IdentityError:
            return False
        self.live[record.name] = (record.instance_id, pidfd)
        asyncio.get_running_loop().add_reader(pidfd.fileno(), self._exited, record)
        return True

    def _unfollow(self, name: str) -> None:
        _, pidfd = self.live.pop(name)
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(pidfd.fileno())
        pidfd.close()

    def _exited(self, record: SessionRecord) -> None:
        if record.name in self.live and self.live[record.name][0] == record.instance_id:
            self._unfollow(record.name)
        self.send({"event": "exit", "name": record.name, "instance_id": record.instance_id,
                   "shellper_pid": record.shellper_pid})

    def changed(self, changes: list[Change]) -> None:
        for change in changes:
            if change.overflow:  # the kernel dropped events: every record again
                self.scan()
            elif change.directory_gone:
                self.send({"event": "directory_gone"})
                self.finish()
            elif change.name.endswith(".json") and not change.name.startswith("."):
                name = change.name[:-5]
                if change.removed:
                    self.send({"event": "removed", "name": name})
                elif change.written:
                    self.look(name)

    def scan(self) -> None:
        for entry in sorted(os.listdir(self.directory)):
            if entry.endswith(".json") and not entry.startswith("."):
                self.look(entry[:-5])

    def close(self) -> None:
        for name in list(self.live):
            self._unfollow(name)


async def serve_watch(directory: str, owner: str | None, version: int, infd: int = 0, outfd: int = 1) -> int:
    """Serve one watch of ``directory`` for ``owner`` (None: every owner) on ``outfd`` until ``infd`` ends.
    A ``version`` this side does not serve is refused with one line saying which it serves (exit 2)."""
    if version != WATCH_VERSION:
        line = {"error": "unsupported_version", "watch": WATCH_VERSION, "shellper": __version__,
                "detail": f"this host serves watch version {WATCH_VERSION}, not {version}"}
        os.write(outfd, (json.dumps(line) + "\n").encode())
        return 2
    loop = asyncio.get_running_loop()
    watch = _Watch(directory, owner, outfd)
    dirwatch = DirWatch(directory, watch.changed)
    dirwatch.start()  # first: a record written while the snapshot is read is said, not missed

    def readable() -> None:
        try:
            data = os.read(infd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            watch.finish()

    os.set_blocking(infd, False)
    loop.add_reader(infd, readable)
    try:
        watch.send({"watch": WATCH_VERSION, "shellper": __version__, "dir": directory, "owner": owner})
        watch.scan()
        watch.send({"event": "synced"})
        await watch.done
    finally:
        loop.remove_reader(infd)
        dirwatch.close()
        watch.close()
    return 0
