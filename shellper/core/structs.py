"""Typed records: the part of :mod:`dataclasses` shellper uses, for less than the standard module costs.

Every shellper is a separate Python process, so what its imports cost is paid per session in launch
time and in memory. :mod:`dataclasses` imports inspect (with ast, dis and tokenize) and compiles several
methods for each class it builds; here only ``__init__`` is generated, and compiled on the class's first
instantiation (most classes, the frame types of :mod:`shellper.protocol.wire` above all, are never built
by a given process); equality, hashing, repr and immutability are shared functions driven by the field
list. bench/NOTES.md has what that saves today ("Start-up measures, measured again").

The API mirrors :mod:`dataclasses` (``field``, ``fields``, ``replace``, ``asdict``, ``MISSING``,
``FrozenInstanceError``) and type checkers treat ``@record`` as a dataclass (PEP 681). Not supported,
because nothing here needs them: ``order``, ``kw_only``, ``InitVar``, ``unsafe_hash``, per-field ``hash``.
With ``SHELLPER_RECORDS=dataclasses`` in the environment the standard module is used instead (the end of
this module): the unit tests run so too, so the two stay interchangeable.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, TypeVar, dataclass_transform, overload

    _T = TypeVar("_T")


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""No default (as ``dataclasses.MISSING``)."""

_FIELDS = "__record_fields__"
STANDARD_ENV = "SHELLPER_RECORDS"
"""Set to ``dataclasses``, it makes this module the standard one (see the end of the module)."""


class FrozenInstanceError(AttributeError):
    """Assignment to, or deletion of, a field of a frozen record."""


_NO_METADATA: Mapping[str, Any] = type(type.__dict__)({})  # types.MappingProxyType, without importing types
"""The metadata of every field given none: one read-only empty mapping (as in dataclasses), not a dict each."""


class Field:
    """One field of a record: its name and how ``__init__``, ``__eq__`` and ``__repr__`` treat it."""

    __slots__ = ("compare", "default", "default_factory", "init", "metadata", "name", "repr")

    def __init__(self, default: Any, default_factory: Any, init: bool, repr: bool, compare: bool,
                 metadata: Mapping[str, Any] | None) -> None:
        self.name = ""
        self.default = default
        self.default_factory = default_factory
        self.init = init
        self.repr = repr
        self.compare = compare
        self.metadata: Mapping[str, Any] = metadata if metadata is not None else _NO_METADATA

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r}, init={self.init})"


if TYPE_CHECKING:
    @overload
    def field(*, default: _T, init: bool = True, repr: bool = True, compare: bool = True,
              metadata: Mapping[str, Any] | None = None) -> _T: ...
    @overload
    def field(*, default_factory: Callable[[], _T], init: bool = True, repr: bool = True,
              compare: bool = True, metadata: Mapping[str, Any] | None = None) -> _T: ...
    @overload
    def field(*, init: bool = True, repr: bool = True, compare: bool = True,
              metadata: Mapping[str, Any] | None = None) -> Any: ...


def field(*, default: Any = MISSING, default_factory: Any = MISSING, init: bool = True,
          repr: bool = True, compare: bool = True, metadata: Mapping[str, Any] | None = None) -> Any:
    """A field with a default, a default factory, or other than default treatment."""
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return Field(default, default_factory, init, repr, compare, metadata)


def fields(record_or_class: Any) -> tuple[Field, ...]:
    """The fields of a record class or instance, in ``__init__`` order."""
    try:
        found: tuple[Field, ...] = getattr(record_or_class, _FIELDS)
    except AttributeError:
        raise TypeError(f"{record_or_class!r} is not a record") from None
    return found


def is_record(obj: object) -> bool:
    """Whether ``obj`` is a record class or instance (as ``dataclasses.is_dataclass``)."""
    return hasattr(obj, _FIELDS)


def replace(obj: _T, /, **changes: Any) -> _T:
    """A copy of ``obj`` with some fields changed, built through ``__init__`` (so it is re-validated)."""
    for f in fields(obj):
        if f.init and f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
        elif not f.init and f.name in changes:
            raise ValueError(f"field {f.name!r} is init=False and cannot be replaced")
    return obj.__class__(**changes)


def asdict(obj: Any) -> dict[str, Any]:
    """The fields as a dict, recursing into records, lists, tuples and dicts (values are not copied)."""
    return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj)}


