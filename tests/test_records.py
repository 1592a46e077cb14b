"""shellper.core.structs: the dataclass behaviour shellper relies on, and that the daemon imports no more."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from shellper.core.structs import (
    MISSING,
    STANDARD_ENV,
    FrozenInstanceError,
    asdict,
    field,
    fields,
    is_record,
    record,
    replace,
)


@record
class Point:
    """Mutable, compared by value, unhashable (as @dataclass)."""

    x: int
    y: int = 0
    tags: list[str] = field(default_factory=list)
    LABEL: ClassVar[str] = "point"


@record(frozen=True)
class Pin:
    """Frozen: hashable, compared by value."""

    name: str
    at: Point | None = None
    secret: str = field(default="", repr=False, compare=False)


@record(frozen=True)
class Labelled(Pin):
    """Inherits Pin's fields, then adds its own."""

    label: str = "x"


@record(frozen=True, slots=True)
class Slotted:
    """Slots: no instance dict."""

    a: int
    b: float = 1.5


@record
class Derived:
    """A field computed after __init__, kept out of __init__."""

    base: int
    double: int = field(default=0, init=False)
    seen: list[int] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.double = self.base * 2


@record(eq=False, repr=False)
class Identity:
    """eq=False: compared and hashed by identity; repr=False: object's repr."""

    value: int


def test_init_defaults_and_factories() -> None:
    p, q = Point(1), Point(1)
    assert (p.x, p.y, p.tags) == (1, 0, [])
    assert p.tags is not q.tags, "each instance gets its own default list"
    assert Point(1, 2, ["a"]).tags == ["a"]
    assert Point.LABEL == "point" and [f.name for f in fields(Point)] == ["x", "y", "tags"]


@pytest.mark.parametrize(("a", "b", "equal"), [
    (Point(1, 2), Point(1, 2), True),
    (Point(1, 2), Point(1, 3), False),
    (Pin("a", secret="s"), Pin("a", secret="t"), True),  # compare=False
    (Pin("a"), Labelled("a"), False),  # a different class is never equal
    (Slotted(1), Slotted(1, 1.5), True),
    (Slotted(1, float("nan")), Slotted(1, float("nan")), False),  # two distinct NaNs
])
def test_equality(a: Any, b: Any, equal: bool) -> None:
    assert (a == b) is equal and (a != b) is not equal


def test_equality_like_tuples_for_identical_values() -> None:
    nan = math.nan
    assert Slotted(1, nan) == Slotted(1, nan), "as dataclasses: fields compared as tuples, identity first"


def test_hashing() -> None:
    with pytest.raises(TypeError):
        hash(Point(1))
    assert hash(Pin("a", secret="x")) == hash(Pin("a", secret="y"))
    assert len({Pin("a"), Pin("a"), Pin("b")}) == 2
    ident = Identity(1)
    assert ident != Identity(1) and ident == ident and hash(ident) == object.__hash__(ident)


def test_repr() -> None:
    assert repr(Point(1, 2)) == "Point(x=1, y=2, tags=[])"
    assert repr(Labelled("n", secret="hidden")) == "Labelled(name='n', at=None, label='x')"
    assert repr(Identity(3)).startswith("<")


def test_frozen_refuses_assignment_and_deletion() -> None:
    pin = Pin("a")
    with pytest.raises(FrozenInstanceError, match="name"):
        pin.name = "b"  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        del pin.name  # type: ignore[misc]
    with pytest.raises(AttributeError):  # FrozenInstanceError is one, as in dataclasses
        pin.other = 1  # type: ignore[attr-defined]
    s = Slotted(1)
    with pytest.raises(FrozenInstanceError):
        s.a = 2  # type: ignore[misc]
    assert not hasattr(s, "__dict__") and Slotted.__slots__ == ("a", "b")
    assert Slotted.__qualname__ == "Slotted"


def test_inheritance_orders_fields_base_first() -> None:
    assert [f.name for f in fields(Labelled)] == ["name", "at", "secret", "label"]
    assert Labelled("n", Point(0), "s", "l").label == "l"


def test_a_redefined_field_keeps_its_place() -> None:
    @record(frozen=True)
    class Renamed(Labelled):
        at: Point | None = None
        secret: str = "s"  # new default, same place (as dataclasses orders it)

    assert [f.name for f in fields(Renamed)] == ["name", "at", "secret", "label"]
    assert Renamed("n").secret == "s" and Renamed("n", None, "t").secret == "t"


def test_init_false_and_post_init() -> None:
    d = Derived(4)
    assert (d.double, d.seen) == (8, [])
    assert [f.name for f in fields(d) if f.init] == ["base"]
    with pytest.raises(TypeError):
        Derived(4, 8)  # type: ignore[call-arg]


