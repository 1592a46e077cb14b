"""The parser's table and the patterns read off it, derived from the DEC diagram's rows (below), and the
writer of :mod:`shellper.core.terminal._tables`, where the parser takes them from.

Deriving them (the table's cells, then every pattern's character classes) took some 4 ms, on a session's
first attach (the screen model's import), so it is done here, ahead of time, and its result checked in:
``python -m shellper.core.terminal.tablegen`` writes ``_tables.py`` again after a change to the rows or to
the derivation, and tests/unit/test_tablegen.py holds the checked-in module equal to what this derives.
What the rows say, in words, is in the parser's docstring.
"""

from __future__ import annotations

import re
from pathlib import Path

from shellper.core.terminal.parser import (
    _CSI_STATES,
    _DCS_STATES,
    _DEL,
    _ESC,
    _ST,
    _ST_FINAL,
    _STRING_STATES,
    _WIDE,
    ParserAction,
    State,
    _klass,
)

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

_CAN, _SUB, _BEL = 0x18, 0x1A, 0x07
_C0 = (*range(0x18), 0x19, *range(0x1C, 0x20))
"""The C0 controls but CAN, SUB and ESC (which act anywhere)."""

_Cell = tuple[ParserAction, State]
_Row = dict[int, _Cell]


def _cells(codes: Iterable[int], action: ParserAction, state: State) -> _Row:
    return dict.fromkeys(codes, (action, state))


def _span(first: int, last: int) -> range:
    return range(first, last + 1)


_ANYWHERE: _Row = {
    **_cells((_CAN, _SUB), ParserAction.EXECUTE, State.GROUND),
    **_cells((*_span(0x80, 0x8F), *_span(0x91, 0x97), 0x99, 0x9A), ParserAction.EXECUTE, State.GROUND),
    _ST: (ParserAction.EXECUTE, State.GROUND),  # a terminator with nothing to end: a control of its own
    _ESC: (ParserAction.START, State.ESCAPE),
    0x90: (ParserAction.START, State.DCS_ENTRY),
    0x9B: (ParserAction.START, State.CSI_ENTRY),
    0x9D: (ParserAction.START, State.OSC_STRING),
    **_cells((0x98, 0x9E, 0x9F), ParserAction.START, State.SOS_PM_APC_STRING),
}
"""The diagram's "anywhere" transitions: taken from every state, ending what was under way first."""


def _csi_like(entry: State, param: State, intermediate: State, ignore: State, final: _Cell, c0: ParserAction,
              ) -> dict[State, _Row]:
    """The rows of CSI's or DCS's header states, which differ only in their final, what C0 does and whether
    ST ends them (a DCS's header is a string's start: ST ends it as it ends its data)."""
    st = {_ST: (ParserAction.END, State.GROUND)} if c0 is ParserAction.IGNORE else {}
    return {
        entry: {**st, **_cells(_C0, c0, entry), _DEL: (ParserAction.IGNORE, entry),
                **_cells(_span(0x20, 0x2F), ParserAction.COLLECT, intermediate),
                **_cells(_span(0x30, 0x3B), ParserAction.PARAM, param),
                **_cells(_span(0x3C, 0x3F), ParserAction.COLLECT, param),
                **_cells(_span(0x40, 0x7E), *final)},
        param: {**st, **_cells(_C0, c0, param), _DEL: (ParserAction.IGNORE, param),
                **_cells(_span(0x20, 0x2F), ParserAction.COLLECT, intermediate),
                **_cells(_span(0x30, 0x3B), ParserAction.PARAM, param),
                **_cells(_span(0x3C, 0x3F), ParserAction.IGNORE, ignore),
                **_cells(_span(0x40, 0x7E), *final)},
        intermediate: {**st, **_cells(_C0, c0, intermediate), _DEL: (ParserAction.IGNORE, intermediate),
                       **_cells(_span(0x20, 0x2F), ParserAction.COLLECT, intermediate),
                       **_cells(_span(0x30, 0x3F), ParserAction.IGNORE, ignore),
                       **_cells(_span(0x40, 0x7E), *final)},
    }