def _plain(value: Any) -> Any:
    if hasattr(value.__class__, _FIELDS):
        return asdict(value)
    if isinstance(value, list | tuple):
        return value.__class__(_plain(v) for v in value)
    if isinstance(value, dict):
        return value.__class__((_plain(k), _plain(v)) for k, v in value.items())
    return value


# ------------------------------------------------------------------------------------- the decorator

def _is_classvar(annotation: object) -> bool:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return isinstance(text, str) and text.replace("typing.", "").startswith("ClassVar")


def _collect(cls: type) -> tuple[Field, ...]:
    """Inherited fields first (in base order), then this class's own annotations."""
    found: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for f in base.__dict__.get(_FIELDS, ()):
            found[f.name] = f
    own = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 - inspect is what this module avoids
    for name, annotation in own.items():
        if _is_classvar(annotation):
            continue
        value = cls.__dict__.get(name, MISSING)
        f = value if isinstance(value, Field) else Field(value, MISSING, True, True, True, None)
        f.name = name
        if f.default.__class__.__hash__ is None:  # unhashable means mutable (the rule of 3.11's dataclasses)
            raise ValueError(f"{cls.__qualname__}.{name}: mutable default {type(f.default).__name__} "
                             "is not allowed: use default_factory")
        if f.default is MISSING:
            if isinstance(value, Field):
                delattr(cls, name)
        else:
            setattr(cls, name, f.default)
        found[name] = f  # a redefined field keeps its inherited place, as in dataclasses
    return tuple(found.values())


def _init_source(cls: type, flds: tuple[Field, ...], frozen: bool, namespace: dict[str, Any]) -> str:
    params: list[str] = []
    body: list[str] = []
    for f in flds:
        value = f.name
        if f.init:
            if f.default is not MISSING:
                namespace[f"_d_{f.name}"] = f.default
                params.append(f"{f.name}=_d_{f.name}")
            elif f.default_factory is not MISSING:
                namespace[f"_f_{f.name}"] = f.default_factory
                params.append(f"{f.name}=_MISSING")
                value = f"_f_{f.name}() if {f.name} is _MISSING else {f.name}"
            else:  # the order is checked when the class is defined (_check_order)
                params.append(f.name)
        elif f.default is not MISSING:
            namespace[f"_d_{f.name}"] = f.default
            value = f"_d_{f.name}"
        elif f.default_factory is not MISSING:
            namespace[f"_f_{f.name}"] = f.default_factory
            value = f"_f_{f.name}()"
        else:
            continue
        body.append(f"  _set(self, {f.name!r}, {value})" if frozen else f"  self.{f.name} = {value}")
    if hasattr(cls, "__post_init__"):
        body.append("  self.__post_init__()")
    return f"def __init__(self, {', '.join(['', *params])[2:]}):\n" + ("\n".join(body) or "  pass") + "\n"


def _eq(self: Any, other: object) -> object:  # bool, or NotImplemented
    if other.__class__ is not self.__class__:
        return NotImplemented
    same: bool = _key(self) == _key(other)  # as tuples: identical values are equal (NaN too), as in dataclasses
    return same


def _key(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, f.name) for f in fields(self) if f.compare)


def _hash(self: Any) -> int:
    return hash(_key(self))


def _repr(self: Any) -> str:
    shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
    return f"{self.__class__.__qualname__}({shown})"


def _frozen_setattr(self: Any, name: str, value: object) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _deferred_init(cls: type, flds: tuple[Field, ...], frozen: bool) -> Callable[..., None]:
    """An ``__init__`` that compiles the generated one on its first call and puts it in its place.

    Compiling is what building a record costs (~0.1 ms a class); most classes of a module, the frame
    types of :mod:`shellper.protocol.wire` above all, are never instantiated by a given process (an attach, a
    CLI command, a shellper no client has spoken to). Its source is generated then too (kept from the
    start, the sources and their namespaces were some 25 KiB of every idle shellper); the field order is
    checked here, so a bad one is still reported when the class is defined.
    """
    _check_order(cls, flds)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if cls.__dict__.get("__init__") is __init__:  # not yet replaced (by this call or another)
            _compile_init(cls, flds, frozen)
        cls.__dict__["__init__"](self, *args, **kwargs)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__record_spec__ = (flds, frozen)  # type: ignore[attr-defined]  # for signed()
    return __init__


