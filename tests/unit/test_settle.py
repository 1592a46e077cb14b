"""shellper.daemon.settle: the warm launcher settles its classes before it forks sessions, without running any
of their code, and the instances made afterwards are what they would have been."""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterator

import pytest

from shellper.core.structs import STANDARD_ENV
from shellper.daemon.settle import _self_attributes, settle

SOURCE = '''
from shellper.core.structs import field, record

CALLED = []


class Base:
    def __init__(self, a):
        self.a = a


class Plain(Base):
    def __init__(self, a, b):
        super().__init__(a)
        self.b = b
        self.c = lambda: self  # self in a closure: loaded by LOAD_DEREF

    def later(self, d):
        self.d = d
        other = Base(1)
        other.not_mine = d


class Guarded:
    def __init__(self):
        self.value = 1
        self.plain = 2

    @property
    def value(self):
        CALLED.append("getter")
        return 0

    @value.setter
    def value(self, v):
        CALLED.append("setter")


class Loud:
    def __get__(self, obj, owner=None):
        CALLED.append("__get__")
        return 1


class Shadowed:
    loud = Loud()  # not a data descriptor: what __init__ sets shadows it

    def __init__(self):
        self.loud = 2


class OwnSetattr:
    def __init__(self):
        self.x = 1

    def __setattr__(self, name, v):
        CALLED.append("__setattr__")
        object.__setattr__(self, name, v)


class OwnDel:
    def __init__(self):
        self.x = 1

    def __del__(self):
        CALLED.append("__del__")


class OwnNew:
    def __new__(cls):
        CALLED.append("__new__")
        return super().__new__(cls)

    def __init__(self):
        self.x = 1


@record
class Rec:
    name: str
    size: int = 0
    tags: list = field(default_factory=list)


@record(frozen=True)
class Frozen:
    name: str
'''


@pytest.fixture
def module() -> Iterator[types.ModuleType]:
    mod = types.ModuleType("settleprobe.classes")
    sys.modules[mod.__name__] = mod
    try:
        exec(compile(SOURCE, "<settleprobe>", "exec"), vars(mod))
        yield mod
    finally:
        del sys.modules[mod.__name__]


def test_the_names_a_class_sets_on_self_come_from_its_methods_and_its_bases(module: types.ModuleType) -> None:
    assert _self_attributes(module.Plain) == ["b", "c", "d", "a"]
    assert _self_attributes(module.Base) == ["a"]


def test_settling_runs_none_of_a_class_s_own_code(module: types.ModuleType) -> None:
    assert settle("settleprobe.") == 10
    assert module.CALLED == []


def test_a_record_s_init_is_compiled_and_instances_are_as_before(module: types.ModuleType) -> None:
    deferred = hasattr(module.Rec.__dict__["__init__"], "__record_spec__")  # compiled on the first instance
    assert deferred or os.environ.get(STANDARD_ENV) == "dataclasses"  # which compile it at once
    settle("settleprobe.")
    assert not hasattr(module.Rec.__dict__["__init__"], "__record_spec__")
    assert module.Rec("x", tags=[1]) == module.Rec(name="x", size=0, tags=[1])
    plain = module.Plain(1, 2)
    assert vars(plain) == {"a": 1, "b": 2, "c": plain.c}  # nothing of the probe's
    plain.later(4)
    assert plain.d == 4
    assert module.Frozen("f").name == "f"
    with pytest.raises(AttributeError):  # FrozenInstanceError
        module.Frozen("f").name = "g"
    guarded = module.Guarded()
    assert vars(guarded) == {"plain": 2} and module.CALLED == ["setter"]
    assert module.Shadowed().loud == 2
    assert guarded.value == 0 and module.CALLED == ["setter", "getter"]