def test_replace_and_asdict() -> None:
    pin = Labelled("a", Point(1, tags=["t"]))
    moved = replace(pin, at=Point(2))
    assert moved == Labelled("a", Point(2)) and pin.at == Point(1, tags=["t"])
    assert replace(Derived(3), base=5).double == 10
    with pytest.raises(ValueError, match="init=False"):
        replace(Derived(3), double=1)
    assert asdict(pin) == {"name": "a", "at": {"x": 1, "y": 0, "tags": ["t"]}, "secret": "", "label": "x"}
    assert asdict(Point(1, tags=["a"]))["tags"] == ["a"]


def test_fields_metadata_and_defaults() -> None:
    @record
    class Meta:
        a: int = field(default=1, metadata={"kind": "uint"})
        b: int = field(default_factory=int)

    a, b = fields(Meta)
    assert (a.default, a.metadata["kind"], b.default is MISSING, b.default_factory is int) == (1, "uint", True, True)
    assert is_record(Meta) and is_record(Meta()) and not is_record(object())
    with pytest.raises(TypeError, match="not a record"):
        fields(object())


@pytest.mark.parametrize(("make", "error", "match"), [
    (lambda: record(type("M", (), {"__annotations__": {"a": "list[int]"}, "a": []})), ValueError, "mutable default"),
    (lambda: record(type("R", (), {"__annotations__": {"a": "Point"}, "a": Point(0)})), ValueError, "mutable default"),
    (lambda: record(type("O", (), {"__annotations__": {"a": "int", "b": "int"}, "a": 1})), TypeError,
     "non-default field 'b' follows a default"),
    (lambda: record(type("F", (Pin,), {"__annotations__": {"c": "int"}, "c": 0})), TypeError, "frozen"),
    (lambda: field(default=1, default_factory=int), ValueError, "both default and default_factory"),
])
def test_declaration_errors(make: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        make()


_NEVER = {"dataclasses", "typing", "inspect", "threading", "psutil"}


@pytest.mark.parametrize(("modules", "never"), [
    # what the prefork imports: pathlib would bring urllib.parse and ipaddress, ~3.5 ms and 0.5 MiB a session
    ("shellper.daemon.session, shellper.core.config, shellper.client.launch, shellper.daemon.prefork",
     {"pathlib", "urllib.parse"}),
    # `shellper run`, the other half of a launch
    # (its handler imports the launch path when it runs: imported here too)
    ("shellper.cli.main, shellper.cli.argtree, shellper.cli.commands.run, shellper.cli.connect, "
     "shellper.core.config, shellper.client.launch, shellper.host.terminfo, shellper.daemon.prefork",
     {"pathlib", "datetime"}),
    ("shellper.cli.main, shellper.cli.commands.attach", {"pathlib"}),  # `shellper attach`
])
def test_start_up_imports_neither_dataclasses_nor_typing(modules: str, never: set[str]) -> None:
    """Each of these cost every session, or every attach, time and memory (see shellper.core.structs)."""
    probe = (f"import sys, {modules}\n"
             f"print(' '.join(sorted(set({sorted(_NEVER | never)!r}) & set(sys.modules))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == ""


@pytest.mark.parametrize("columns", [60, 100])
def test_the_cli_parser_needs_no_shutil_and_help_fits_the_terminal(columns: int) -> None:
    """argparse's help formatter, left to find the width itself, imports shutil (with bz2, lzma and
    zlib), ~3 ms of every ``shellper run`` (see shellper.cli.argtree._Formatter); help must still fit $COLUMNS."""
    probe = ("import sys; from shellper.cli.argtree import build as _parser\n"
             "_parser().parse_args(['run', 'x', 'cat'])\n"
             "print(' '.join(sorted({'shutil', 'bz2', 'lzma', 'zlib'} & set(sys.modules))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == ""
    shown = subprocess.run([sys.executable, "-m", "shellper.cli", "run", "--help"], capture_output=True, text=True,
                           check=True, timeout=60, env={**os.environ, "COLUMNS": str(columns)})
    assert columns - 5 <= max(len(line) for line in shown.stdout.splitlines()) <= columns


def test_init_is_compiled_on_first_use_and_then_replaced() -> None:
    @record(frozen=True)
    class Lazy:
        a: int
        b: list[int] = field(default_factory=list)

    class Plain(Lazy):  # not a record: it inherits Lazy's __init__, deferred or not
        pass

    deferred = Lazy.__dict__["__init__"]
    assert deferred.__qualname__.endswith("Lazy.__init__")
    child = Plain(1)  # the first call, through a subclass, compiles Lazy's own
    assert (child.a, child.b) == (1, [])
    compiled = Lazy.__dict__["__init__"]
    assert compiled is not deferred and compiled.__code__.co_filename == "<string>"
    assert Lazy(2, [3]) == Lazy(2, [3]) and Lazy.__dict__["__init__"] is compiled
    with pytest.raises(TypeError):
        Lazy()  # type: ignore[call-arg]


def test_a_plain_attach_starts_without_the_cli_pathlib_or_re() -> None:
    """``shellper attach NAME`` from the console script takes the quick path (shellper.cli.commands.attach.quick_main):
    argparse, pathlib, re and the relay-only mode tracker cost it ~20 ms more than its own imports."""
    probe = ("import sys; from shellper.cli.commands.attach import quick_main\n"
             "print(' '.join(sorted({'argparse', 'pathlib', 're', 'json', 'shellper.cli.main', "
             "'shellper.core.terminal.modes', "
             "'shellper.host.paths', 'typing', 'dataclasses'} & set(sys.modules))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == ""


def _unit_modules_building_records(unit: Path) -> list[Path]:
    """The unit test modules that import a module using shellper.core.structs (directly: a module that only
    imports such a module builds its records through it, and its own tests import that module too)."""
    repo = unit.parent.parent
    users = {".".join(p.relative_to(repo).with_suffix("").parts)
             for top in ("shellper", "tower_client") for p in (repo / top).rglob("*.py")
             if "structs" in p.read_text()}
    users = {m.removesuffix(".__init__") for m in users}
    # the layers and the house's shape read the source as text; the screen emulator's tables build no record
    unread = {"test_layers.py", "test_house_shape.py", "test_screen.py"}
    return sorted(t for t in unit.glob("test_*.py")
                  if t.name not in unread and any(m in t.read_text() for m in users))


def test_the_pure_cores_pass_with_the_standard_dataclasses_too() -> None:
    """With SHELLPER_RECORDS=dataclasses every record is a standard dataclass: the unit tests (ring, modes,
    exits and restart policy, wire, states, the session record, reconcile, ...) must pass so too, which keeps
    shellper.core.structs a drop-in for dataclasses rather than a dialect of it."""
    env = {**os.environ, STANDARD_ENV: "dataclasses"}
    probe = ("import dataclasses; from shellper.host.record import SessionRecord; from shellper.protocol import wire\n"
             "print(dataclasses.is_dataclass(SessionRecord), dataclasses.is_dataclass(wire.Exit))")
    switched = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True,
                              timeout=60)
    assert switched.stdout.split() == ["True", "True"]
    unit = Path(__file__).parent / "unit"
    # The unit tests of every module that defines records, again, in one process: workers of its own would
    # each collect them again (twice the CPU); its property tests take fewer examples so
    # (conftest.RECORDS_RERUN_EXAMPLES), and conftest runs this test first in a parallel run so it does not
    # finish alone after the rest. A unit test module that imports none of them builds no record of ours
    # (the layers, the house's shape, the screen emulator's tables: most of the per-test overhead).
    picked = _unit_modules_building_records(unit)
    assert len(picked) >= 10, picked  # the selection below cannot come up empty and pass
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *map(str, picked)],
                          env=env, capture_output=True, text=True, timeout=600, cwd=unit.parent.parent)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1]
    assert "structs" not in Path(__file__).parent.parent.joinpath("shellper/core/terminal/screen.py").read_text()