def _check_order(cls: type, flds: tuple[Field, ...]) -> None:
    seen_default = False
    for f in flds:
        if not f.init:
            continue
        if f.default is not MISSING or f.default_factory is not MISSING:
            seen_default = True
        elif seen_default:
            raise TypeError(f"{cls.__qualname__}: non-default field {f.name!r} follows a default")


def _compile_init(cls: type, flds: tuple[Field, ...], frozen: bool) -> None:
    """Generate, compile and install the record's own ``__init__``."""
    namespace: dict[str, Any] = {"_MISSING": MISSING, "_set": object.__setattr__}
    exec(_init_source(cls, flds, frozen, namespace), namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init  # type: ignore[misc]


def _build(cls: type, frozen: bool, eq: bool, repr: bool, slots: bool) -> type:
    for base in cls.__mro__[1:]:
        if _FIELDS in base.__dict__ and base.__dict__.get("__record_frozen__", False) != frozen:
            raise TypeError(f"{cls.__qualname__}: cannot mix frozen and non-frozen records with {base}")
    flds = _collect(cls)
    own = cls.__dict__
    if slots:
        inherited = {name for base in cls.__mro__[1:] for name in base.__dict__.get("__slots__", ())}
        body = {k: v for k, v in own.items() if k not in ("__dict__", "__weakref__")}
        for f in flds:
            body.pop(f.name, None)
        body["__slots__"] = tuple(f.name for f in flds if f.name not in inherited)
        body["__qualname__"] = cls.__qualname__
        cls = type(cls)(cls.__name__, cls.__bases__, body)
        own = cls.__dict__
    setattr(cls, _FIELDS, flds)
    cls.__record_frozen__ = frozen  # type: ignore[attr-defined]
    cls.__match_args__ = tuple(f.name for f in flds if f.init)  # type: ignore[attr-defined,misc]
    if "__init__" not in own:
        cls.__init__ = _deferred_init(cls, flds, frozen)  # type: ignore[misc]
    if repr and "__repr__" not in own:
        cls.__repr__ = _repr  # type: ignore[assignment]
    if eq and "__eq__" not in own:
        cls.__eq__ = _eq  # type: ignore[assignment]
        if "__hash__" not in own:
            cls.__hash__ = _hash if frozen else None  # type: ignore[assignment]
    if frozen:
        if "__setattr__" not in own:
            cls.__setattr__ = _frozen_setattr  # type: ignore[assignment]
        if "__delattr__" not in own:
            cls.__delattr__ = _frozen_delattr  # type: ignore[assignment]
    return cls


def signed(cls: type[_T]) -> type[_T]:
    """Compile a record's ``__init__`` now, not on its first call, so that ``inspect.signature`` and
    ``help()`` show its fields (the deferred one takes ``*args, **kwargs``): for the records a library user
    builds by hand (SessionConfig, RestartPolicy), which every process that imports them builds anyway."""
    spec = getattr(cls.__dict__.get("__init__"), "__record_spec__", None)
    if spec is not None:
        _compile_init(cls, *spec)
    return cls


if TYPE_CHECKING:
    @overload
    @dataclass_transform(field_specifiers=(field, Field))
    def record(cls: type[_T], /) -> type[_T]: ...
    @overload
    def record(*, frozen: bool = False, eq: bool = True, repr: bool = True,
               slots: bool = False) -> Callable[[type[_T]], type[_T]]: ...


def record(cls: type[_T] | None = None, /, *, frozen: bool = False, eq: bool = True, repr: bool = True,
           slots: bool = False) -> type[_T] | Callable[[type[_T]], type[_T]]:
    """Make ``cls`` a record, as ``@dataclass`` would (same arguments, minus those listed above)."""
    def wrap(klass: type[_T]) -> type[_T]:
        return _build(klass, frozen, eq, repr, slots)
    return wrap if cls is None else wrap(cls)



if not TYPE_CHECKING:
    import os

    if os.environ.get(STANDARD_ENV) == "dataclasses":
        # Everything above, replaced by the standard module it mirrors: tests/test_records.py runs the
        # pure cores' tests so, which keeps this module a drop-in for dataclasses, not a dialect of it.
        import dataclasses as _standard

        MISSING, Field, FrozenInstanceError = _standard.MISSING, _standard.Field, _standard.FrozenInstanceError
        field, fields, replace, asdict = _standard.field, _standard.fields, _standard.replace, _standard.asdict
        record, is_record = _standard.dataclass, _standard.is_dataclass

        def signed(cls):
            return cls
