"""What the warm launcher does to its classes before it freezes its heap, so that a session forked from it
writes fewer of the pages it shares with the launcher (CPython 3.11 writes into the objects it uses; each
write copies a 4 KiB page into the session). bench/NOTES.md, "A warm session's copied pages", has what each
step saves; bench.cowmap finds what a session still writes.

For each class the session's modules define:
- a record's ``__init__`` is compiled (shellper.core.structs defers it to the first instance, which would
  compile it in every session and write the class's dict);
- its attribute-cache version tag is assigned (the first lookup in a session would write the type);
- the shared key table of its instances' dicts gets a record's fields and the names its methods set on
  ``self`` (the first instance in a session would write the table, and each name's refcount, scattered over
  other pages).
Nothing runs the class's own code: the probe instance is made by ``object.__new__`` and its attributes set by
``object.__setattr__``, and a class with its own ``__new__`` or ``__del__`` is left alone, and one with its
own ``__setattr__`` unless it is a record (whose ``__init__`` goes round a frozen one's as we do).
"""

from __future__ import annotations

import opcode
import sys
import types

from shellper.core import structs

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Iterator

_MANAGED_DICT = 1 << 4
"""Py_TPFLAGS_MANAGED_DICT (3.11, 3.12): instances keep their attributes in values on the class's shared keys."""
_SHARED_KEYS_MAX = 30
"""CPython's SHARED_KEYS_MAX_SIZE: a class's shared key table holds at most this many names."""
_CACHE, _EXTENDED_ARG, _STORE_ATTR = (opcode.opmap[name] for name in ("CACHE", "EXTENDED_ARG", "STORE_ATTR"))
_LOAD_ONE = {opcode.opmap[name] for name in ("LOAD_FAST", "LOAD_DEREF", "LOAD_FAST_CHECK") if name in opcode.opmap}
"""How a method pushes its first argument (local 0): LOAD_DEREF when a closure in it uses ``self``."""
_LOAD_TWO = opcode.opmap.get("LOAD_FAST_LOAD_FAST", -1)
"""3.13: two locals at once, the second (pushed last) in the oparg's low four bits."""


def settle(prefix: str = "shellper.") -> int:
    """Settle every class defined at the top level of the loaded modules under ``prefix``; how many."""
    done = 0
    for cls in _classes(prefix):
        spec = getattr(cls.__dict__.get("__init__"), "__record_spec__", None)
        if spec is not None:
            structs.signed(cls)
        getattr(cls, "__settled__", None)  # a lookup through the type's cache assigns its version tag
        _fill_shared_keys(cls)
        done += 1
    return done


def _classes(prefix: str) -> Iterator[type]:
    for name, module in list(sys.modules.items()):
        if not name.startswith(prefix) or module is None:
            continue
        for value in list(vars(module).values()):
            if isinstance(value, type) and value.__module__ == name:
                yield value


def _fill_shared_keys(cls: type) -> None:
    new: object = cls.__new__
    set_attribute: object = cls.__setattr__
    record = structs.is_record(cls)  # a frozen one's __setattr__ refuses; its __init__ goes round it, as we do
    if not cls.__flags__ & _MANAGED_DICT or new is not object.__new__ or hasattr(cls, "__del__") \
            or (set_attribute is not object.__setattr__ and not record):
        return
    names = dict.fromkeys(f.name for f in structs.fields(cls)) if record else {}
    names.update(dict.fromkeys(_self_attributes(cls)))
    settable = [n for n in names if not _is_data_descriptor(cls, n)]
    if not settable:
        return
    try:
        probe: object = object.__new__(cls)
    except TypeError:  # abstract
        return
    for name in settable[:_SHARED_KEYS_MAX]:
        object.__setattr__(probe, name, None)


def _is_data_descriptor(cls: type, name: str) -> bool:
    """Whether ``name`` on ``cls`` is a property or the like (setting it would run its code), found in the
    classes' own dicts: ``getattr`` on the class could run a descriptor's ``__get__``."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return hasattr(type(vars(klass)[name]), "__set__")
    return False


def _self_attributes(cls: type) -> list[str]:
    """The names the class's methods (and its bases') assign on their first argument, in the order met,
    ``__init__`` first."""
    names: dict[str, None] = {}
    for klass in cls.__mro__:
        if klass is object:
            continue
        methods = dict(vars(klass))
        first = methods.pop("__init__", None)
        for method in (first, *methods.values()):
            if isinstance(method, types.FunctionType):
                names.update(dict.fromkeys(_stored_on_self(method.__code__)))
    return list(names)


def _stored_on_self(code: types.CodeType) -> Iterator[str]:
    """The names stored by ``STORE_ATTR`` on the code's first argument (``self.x = ...``: the object is pushed
    just before), read from the bytecode itself (``dis`` is ten times slower: 0.3 s of CPU for the lot)."""
    if not code.co_argcount:
        return
    raw, extended, on_self = code.co_code, 0, False
    for i in range(0, len(raw), 2):
        op, arg = raw[i], raw[i + 1] | extended
        if op == _CACHE:
            continue
        if op == _EXTENDED_ARG:
            extended = arg << 8
            continue
        extended = 0
        if op == _STORE_ATTR and on_self:
            yield code.co_names[arg]
        on_self = (op in _LOAD_ONE and arg == 0) or (op == _LOAD_TWO and arg & 15 == 0)
