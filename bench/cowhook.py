"""bench.cowmap's hook in the warm launcher (a test build: loaded through a ``sitecustomize`` on PYTHONPATH,
never by shellper itself). On the fork of a session's intermediate it forks a dumper, a copy of the launcher
as it forked, which stops itself at once (bench.cowmap reads its memory then: the launcher's at the fork), and
once continued writes a map of every object it can reach (start, size, where its refcount is, what it is)
and exits. The dumper's own writes stay its own; the objects it makes are left out of the map.
"""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import sys
import types
from collections.abc import Callable

_GC_HEADER = 16
_MANAGED_DICT = 1 << 4
_HAVE_GC = 1 << 14


def install(out: str) -> None:
    """Wrap ``os.fork`` in the launcher (and only there)."""
    if "shellper.daemon.launcher" not in sys.orig_argv:
        return
    real = os.fork

    def fork() -> int:
        caller = sys._getframe(1).f_code.co_name
        pid = real()
        if caller != "_fork_session":
            return pid
        if pid == 0:
            return 0
        if real() == 0:  # left a zombie until the launcher exits: a test build
            os.closerange(3, 1 << 16)  # the session's readiness pipe above all: its caller waits for EOF
            os.kill(os.getpid(), signal.SIGSTOP)
            try:
                _dump(out)
            finally:
                os._exit(0)
        return pid

    os.fork = fork


def _dump(out: str) -> None:
    rows = _objects()
    with open(os.path.join(out, "objects.tsv"), "w") as f:
        for start, size, head, label, name in rows:
            f.write(f"{start}\t{size}\t{head}\t{label}\t{name}\n")
    with open(os.path.join(out, "done"), "w"):
        pass


def _objects() -> list[tuple[int, int, int, str, str]]:
    """Every object reachable from the collector's lists (and the code objects and constants under them),
    and the separate blocks of dicts, lists and sets: (start, size, where its refcount is, label, the name of a
    code object or type)."""
    gc.unfreeze()
    roots = gc.get_objects()  # first: anything made from here on is the dumper's own
    seen: dict[int, object] = {}
    owners: dict[int, str] = {}
    stack: list[object] = list(roots)
    mine = (id(roots), id(seen), id(owners), id(stack))
    for own in mine:
        seen[own] = None
    for name, module in list(sys.modules.items()):
        owners[id(vars(module))] = f"module dict {_package(getattr(module, '__file__', None) or name)}"
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen[id(o)] = o
        if isinstance(o, types.CodeType):
            stack.extend((*o.co_consts, *o.co_names, *o.co_varnames, *o.co_cellvars, *o.co_freevars,
                          o.co_filename, o.co_name, o.co_qualname, o.co_linetable, o.co_exceptiontable))
        elif isinstance(o, type):
            for r in gc.get_referents(o):
                if type(r) is dict:
                    owners.setdefault(id(r), f"type dict {_package(getattr(o, '__module__', ''))}")
        stack.extend(gc.get_referents(o))
    for own in mine:
        del seen[own]
    rows: list[tuple[int, int, int, str, str]] = []
    for o in seen.values():
        t = type(o)
        header = (_GC_HEADER if t.__flags__ & _HAVE_GC else 0) + (16 if t.__flags__ & _MANAGED_DICT else 0)
        what = owners.get(id(o)) or _label(o)
        rows.append((id(o) - header, sys.getsizeof(o) + (16 if t.__flags__ & _MANAGED_DICT else 0), header, what,
                     _name(o)))
        rows.extend((*block, "") for block in _blocks(o, what))
    return rows


def _blocks(o: object, what: str) -> list[tuple[int, int, int, str]]:
    """The blocks an object owns outside itself: a dict's keys table and values, a list's items, a set's table."""
    word: Callable[[int], int] = lambda address: ctypes.c_ssize_t.from_address(address).value  # noqa: E731
    t = type(o)
    if t is dict:
        keys, values = word(id(o) + 32), word(id(o) + 40)
        log2_size = ctypes.c_uint8.from_address(keys + 8).value
        log2_index = ctypes.c_uint8.from_address(keys + 9).value
        kind = ctypes.c_uint8.from_address(keys + 10).value
        usable = (2 << log2_size) // 3
        size = 32 + (1 << log2_index) + usable * (24 if kind == 0 else 16)
        rows = [(keys, size, 0, f"{what} keys")]
        if values:
            rows.append((values - 8, 8 + usable * 8, -1, f"{what} values"))
        return rows
    if t is list:
        items, allocated = word(id(o) + 24), word(id(o) + 32)
        return [(items, allocated * 8, -1, "list items")] if items else []
    if t in (set, frozenset):
        mask, table = word(id(o) + 32), word(id(o) + 40)
        return [] if table == id(o) + 64 else [(table, (mask + 1) * 16, -1, f"{t.__name__} table")]
    return []


def _name(o: object) -> str:
    if isinstance(o, types.CodeType):
        return f"{os.path.basename(o.co_filename)}:{o.co_qualname}"
    if isinstance(o, type):
        return f"{o.__module__}.{o.__qualname__}"
    return ""


def _label(o: object) -> str:
    if isinstance(o, types.FunctionType):
        return f"function {_package(o.__code__.co_filename)}"
    if isinstance(o, types.CodeType):
        return f"code {_package(o.co_filename)}"
    if isinstance(o, type):
        return f"type {_package(o.__module__)}"
    if isinstance(o, types.ModuleType):
        return "module"
    return type(o).__name__


def _package(where: object) -> str:
    where = str(where)
    if "shellper" in where:
        return "shellper"
    if "msgpack" in where:
        return "msgpack"
    return "stdlib"