def test_the_console_script_forks_the_prefork_before_importing_anything_else() -> None:
    """shellper.cli.entry is a leaf at import: of the package, only itself and shellper.cli.argscan with the
    option table it reads (shellper.daemon.prefork is imported only when a prefork is started: the quick paths
    need none), and of the standard library nothing the server or the CLI would wait for. Scanning a ``run``
    line adds run's table and the constants it shows, nothing else of the package. Else the overlap the prefork
    exists for shrinks."""
    probe = ("import sys; before = set(sys.modules); import shellper.cli.entry\n"
             "print(' '.join(sorted(set(sys.modules) - before)))\n"
             "before = set(sys.modules); shellper.cli.entry.scan(['run', 's', '--', 'cat'])\n"
             "print(' '.join(sorted(set(sys.modules) - before)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    at_import, scanning = done.stdout.split("\n")[:2]
    loaded = set(at_import.split())
    assert {m for m in loaded if m.startswith("shellper")} == {"shellper", "shellper.cli", "shellper.cli.entry",
                                                               "shellper.cli.argscan", "shellper.cli.options",
                                                               "shellper.cli.commands"}
    assert {m for m in scanning.split() if m.startswith("shellper")} == {
        "shellper.cli.commands.run", "shellper.core", "shellper.core.containment", "shellper.core.defaults",
        "shellper.core.errors", "shellper.core.owner"}
    slow = {"msgpack", "json", "socket", "select", "termios", "re", "argparse", "typing", "dataclasses", "pathlib",
            "contextlib"}
    assert loaded & slow == set() and set(scanning.split()) & slow == set()
