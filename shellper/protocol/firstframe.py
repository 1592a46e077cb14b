"""Which protocol a connection speaks, told from its first bytes (a pure function, no I/O).

Every connection asks this, and few are version 1, so it lives apart from the version-1 codec
(shellper.protocol.legacy, which re-exports it): the daemon loads that codec only when a version-1 client
arrives (shellper.daemon.session). A version-2 control payload is a msgpack map, whose first byte is never
``{`` (0x7B, a msgpack positive fixint), so the two cannot be confused.
"""

from __future__ import annotations

import struct

from shellper.protocol.wire import HELLO_LIMIT, FrameType

HEADER = struct.Struct(">BI")
"""Version 1's frame header (version 2's too): the type, then the payload's length, big-endian."""
HEADER_SIZE = HEADER.size
MAX_FRAME_SIZE = 16 * 1024 * 1024
"""A version-1 frame whose declared length is strictly greater than this is skipped (exactly 16 MiB is
accepted)."""

LEGACY_TYPES = frozenset(int(t) for t in FrameType if t <= FrameType.SPAWN)
"""Version 1's frame types: the first ten of version 2's, with the same numbers."""


def first_frame_is_legacy(buf: bytes | bytearray) -> bool | None:
    """Whether a connection whose first bytes are ``buf`` speaks version 1; None until that can be told.

    Version 1: the first frame is a known non-DATA type, within the handshake's size (4 KiB), whose payload
    starts with ``{``. Decided from the header and the payload's first byte, so a version-2 client is never held
    up by more than its header.
    """
    if len(buf) < HEADER_SIZE:
        return None
    frame_type, length = HEADER.unpack_from(buf, 0)
    # A first frame over the handshake's size is refused before its payload is awaited: were it version 1's
    # it would be skipped unread, so waiting for its first byte could only end in the handshake timeout.
    if frame_type == FrameType.DATA or frame_type not in LEGACY_TYPES or length == 0 or length > HELLO_LIMIT.size:
        return False
    if len(buf) == HEADER_SIZE:
        return None
    return buf[HEADER_SIZE] == 0x7B
