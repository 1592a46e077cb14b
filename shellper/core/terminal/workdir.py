"""The working directory a shell announces with OSC 7 (``ESC ] 7 ; file://HOST/PATH BEL``), as zsh, fish, VTE's
bash snippet and most prompts emit it at each prompt: found in output by the package's one parser."""

from __future__ import annotations

import re

from shellper.core.structs import record
from shellper.core.terminal import parser as vtparse

MAX_PATH = 4096
"""PATH_MAX: a longer announcement is no directory of this machine's."""

_OSC7: re.Pattern[str] | None = None
_ESCAPED = re.compile(r"%([0-9A-Fa-f]{2})")


@record(frozen=True)
class Announced:
    host: str
    """The host the shell runs on ("" when it names none: this one)."""
    path: str


def parse_url(url: str) -> Announced | None:
    """``file://HOST/PATH`` (percent-escapes decoded), or None for anything else."""
    if not url.startswith("file://"):
        return None
    host, slash, path = url[len("file://"):].partition("/")
    if not slash:
        return None
    raw = _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), "/" + path)
    try:  # escapes are bytes of UTF-8: a path like /home/ünï arrives as %C3%BC...
        decoded = raw.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        decoded = raw
    if len(decoded) > MAX_PATH or not decoded.isprintable():  # shown by ls and status: no control characters
        return None
    return Announced(host=host.partition(":")[0], path=decoded)  # a port after the host means nothing here


def last_announced(output: bytes) -> Announced | None:
    """The last complete OSC 7 in ``output`` that names a directory, or None."""
    global _OSC7
    if _OSC7 is None:
        _OSC7 = re.compile(vtparse.pattern(osc_prefixes=("7;",)))
    text = vtparse.decode(output)
    found: Announced | None = None
    for m in _OSC7.finditer(text):  # each match is a whole token, its introducer included
        seq = vtparse.parse(m.group(0))
        if seq.kind is vtparse.Kind.OSC and seq.complete:
            announced = parse_url(seq.data.partition(";")[2])
            if announced is not None:
                found = announced
    return found