_OWN: dict[State, _Row] = {
    State.GROUND: {**_cells(_C0, ParserAction.EXECUTE, State.GROUND), _DEL: (ParserAction.EXECUTE, State.GROUND),
                   **_cells(_span(0x20, 0x7E), ParserAction.PRINT, State.GROUND)},
    State.ESCAPE: {**_cells(_C0, ParserAction.EXECUTE, State.ESCAPE), _DEL: (ParserAction.IGNORE, State.ESCAPE),
                   **_cells(_span(0x20, 0x2F), ParserAction.COLLECT, State.ESCAPE_INTERMEDIATE),
                   **_cells((*_span(0x30, 0x4F), *_span(0x51, 0x57), 0x59, 0x5A, 0x5C, *_span(0x60, 0x7E)),
                            ParserAction.DISPATCH, State.GROUND),
                   0x5B: (ParserAction.START, State.CSI_ENTRY), 0x5D: (ParserAction.START, State.OSC_STRING),
                   0x50: (ParserAction.START, State.DCS_ENTRY),
                   **_cells((0x58, 0x5E, 0x5F), ParserAction.START, State.SOS_PM_APC_STRING)},
    State.ESCAPE_INTERMEDIATE: {
        **_cells(_C0, ParserAction.EXECUTE, State.ESCAPE_INTERMEDIATE),
        _DEL: (ParserAction.IGNORE, State.ESCAPE_INTERMEDIATE),
        **_cells(_span(0x20, 0x2F), ParserAction.COLLECT, State.ESCAPE_INTERMEDIATE),
        **_cells(_span(0x30, 0x7E), ParserAction.DISPATCH, State.GROUND)},
    **_csi_like(*_CSI_STATES[:3], State.CSI_IGNORE, (ParserAction.DISPATCH, State.GROUND), ParserAction.EXECUTE),
    State.CSI_IGNORE: {**_cells(_C0, ParserAction.EXECUTE, State.CSI_IGNORE),
                       **_cells((*_span(0x20, 0x3F), _DEL), ParserAction.IGNORE, State.CSI_IGNORE),
                       **_cells(_span(0x40, 0x7E), ParserAction.END, State.GROUND)},
    **_csi_like(*_DCS_STATES[:3], State.DCS_IGNORE, (ParserAction.HOOK, State.DCS_PASSTHROUGH), ParserAction.IGNORE),
    State.DCS_PASSTHROUGH: {**_cells((*_C0, *_span(0x20, 0x7E)), ParserAction.PUT, State.DCS_PASSTHROUGH),
                            _DEL: (ParserAction.IGNORE, State.DCS_PASSTHROUGH), _ST: (ParserAction.END, State.GROUND)},
    State.DCS_IGNORE: {**_cells((*_C0, *_span(0x20, 0x7F)), ParserAction.IGNORE, State.DCS_IGNORE),
                       _ST: (ParserAction.END, State.GROUND)},
    State.OSC_STRING: {**_cells((*_C0, *_span(0x20, 0x7F)), ParserAction.PUT, State.OSC_STRING),
                       _BEL: (ParserAction.END, State.GROUND), _ST: (ParserAction.END, State.GROUND)},
    State.SOS_PM_APC_STRING: {**_cells((*_C0, *_span(0x20, 0x7F)), ParserAction.PUT, State.SOS_PM_APC_STRING),
                              _ST: (ParserAction.END, State.GROUND)},
}
"""Each state's own transitions; they take precedence over :data:`_ANYWHERE` (so ST ends a string)."""


def _wide(state: State) -> _Cell:
    """A character above U+009F: data in a string, text anywhere else (aborting a sequence under way)."""
    if state in _STRING_STATES:
        return (ParserAction.IGNORE if state is State.DCS_IGNORE else ParserAction.PUT), state
    return ParserAction.PRINT, State.GROUND


