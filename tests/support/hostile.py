"""The hostile-input tests' oracle and watcher: what the shellper must answer to a byte stream (judged from
PROTOCOL.md), a tower that must see nothing go wrong, and byte streams mutated from the golden vectors."""

from __future__ import annotations

import json
import random
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from shellper.core import labels
from shellper.protocol import legacy, wire
from support.paths import ROOT
from support.soak import RawConn, hello

INTERESTING_LENGTHS = [0, 1, 2**24 - 1, wire.MAX_FRAME_SIZE, wire.MAX_FRAME_SIZE + 1, 2**32 - 1]

VECTORS = ROOT / "protocol" / "vectors"
CLIENT_FRAMES = {wire.FrameType.DATA, wire.FrameType.RESIZE, wire.FrameType.SIGNAL, wire.FrameType.SPAWN,
                 wire.FrameType.STOP, wire.FrameType.STATUS, wire.FrameType.PING, wire.FrameType.PONG,
                 wire.FrameType.SCREEN, wire.FrameType.LABELS}
TOWER_ONLY = {wire.FrameType.SIGNAL, wire.FrameType.SPAWN, wire.FrameType.STOP}


# --------------------------------------------------------------------------------------------- the oracle


@dataclass
class Verdict:
    """What the shellper must do with one connection's byte stream.

    ``answers``: the direct answers (PONG nonce, STATUS_REPLY, non-fatal ERROR code), in order.
    ``fatal``: the code of the fatal ERROR that must follow them (then the connection closes), or None.
    ``truncated``: the stream ends inside a frame. ``registered``: a HELLO was accepted.
    ``skip``: the stream cannot be judged safely (a tower HELLO would replace the watching tower; a
    ``resume_from`` too close to the live ring end to know which side of it it falls).
    """

    answers: list[tuple[Any, ...]] = field(default_factory=list)
    fatal: str | None = None
    truncated: bool = False
    registered: bool = False
    skip: str = ""