TABLE: dict[State, tuple[_Cell, ...]] = {
    state: (*(_OWN[state].get(code) or _ANYWHERE[code] for code in range(_WIDE)), _wide(state))
    for state in State
}
"""The machine: ``TABLE[state][code]`` for a character's code below U+00A0, ``TABLE[state][-1]`` above."""
_ABORTS = {state: frozenset(code for code in _ANYWHERE if code not in _OWN[state]) for state in State}
"""Per state, the characters that end a sequence under way before them (they begin something else)."""


# ------------------------------------------------------------------------ the table as regular expressions

def _live(state: State) -> dict[_Cell, list[int]]:
    by_cell: dict[_Cell, list[int]] = {}
    aborts = _ABORTS[state]
    for code, cell in enumerate(TABLE[state][:_WIDE]):
        if code not in aborts:
            by_cell.setdefault(cell, []).append(code)
    return by_cell


_LIVE = {state: _live(state) for state in State}
"""Per state, each transition (action, next state) with the characters below U+00A0 that take it and do not
abort the state: a handful of transitions each, so deriving the patterns asks ``keep`` a few times, not per
character (the import is part of a session's first attach)."""


def _where(states: Iterable[State], keep: Callable[[ParserAction, State], bool]) -> set[int]:
    """The codes below U+00A0 whose transition, from any of ``states``, ``keep`` takes."""
    return {code for state in states for (action, after), codes in _LIVE[state].items() if keep(action, after)
            for code in codes}


def _same_ends(states: tuple[State, ...]) -> tuple[set[int], set[int]]:
    """What continues and what ends a sequence in any of ``states``, checked to be the same in each (so the
    states are one loop in the patterns)."""
    goes_on = [_where((s,), lambda a, n: n in states) for s in states]
    ends = [_where((s,), lambda a, n: n is State.GROUND) for s in states]
    if any(g != goes_on[0] for g in goes_on) or any(e != ends[0] for e in ends):
        raise AssertionError(f"the table's {states} do not end a sequence alike")
    return goes_on[0], ends[0]


def _starts(target: State, state: State = State.GROUND) -> set[int]:
    """The codes that begin ``target`` from ``state`` (an ESC's second byte, or a C1 control; not one that
    aborts ``state`` first)."""
    return _where((state,), lambda a, n: a is ParserAction.START and n is target) if state is not State.GROUND else {
        code for code in range(_WIDE) if TABLE[state][code] == (ParserAction.START, target)}


C1 = _klass(range(0x80, 0xA0))
"""C1 controls: as code points and as undecodable bytes (``surrogateescape``), for a character class."""
STOP = _klass(_ANYWHERE)
"""What ends any sequence or string, for a character class: CAN, SUB, ESC and every C1 control."""
EXECUTED = _klass(_where((State.ESCAPE,), lambda a, n: n is State.ESCAPE))
"""C0 controls (and DEL) that a sequence under way executes (ignores) and goes on, for a character class."""
ESC = f"{re.escape(chr(_ESC))}[{EXECUTED}]*+"
"""ESC and the C0 controls a terminal executes before the byte that follows it."""


def _start(target: State, eight_bit: bool = True) -> str:
    forms = [f"{ESC}[{_klass(_starts(target, State.ESCAPE))}]"]
    if eight_bit:
        forms.append(f"[{_klass(_starts(target))}]")
    return f"(?:{'|'.join(forms)})"


CSI_START = _start(State.CSI_ENTRY)
OSC_START = _start(State.OSC_STRING)
DCS_START = _start(State.DCS_ENTRY)
SOS_PM_APC_START = _start(State.SOS_PM_APC_STRING)
_TERMINATORS = _where(_STRING_STATES, lambda a, n: a is ParserAction.END and n is State.GROUND)


def _st(eight_bit: bool = True) -> str:
    forms = [f"{ESC}{re.escape(chr(_ST_FINAL))}"]
    if eight_bit:
        forms.append(f"[{_klass(_TERMINATORS & set(range(0x80, 0xA0)))}]")
    return f"(?:{'|'.join(forms)})"