def judge(stream: bytes, ring_low: int, ring_high: int, event_low: int = 0, event_high: int = 2**64) -> Verdict:
    """Judge ``stream`` per PROTOCOL.md sections 2-10, given ring_end is within [ring_low, ring_high] and
    the last event's seq within [event_low, event_high]."""
    v = Verdict()
    if legacy.first_frame_is_legacy(stream):  # protocol version 1 (tests/test_legacy.py): not judged here
        v.skip = "version 1"
        return v
    dec = wire.Decoder(limits=wire.HANDSHAKE_LIMITS)  # the shellper's limits (PROTOCOL.md 11): 4 KiB until HELLO
    dec.feed(stream)
    role = ""
    version = 0
    while True:
        try:
            ev = dec.next_event()
        except wire.ProtocolError as exc:
            # version 3: a malformed request whose id can be read is answered, and the connection stays
            if (v.registered and version >= wire.REPLY_VERSION and exc.request_id is not None
                    and exc.code in ("bad_field", "missing_field")):
                v.answers.append(("reply", exc.request_id, exc.code))
                continue
            v.fatal = exc.code
            return v
        if ev is None:
            break
        if isinstance(ev, wire.Skipped):
            v.fatal = "too_large"
            return v
        if isinstance(ev, wire.Unknown):
            continue
        if not v.registered:
            if not isinstance(ev, wire.Hello):
                v.fatal = "not_hello"
            elif ev.version < wire.MIN_PROTOCOL_VERSION:
                v.fatal = "unsupported_version"
            elif ev.role not in wire.ROLES:
                v.fatal = "bad_role"
            elif ev.role == "tower":
                v.skip = "tower"
            elif ev.resume_from is not None and ev.resume_from > ring_high:
                v.fatal = "bad_offset"
            elif ev.resume_from is not None and ev.resume_from > ring_low:
                v.skip = "resume_from near the ring end"
            elif ev.events_after is not None and ev.events_after > event_high:
                v.fatal = "bad_offset"
            elif ev.events_after is not None and ev.events_after > event_low:
                v.skip = "events_after near the last event"
            else:
                v.registered, role = True, ev.role
                version = min(ev.version, wire.PROTOCOL_VERSION)
                dec.limits = wire.SESSION_LIMITS
            if v.fatal or v.skip:
                return v
            continue
        kind = ev.TYPE
        if isinstance(ev, wire.Hello):
            v.fatal = "protocol"
            return v
        rid = getattr(ev, "id", None) if version >= wire.REPLY_VERSION else None
        if kind not in CLIENT_FRAMES:
            v.answers.append(("error", "protocol", int(kind)))
        elif kind in TOWER_ONLY or (role == "viewer" and kind in (wire.FrameType.DATA, wire.FrameType.RESIZE,
                                                                  wire.FrameType.LABELS)):
            v.answers.append(("error", "forbidden", int(kind)) if rid is None else ("reply", rid, "forbidden"))
        elif isinstance(ev, wire.Resize) and not (1 <= ev.cols <= 65535 and 1 <= ev.rows <= 65535):
            if rid is not None:
                v.answers.append(("reply", rid, "bad_field"))
                continue
            v.fatal = "bad_field"
            return v
        elif isinstance(ev, wire.Resize) and rid is not None:
            v.answers.append(("reply", rid, ""))
        elif isinstance(ev, wire.Labels) and version < wire.REPLY_VERSION:  # version 3 (PROTOCOL.md 0x15)
            v.answers.append(("error", "protocol", int(kind)))
        elif isinstance(ev, wire.Labels):
            try:
                labels.apply_changes({}, ev.set)
            except labels.BadLabel:
                v.answers.append(("error", "bad_field", int(kind)) if rid is None else ("reply", rid, "bad_field"))
                continue
            if any(ev.set.values()):
                # Labels a frame adds stay on the session for the next connections, which may then hold too
                # many for this one's (MAX_LABELS): removals and empty requests are judged, additions not.
                v.skip = "labels added"
                return v
            if rid is not None:
                v.answers.append(("reply", rid, ""))
        elif isinstance(ev, wire.Ping):
            v.answers.append(("pong", ev.nonce))
        elif isinstance(ev, wire.Status):
            v.answers.append(("status",))
        elif isinstance(ev, wire.ScreenRequest):  # version 3 (PROTOCOL.md 0x13)
            if version < wire.SCREEN_VERSION:
                v.answers.append(("error", "protocol", int(kind)))
            elif ev.format not in wire.SCREEN_FORMATS:
                if rid is not None:
                    v.answers.append(("reply", rid, "bad_field"))
                    continue
                v.fatal = "bad_field"
                return v
            else:
                v.answers.append(("screen", ev.id))
    v.truncated = dec.buffered > 0
    return v


def answers_of(frames: list[wire.DecodedEvent]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for f in frames:
        if isinstance(f, wire.Pong):
            out.append(("pong", f.nonce))
        elif isinstance(f, wire.StatusReply):
            out.append(("status",))
        elif isinstance(f, wire.Reply):
            out.append(("reply", f.id, f.code))
        elif isinstance(f, wire.ScreenReply):
            out.append(("screen", f.id))
        elif isinstance(f, wire.Error) and not f.fatal:
            out.append(("error", f.code, f.frame_type))
    return out


def fatal_of(frames: list[wire.DecodedEvent]) -> list[str]:
    return [f.code for f in frames if isinstance(f, wire.Error) and f.fatal]


# --------------------------------------------------------------------------------------------- the watcher


class Watcher:
    """A tower that reads everything in a thread. The test pings it; it must never get an ERROR, a GAP
    or EOF, and its output must keep flowing."""

    def __init__(self, path: str) -> None:
        self.conn = RawConn(path)
        self.conn.send(hello("tower", replay_bytes=0))
        frames = self.conn.until(lambda f: isinstance(f, wire.Replay))
        replay = frames[-1]
        assert isinstance(replay, wire.Replay)
        self.next = replay.offset + len(replay.data)
        welcome = frames[0]
        assert isinstance(welcome, wire.Welcome)
        self.event_seq = welcome.event_seq
        """The last numbered event's seq as far as seen (the session's may be larger: events are live)."""
        self.problems: list[str] = []
        self.pongs: set[int] = set()
        self.events = 0
        self.cond = threading.Condition()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.nonce = 1 << 40

    def _run(self) -> None:
        while not self.stopping:
            frames = self.conn.frames(0.1)
            with self.cond:
                if self.conn.eof:
                    if not self.stopping:
                        self.problems.append("the tower's connection was closed")
                    self.cond.notify_all()
                    return
                for f in frames:
                    if isinstance(f, wire.Data):
                        self.next += len(f.data)
                    elif isinstance(f, wire.Gap):
                        self.problems.append(f"GAP {f}")
                    elif isinstance(f, wire.Error):
                        self.problems.append(f"ERROR {f.code}: {f.message}")
                    elif isinstance(f, wire.Pong) and f.nonce is not None:
                        self.pongs.add(f.nonce)
                    elif isinstance(f, wire.Event):
                        self.events += 1
                        self.event_seq = max(self.event_seq, f.seq)
                self.cond.notify_all()

    def ping(self, timeout: float = 10.0) -> None:
        self.nonce += 1
        nonce = self.nonce
        self.conn.sock.sendall(wire.encode(wire.Ping(nonce=nonce)))
        with self.cond:
            ok = self.cond.wait_for(lambda: nonce in self.pongs or bool(self.problems), timeout)
        assert not self.problems, self.problems
        assert ok, f"no PONG within {timeout:g} s"

    def check(self) -> None:
        assert not self.problems, self.problems

    def close(self) -> None:
        self.stopping = True
        self.thread.join(5)
        self.conn.close()


def _vector_bytes(entry: dict[str, Any]) -> bytes | None:
    if "hex" in entry:
        return bytes.fromhex(entry["hex"])
    parts = entry["hex_parts"]
    if sum(len(p.get("repeat", p.get("hex", ""))) * p.get("count", 1) for p in parts) > 131072:
        return None  # the 16 MiB oversized stream: its header alone is in the fuzzer's alphabet
    return b"".join(bytes.fromhex(p["hex"]) if "hex" in p else bytes.fromhex(p["repeat"]) * p["count"]
                    for p in parts)


def mutation_cases(seed: int, frames: int) -> Iterator[tuple[bytes, int]]:
    """Streams spliced from the golden vectors, then mutated: bit flips, byte changes, insertions,
    deletions, truncations, duplicated slices, rewritten length fields and type bytes."""
    rng = random.Random(seed)
    valid = [bytes.fromhex(e["hex"]) for e in json.loads((VECTORS / "frames.json").read_text())]
    invalid = [b for e in json.loads((VECTORS / "invalid.json").read_text()) if (b := _vector_bytes(e))]
    pool = valid * 3 + invalid
    made = 0
    while made < frames:
        k = rng.randint(1, 8)
        parts = [hello(rng.choice(["viewer", "terminal"]), replay_bytes=rng.choice([None, 0, 100]))] \
            if rng.random() < 0.9 else []
        parts += [rng.choice(pool) for _ in range(k)]
        data = bytearray(b"".join(parts))
        head = len(parts[0]) if len(parts) > k else 0
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            if len(data) <= head:
                break
            at = rng.randrange(head, len(data))
            op = rng.randrange(8)
            if op == 0:
                data[at] ^= 1 << rng.randrange(8)
            elif op == 1:
                data[at] = rng.randrange(256)
            elif op == 2:
                data[at:at] = rng.randbytes(rng.randint(1, 8))
            elif op == 3:
                del data[at:at + rng.randint(1, 8)]
            elif op == 4:
                del data[at:]
            elif op == 5:
                data[at:at] = data[at:at + rng.randint(1, 32)]
            elif op == 6 and at + 5 <= len(data):
                data[at + 1:at + 5] = struct.pack(">I", rng.choice([*INTERESTING_LENGTHS, rng.randrange(300)]))
            else:
                data[at] = rng.choice([0, 0x11, 0x7F, 0xFF, *range(1, 17)])
        made += k
        yield bytes(data), k + (1 if head else 0)