ST = _st()
"""String Terminator, 7- and 8-bit."""

_CSI_BODY, _CSI_FINAL = _same_ends(_CSI_STATES)
_DCS_BODY, _DCS_END = _same_ends(_DCS_STATES)
_OSC_BODY, _OSC_END = _same_ends((State.OSC_STRING,))
_STR_BODY, _STR_END = _same_ends((State.SOS_PM_APC_STRING,))
_OSC_END_7 = _OSC_END - set(range(0x80, 0xA0))
"""An OSC's terminators but ST (xterm's BEL)."""


def _string_rest(body: set[int], group: str, extra_end: frozenset[int] | set[int] = frozenset(),
                 eight_bit: bool = True) -> str:
    """A string's data and terminator, after its introducer (``group``: the terminator's group name, or "")."""
    st = _st(eight_bit)
    end = f"[{_klass(extra_end, eight_bit)}]|{st}" if extra_end else st
    return f"[^{_klass(set(range(_WIDE)) - body, eight_bit)}]*+(?{f'P<{group}>' if group else ':'}{end})?"


def _rests(groups: bool, eight_bit: bool = True) -> dict[State, str]:
    """What follows each sequence's introducer, by the state the introducer enters (with the named groups
    :func:`finished` reads, or without, for a pattern that holds one twice)."""
    def group(name: str) -> str:
        return f"?P<{name}>" if groups else "?:"

    return {
        State.CSI_ENTRY: (f"[{_klass(_CSI_BODY, eight_bit)}]*+"
                          f"({group('csi_final')}[{_klass(_CSI_FINAL, eight_bit)}])?"),
        State.OSC_STRING: _string_rest(_OSC_BODY, "osc_end" if groups else "", _OSC_END_7, eight_bit),
        State.DCS_ENTRY: _string_rest(_DCS_BODY, "dcs_end" if groups else "", eight_bit=eight_bit),
        State.SOS_PM_APC_STRING: _string_rest(_STR_BODY, "str_end" if groups else "", eight_bit=eight_bit),
        State.ESCAPE: (f"(?:({group('esc_final')}[{_ESC_FINALS}])|[{_ESC_COLLECTS}][{_ESC_INTERMEDIATE_BODY}]*+"
                       f"({group('esc_final2')}[{_ESC_INTERMEDIATE_FINALS}])?)?"),
    }


_ESC_INTERMEDIATE_BODY, _ESC_INTERMEDIATE_FINALS = (
    _klass(codes) for codes in _same_ends((State.ESCAPE_INTERMEDIATE,)))
_ESC_FINALS = _klass(_where((State.ESCAPE,), lambda a, n: a is ParserAction.DISPATCH))
_ESC_COLLECTS = _klass(_where((State.ESCAPE,), lambda a, n: n is State.ESCAPE_INTERMEDIATE))
_CONTROLS = {code for code in range(_WIDE) if TABLE[State.GROUND][code] in (
    (ParserAction.EXECUTE, State.GROUND), (ParserAction.IGNORE, State.GROUND))}
_NOT_TEXT = {code for code in range(_WIDE) if TABLE[State.GROUND][code][0] is not ParserAction.PRINT}
_STRING_TARGETS = (State.OSC_STRING, State.DCS_ENTRY, State.SOS_PM_APC_STRING)


def _tokens(eight_bit: bool = True) -> dict[str, str]:
    """The patterns of each kind of token (the named groups :func:`finished` reads), and the whole grammar;
    without ``eight_bit``, for input with no C1 control, in text or in bytes (:func:`c1_free`)."""
    rest = _rests(groups=True, eight_bit=eight_bit)
    forms = {state.name: _start(state, eight_bit) + rest[state] for state in (State.CSI_ENTRY, *_STRING_TARGETS)}
    forms["ESCAPE"] = ESC + rest[State.ESCAPE]
    forms["CONTROL"] = f"[{_klass(_CONTROLS, eight_bit)}]"
    forms["TEXT"] = f"[^{_klass(_NOT_TEXT, eight_bit)}]++"
    forms["SEQUENCE"] = "|".join((*(forms[state.name] for state in (State.CSI_ENTRY, *_STRING_TARGETS)),
                                  forms["ESCAPE"], f"(?P<control>{forms['CONTROL']})"))
    forms["TOKEN"] = f"(?P<text>{forms['TEXT']})|{forms['SEQUENCE']}"
    forms["STRING_START"] = "|".join(_start(state, eight_bit) for state in _STRING_TARGETS)
    return forms


_INTRODUCERS = {code for code, (action, _) in _ANYWHERE.items() if action is ParserAction.START}
_RESTS_TARGETS = (State.CSI_ENTRY, *_STRING_TARGETS)


def derive() -> dict[str, object]:
    """What the parser takes from ``_tables``, by name, as the literals ``_tables`` spells: per state, the
    table's row as bytes (a cell is ``action << 4 | state``) and the characters that abort it; the
    patterns' strings; the character sets and per-state strings :func:`parser.pattern` builds from."""
    def codes(found: Iterable[int]) -> tuple[int, ...]:
        return tuple(sorted(found))

    return {
        "ROWS": tuple(bytes(action << 4 | after for action, after in TABLE[state]) for state in State),
        "ABORTS": tuple(codes(_ABORTS[state]) for state in State),
        "C1": C1,
        "STOP": STOP,
        "EXECUTED": EXECUTED,
        "ESC": ESC,
        "ST": ST,
        "CSI_START": CSI_START,
        "OSC_START": OSC_START,
        "DCS_START": DCS_START,
        "SOS_PM_APC_START": SOS_PM_APC_START,
        "EXECUTED_CHARS": "".join(chr(code) for code in _where((State.ESCAPE,), lambda a, n: n is State.ESCAPE)),
        "INTRODUCER_CHARS": "".join(chr(code) for code in sorted(_INTRODUCERS)) + "".join(
            chr(code + 0xDC00) for code in sorted(_INTRODUCERS) if code >= 0x80),
        "FORMS": _tokens(),
        "FORMS_7": _tokens(eight_bit=False),
        "RESTS": {int(state): rest for state, rest in _rests(groups=False).items()},
        "RESTS_7": {int(state): rest for state, rest in _rests(groups=False, eight_bit=False).items()},
        "CSI_BODY": codes(_CSI_BODY),
        "CSI_MARKS": codes(_where((State.CSI_ENTRY,), lambda a, n: a is ParserAction.COLLECT)),
        "STARTS": {int(state): codes(_starts(state)) for state in _RESTS_TARGETS},
        "STARTS_AFTER_ESC": {int(state): codes(_starts(state, State.ESCAPE)) for state in _RESTS_TARGETS},
    }


HEADER = '''"""The parser's table and patterns, derived ahead of time: generated by shellper.core.terminal.tablegen,
do not edit (``python -m shellper.core.terminal.tablegen`` writes it again)."""

# ruff: noqa: E501
'''


def render(values: dict[str, object]) -> str:
    """The source of ``_tables``: one assignment per value, by its ``repr`` (a dict's items one a line)."""
    lines = [HEADER]
    for name, value in values.items():
        if isinstance(value, dict):
            lines.append(f"{name} = {{")
            lines.extend(f"    {key!r}: {item!r}," for key, item in value.items())
            lines.append("}")
        elif isinstance(value, tuple) and value and isinstance(value[0], (bytes, tuple)):
            lines.append(f"{name} = (")
            lines.extend(f"    {item!r}," for item in value)
            lines.append(")")
        else:
            lines.append(f"{name} = {value!r}")
    return "\n".join(lines) + "\n"


TABLES = Path(__file__).with_name("_tables.py")


def main() -> int:
    """Write ``_tables.py`` from the derivation."""
    TABLES.write_text(render(derive()))
    print(f"wrote {TABLES}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
