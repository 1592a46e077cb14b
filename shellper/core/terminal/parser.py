"""The grammar of terminal output (sans-IO): where each escape sequence ends and what it is.

One grammar for every part that reads a program's output: the screen model, the query filter of a replay,
the sanitisers of ``tail --plain`` and of exit reasons, the mode tracker and the ring's trims. It is the
DEC/VT500 state machine (Paul Williams, "A parser for DEC's ANSI-compatible video terminals",
vt100.net/emu/dec_ansi_parser), held once, as the table :data:`TABLE`: for each :class:`State` and each
character, an :class:`ParserAction` and the next state. Everything else here is read off that table:

- :func:`parse` classifies one token by stepping the table (kind, private marker, parameters,
  intermediates, final, data, the C0 controls executed inside it);
- the regular expressions (:data:`TOKEN` and its parts) are built from the table's character classes at
  import, so that plain text is skipped in C, never by a loop over characters in Python, and a consumer
  finds sequences with one search (:func:`pattern` builds the search for just the sequences it wants).
  The table's sub-states that end a sequence alike (CSI entry, parameters, intermediates and ignore; the
  DCS states) are one loop in them: :func:`_same_ends` checks at import that they do;
- the same patterns without the C1 controls' classes are ASCII, so they search bytes too: for output that
  holds no C1 control (:func:`c1_free`, most of it) the ring and the mode tracker ask them on the bytes
  (:func:`end_of_bytes`, :func:`unfinished_bytes`, a :func:`pattern` without ``eight_bit``), decoding none.

What the table says, in words:

- CSI: ``CSI [<=>?] params [intermediates] final``; C0 controls inside it (a BS in ``ESC [ 6 BS n``) are
  executed where they stand and do not end it (so the DSR is still a DSR), nor do they between ESC and
  the byte after it. DEL is ignored. A private marker after the first parameter byte, or a parameter
  byte after an intermediate, makes the sequence one that is ended by its final but never dispatched
  (the diagram's "CSI ignore"). ``:`` is a parameter byte (SGR's sub-parameters), as in every current
  terminal (the diagram, older, sends it to "ignore").
- ESC: ``ESC [intermediates] final``; ``ESC [``, ``ESC ]``, ``ESC P``, ``ESC X``, ``ESC ^``, ``ESC _``
  start CSI, OSC, DCS, SOS, PM and APC.
- OSC: to BEL (xterm's) or ST. DCS, SOS, PM, APC: to ST. C0 controls inside them are part of their data
  (ignored by a terminal), except CAN, SUB and ESC.
- Anywhere: CAN and SUB abort what is under way; ESC starts a new sequence; so does a C1 control. A
  string (OSC, DCS, ...) ended so is still dispatched by a terminal (the diagram's exit actions), so its
  data counts as a whole sequence here too, just without a terminator. ST's 7-bit form, ESC ``\\``,
  right after a string's data is that string's end, part of its token.
- A character above U+009F inside an escape or control sequence (not a string) aborts it and is text:
  no terminal dispatches such a sequence, and text is not swallowed waiting for a final byte.

8-bit C1 controls: the input is text, output decoded as UTF-8, in which C1 controls are the code points
U+0080-U+009F (what UTF-8 terminals such as xterm and VTE obey; 0x9B is CSI, 0x9D OSC, 0x90 DCS, 0x9C ST,
0x98/0x9E/0x9F SOS/PM/APC). Bytes that are not valid UTF-8 are C1 controls too when decoded with
``surrogateescape`` (:func:`decode`): a lone byte 0x80-0x9F becomes U+DC80-U+DC9F, which this grammar
takes for the C1 control of that byte, as a terminal in an 8-bit mode would. Decoded with ``replace``
(as the screen model decodes, a UTF-8 terminal's view) such bytes are U+FFFD, text. Bytes are filtered by
decoding them with ``surrogateescape`` and encoding the result back the same way, which gives back every
byte that was not removed exactly.

The patterns are strings, for the consumers that build their own expression around them (the screen
model adds fast paths for the commonest forms); :data:`TOKEN` is the whole grammar, one token per match.
They are compiled on first use (``re`` keeps them in its cache): a shellper whose child's output is never
read by one of them does not pay for compiling them at start-up.
"""

from __future__ import annotations

import enum
import re

from shellper.core.structs import record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import AnyStr

__all__ = [
    "TABLE",
    "TOKEN",
    "Kind",
    "ParserAction",
    "Sequence",
    "State",
    "aborts",
    "c1_free",
    "decode",
    "encode",
    "end_of",
    "end_of_bytes",
    "finished",
    "hold_back",
    "parse",
    "partial_char",
    "pattern",
    "transition",
    "unfinished",
    "unfinished_bytes",
]


class State(enum.IntEnum):
    """The states of the DEC diagram (int-valued: a hot loop hashes them, and an int hashes in C)."""

    GROUND = 0
    ESCAPE = 1
    ESCAPE_INTERMEDIATE = 2
    CSI_ENTRY = 3
    CSI_PARAM = 4
    CSI_INTERMEDIATE = 5
    CSI_IGNORE = 6
    DCS_ENTRY = 7
    DCS_PARAM = 8
    DCS_INTERMEDIATE = 9
    DCS_PASSTHROUGH = 10
    DCS_IGNORE = 11
    OSC_STRING = 12
    SOS_PM_APC_STRING = 13


class ParserAction(enum.IntEnum):
    """What a character does in a state (the diagram's actions, those that matter for where a sequence ends
    and what it is)."""

    PRINT = 0
    """Text."""
    EXECUTE = 1
    """A control, acted on where it stands (inside a sequence too: the sequence goes on)."""
    IGNORE = 2
    COLLECT = 3
    """A private marker or an intermediate."""
    PARAM = 4
    START = 5
    """The character begins a sequence (the diagram's "clear" on entering it)."""
    DISPATCH = 6
    """A final: the sequence ends with this character and is acted on."""
    HOOK = 7
    """A DCS's final: its data follows."""
    PUT = 8
    """A string's data."""
    END = 9
    """A terminator (BEL of an OSC, ST) or a final the sequence is not acted on for ("CSI ignore")."""


_ESC, _CAN, _SUB, _BEL, _DEL, _ST, _ST_FINAL = 0x1B, 0x18, 0x1A, 0x07, 0x7F, 0x9C, 0x5C
_WIDE = 0xA0
"""Characters from here on (and every lone surrogate but U+DC80-U+DC9F) are text to the table."""
_C0 = (*range(0x18), 0x19, *range(0x1C, 0x20))
"""The C0 controls but CAN, SUB and ESC (which act anywhere)."""
_CSI_STATES = (State.CSI_ENTRY, State.CSI_PARAM, State.CSI_INTERMEDIATE, State.CSI_IGNORE)
_DCS_STATES = (State.DCS_ENTRY, State.DCS_PARAM, State.DCS_INTERMEDIATE, State.DCS_PASSTHROUGH, State.DCS_IGNORE)
_STRING_STATES = (State.OSC_STRING, State.SOS_PM_APC_STRING, *_DCS_STATES)

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


def _code(char: str) -> int:
    """The table's index for ``char``: an undecodable byte 0x80-0x9F is the C1 control of its value."""
    code = ord(char)
    if 0xDC80 <= code <= 0xDC9F:
        return code - 0xDC00
    return code if code < _WIDE else _WIDE


def transition(state: State, char: str) -> tuple[ParserAction, State]:
    """What ``char`` does in ``state``, and the state after it."""
    return TABLE[state][_code(char)]


def aborts(state: State, char: str) -> bool:
    """Whether ``char`` ends a sequence under way in ``state`` before it (and begins something of its own)."""
    if state is State.GROUND:
        return False  # nothing is under way
    code = _code(char)
    return code in _ABORTS[state] or (code == _WIDE and state not in _STRING_STATES)


# ------------------------------------------------------------------------ the table as regular expressions

def _klass(codes: Iterable[int], eight_bit: bool = True) -> str:
    """A character class's body for the table's codes below U+00A0 (and the undecodable bytes of C1 ones).
    Without ``eight_bit``, for input with no C1 control (:func:`c1_free`): the codes below 0x80 alone, so
    that the class is one of bytes too (a negated one then takes every byte from 0x80, as the table takes
    every character from U+00A0: what a C1-free input's bytes from 0x80 are)."""
    chosen = sorted(code for code in set(codes) if eight_bit or code < 0x80)
    chosen += [code + 0xDC00 for code in chosen if 0x80 <= code <= 0x9F]
    out, i = [], 0
    while i < len(chosen):
        j = i
        while j + 1 < len(chosen) and chosen[j + 1] == chosen[j] + 1:
            j += 1
        first, last = (re.escape(chr(chosen[k])) for k in (i, j))
        out.append(first if i == j else f"{first}{last}" if j == i + 1 else f"{first}-{last}")
        i = j + 1
    return "".join(out)


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


_FORMS = _tokens()
CSI, OSC, DCS, SOS_PM_APC = (_FORMS[state.name] for state in (State.CSI_ENTRY, *_STRING_TARGETS))
ESCAPE, TEXT = _FORMS["ESCAPE"], _FORMS["TEXT"]
CONTROL = _FORMS["CONTROL"]
"""One control on its own (C1 ones that start nothing)."""
SEQUENCE = _FORMS["SEQUENCE"]
"""Any one token that is not text: a sequence (complete, aborted, or cut by the end) or one control."""
TOKEN = _FORMS["TOKEN"]
"""The whole grammar: consecutive matches from 0 cover any text exactly, one token each."""
EXECUTED_CHARS = "".join(chr(code) for code in _where((State.ESCAPE,), lambda a, n: n is State.ESCAPE))
_INTRODUCERS = {code for code, (action, _) in _ANYWHERE.items() if action is ParserAction.START}


def pattern(*, sequences: bool = False, csi_finals: str = "", marked_csi_finals: str = "", esc_finals: str = "",
            osc_prefixes: tuple[str, ...] = (), strings: bool = False, controls: str = "",
            eight_bit: bool = True) -> str:
    """A pattern that, searched for anywhere in a text, matches exactly the whole tokens of this grammar a
    consumer wants, and nothing else (every token it wants begins with an introducer, and every introducer
    begins a token): with ``sequences``, every escape sequence (complete, aborted or cut by the end);
    otherwise the complete CSIs with no private marker nor intermediate whose final is in ``csi_finals``,
    the complete ones with either whose final is in ``marked_csi_finals``, the complete ESC sequences
    without intermediates whose final is in ``esc_finals``, the OSCs whose data begins with one of
    ``osc_prefixes`` and, with ``strings``, every OSC, DCS, SOS, PM and APC (whole, however they end:
    :attr:`Sequence.complete` says); and, either way, each of the ``controls`` on its own. A consumer
    classifies what it gets with :func:`parse`.

    The pattern begins with a class of the characters that can begin a match, then tells them apart with
    a look-behind: so ``re`` skips everything else (plain text, and most of a TUI's output) in C. Without
    ``eight_bit``, for input with no C1 control (:func:`c1_free`), it begins with ESC alone, which ``re``
    finds faster still, and is ASCII: encoded, it searches such UTF-8 bytes as it searches their text."""
    rest = _rests(groups=False, eight_bit=eight_bit)
    after: dict[State, list[str]] = {state: [] for state in rest}  # what may follow each introducer
    if sequences:
        for state, form in rest.items():
            after[state].append(form)
    csi, marks = [], _where((State.CSI_ENTRY,), lambda a, n: a is ParserAction.COLLECT)
    if csi_finals:
        csi.append(f"[{_klass(map(ord, csi_finals))}]")
    if marked_csi_finals:
        csi.append(f"[{_klass(marks)}][{_klass(_CSI_BODY, eight_bit)}]*+[{_klass(map(ord, marked_csi_finals))}]")
    if csi and not sequences:
        after[State.CSI_ENTRY].append(f"[{_klass(_CSI_BODY - marks, eight_bit)}]*+(?:{'|'.join(csi)})")
    if strings and not sequences:
        for state in (State.OSC_STRING, State.DCS_ENTRY, State.SOS_PM_APC_STRING):
            after[state].append(rest[state])
    elif osc_prefixes and not sequences:
        after[State.OSC_STRING].append(f"(?={'|'.join(map(re.escape, osc_prefixes))}){rest[State.OSC_STRING]}")
    if esc_finals and not sequences:
        after[State.ESCAPE].append(f"[{_klass(map(ord, esc_finals))}]")
    # After ESC (and the C0 controls it executes): a second character that begins a sequence, or a final.
    esc = [f"[{_klass(_starts(state, State.ESCAPE))}](?:{'|'.join(forms)})"
           for state, forms in after.items() if forms and state is not State.ESCAPE]
    esc += after[State.ESCAPE]  # last: an ESC on its own matches nothing more
    if not eight_bit:
        return f"{re.escape(chr(_ESC))}[{EXECUTED}]*+(?:{'|'.join(esc)})" if esc else "(?!)"
    branches, first = [], set(map(ord, controls))
    if esc:
        branches.append(f"(?<={re.escape(chr(_ESC))})[{EXECUTED}]*+(?:{'|'.join(esc)})")
        first.add(_ESC)
    for state, forms in after.items():
        if forms and state is not State.ESCAPE:
            branches.append(f"(?<=[{_klass(_starts(state))}])(?:{'|'.join(forms)})")
            first |= _starts(state)
    if controls:
        branches.append(f"(?<=[{_klass(map(ord, controls))}])")
    if not branches:
        return "(?!)"
    return f"[{_klass(first)}](?:{'|'.join(branches)})"


# --------------------------------------------------------------------------------------------- the tokens

def decode(data: bytes) -> str:
    """``data`` as text for this grammar: UTF-8, and any byte that is not, kept as U+DC80-U+DCFF."""
    return data.decode("utf-8", "surrogateescape")


def encode(text: str) -> bytes:
    """The inverse of :func:`decode`."""
    return text.encode("utf-8", "surrogateescape")


def partial_char(data: bytes) -> int:
    """How many bytes at the end of ``data`` begin a UTF-8 character that more data would complete. Decode
    ``data`` without them: alone, a character's bytes 0x80-0x9F would read as C1 controls."""
    for back in range(1, min(4, len(data) + 1)):
        byte = data[-back]
        if byte < 0x80:
            return 0
        if byte >= 0xC0:  # a lead byte: 2, 3 or 4 bytes long
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return back if back < need and byte <= 0xF4 else 0
    return 0


class Kind(enum.Enum):
    """What a token is."""

    TEXT = "text"
    CONTROL = "control"
    CSI = "csi"
    ESC = "esc"
    OSC = "osc"
    DCS = "dcs"
    SOS = "sos"
    PM = "pm"
    APC = "apc"


STRINGS = (Kind.OSC, Kind.DCS, Kind.SOS, Kind.PM, Kind.APC)


@record
class Sequence:
    """One token of :data:`TOKEN`, classified."""

    kind: Kind
    complete: bool = True
    """False: aborted (by CAN, SUB, ESC, a C1 control or a character above U+009F) or cut by the end."""
    dispatched: bool = True
    """Whether a terminal acts on it: not on an incomplete CSI or ESC, nor on a CSI or DCS the grammar
    ignores. A string is acted on however it ends."""
    private: str = ""
    """A CSI's or DCS's private marker, one of ``<=>?``, or ""."""
    params: str = ""
    """Its parameters (for an ignored CSI, everything between its introducer and its final)."""
    intermediates: str = ""
    final: str = ""
    data: str = ""
    """An OSC's, DCS's (after its final), SOS's, PM's or APC's data; a control or text itself."""
    controls: str = ""
    """The C0 controls (and DELs) inside a CSI or ESC, or before a string's data, which a terminal executes
    before it acts on the sequence."""


def finished(m: re.Match[str] | re.Match[bytes]) -> bool:
    """Whether the token of a :data:`TOKEN` match has its end (a final byte, a terminator), or needs none."""
    return m.lastgroup is not None  # every named group is a token's end


_STRING_KIND = {"]": Kind.OSC, "P": Kind.DCS, "X": Kind.SOS, "^": Kind.PM, "_": Kind.APC,
                "\x9d": Kind.OSC, "\x90": Kind.DCS, "\x98": Kind.SOS, "\x9e": Kind.PM, "\x9f": Kind.APC}
_KIND_OF_STATE = {State.ESCAPE: Kind.ESC, State.CSI_ENTRY: Kind.CSI}
_DATA_STATES = (State.OSC_STRING, State.SOS_PM_APC_STRING, State.DCS_PASSTHROUGH, State.DCS_IGNORE)


def parse(token: str) -> Sequence:
    """Classify one token (the whole of a match of :data:`TOKEN`) by stepping :data:`TABLE` over it (a
    string's data is taken whole, not stepped)."""
    m = _compiled(TOKEN).fullmatch(token)
    if m is None:
        raise ValueError(f"not one token: {token!r}")
    if m.lastgroup == "text":
        return Sequence(kind=Kind.TEXT, data=token)
    if m.lastgroup == "control":
        return Sequence(kind=Kind.CONTROL, data=token)
    kind, state, ignored = Kind.ESC, State.GROUND, False
    private = params = intermediates = final = controls = raw = ""
    table, aborts_ = TABLE, _ABORTS
    for i, char in enumerate(token):
        code = _code(char)
        action, state_after = table[state][code]
        if state is not State.GROUND and code in aborts_[state]:
            break  # only an ST's ESC, in a string's token: its end
        if state_after is State.CSI_IGNORE or state_after is State.DCS_IGNORE:
            ignored = True
        if action is ParserAction.START:
            kind = _KIND_OF_STATE.get(state_after) or _STRING_KIND[chr(code)]
        elif code < 0x20 or code == _DEL:
            if state not in _DCS_STATES:  # executed (DEL ignored) where it stands; a DCS header ignores them
                controls += char
        elif action is ParserAction.COLLECT:
            raw += char
            if state in (State.CSI_ENTRY, State.DCS_ENTRY) and code >= 0x3C:
                private += char
            else:
                intermediates += char
        elif action is ParserAction.PARAM:
            raw += char
            params += char
        elif action is ParserAction.IGNORE:
            raw += char
        elif action is ParserAction.DISPATCH or action is ParserAction.HOOK or state in _CSI_STATES:
            final = char
        state = state_after
        if state in _DATA_STATES:
            end = m.group(m.lastgroup) if m.lastgroup else ""
            data = token[i + 1:len(token) - len(end)]
            if state is State.DCS_IGNORE:
                return Sequence(kind=kind, complete=bool(end), dispatched=False, params=raw + data, data="",
                                controls=controls)
            return Sequence(kind=kind, complete=bool(end), private=private, params=params,
                            intermediates=intermediates, final=final, data=data, controls=controls)
        if state is State.GROUND:
            break
    complete = finished(m)
    if kind in STRINGS:  # a DCS cut or aborted in its header
        return Sequence(kind=kind, complete=complete, dispatched=not ignored, private=private, params=params,
                        intermediates=intermediates, controls=controls)
    if ignored:  # the diagram's "CSI ignore": it ends, and nothing is done
        return Sequence(kind=kind, complete=complete, dispatched=False, params=raw, final=final, controls=controls)
    return Sequence(kind=kind, complete=complete, dispatched=complete, private=private, params=params,
                    intermediates=intermediates, final=final, controls=controls)


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled, once: a dict lookup, where ``re.compile``'s own cache costs a few of its calls
    (a ring trims on every append past its capacity, and asks the grammar each time)."""
    found = _PATTERNS.get(pattern)
    if found is None:
        found = _PATTERNS[pattern] = re.compile(pattern)
    return found


def end_of(text: str, pos: int = 0) -> int | None:
    """Where the token that begins at ``text[pos]`` ends, or None when the end of ``text`` cuts it short (more
    text could change where it ends; an ESC right after a string's data may begin its ST)."""
    return _end_in(text, pos, _TEXT_SEARCHES or _searches(_TEXT_SEARCHES, _FORMS, str))


def end_of_bytes(data: bytes, pos: int = 0) -> int | None:
    """:func:`end_of` for bytes that hold no C1 control (:func:`c1_free`), without decoding them: an index
    into ``data``. The answer is the text's only for such bytes; a caller checks the token's bytes."""
    return _end_in(data, pos, _BYTE_SEARCHES or _searches(_BYTE_SEARCHES, _tokens(eight_bit=False), str.encode))


def _end_in(text: AnyStr, pos: int, searches: list[re.Pattern[AnyStr]]) -> int | None:
    token, string_start, esc_at_end = searches
    m = token.match(text, pos)
    assert m is not None  # every character starts a token
    end = m.end()
    if end == len(text):
        return end if m.lastgroup is not None else None  # finished, or text
    if m.lastgroup is None and string_start.match(text, pos) and esc_at_end.match(text, end):
        return None
    return end


def hold_back(text: str, most: int) -> tuple[str, str]:
    """``text`` split into what can be used now and the sequence its end cuts short (:func:`unfinished`), to
    be put before the next piece; a cut-short sequence longer than ``most`` is dropped rather than held."""
    cut = unfinished(text)
    if cut < 0:
        return text, ""
    return text[:cut], (text[cut:] if len(text) - cut <= most else "")


def unfinished(text: str) -> int:
    """Where a sequence begins that the end of ``text`` cuts short (more text could change what it is), or
    -1. An ESC at the very end after a string's data leaves the string unfinished (it may start its ST).
    When ``text`` is ASCII (so without C1 controls) this costs one ``rfind``."""
    return _unfinished_in(text, _last_introducer, _TEXT_SEARCHES or _searches(_TEXT_SEARCHES, _FORMS, str))


def unfinished_bytes(data: bytes) -> int:
    """:func:`unfinished` for bytes that hold no C1 control (:func:`c1_free`), without decoding them: an index
    into ``data``. Costs one ``rfind`` and one match."""
    return _unfinished_in(data, _last_esc,
                          _BYTE_SEARCHES or _searches(_BYTE_SEARCHES, _tokens(eight_bit=False), str.encode))


def _unfinished_in(text: AnyStr, last_introducer: Callable[[AnyStr, int], int],
                   searches: list[re.Pattern[AnyStr]]) -> int:
    start = last_introducer(text, len(text))
    if start < 0:
        return -1
    token, string_start, esc_at_end = searches
    m = token.match(text, start)
    assert m is not None  # every character starts a token
    if m.end() < len(text) or m.lastgroup is not None:
        return -1
    if start and esc_at_end.match(text, start):
        prior = last_introducer(text, start)
        s = token.match(text, prior) if prior >= 0 else None
        if s is not None and s.end() == start and s.lastgroup is None and string_start.match(text, prior):
            return prior
    return start


def c1_free(data: bytes) -> bool:
    """Whether ``data`` is UTF-8 that holds no C1 control (U+0080-U+009F) and ends on a whole character. Such
    bytes are read by the bytes forms of the grammar (:func:`end_of_bytes`, :func:`unfinished_bytes`, a
    :func:`pattern` without ``eight_bit``, encoded) as the text forms read their text: each byte of a
    character from U+00A0 is, to the table, what that character is (its last column). Scans in C: an
    ``isascii``, else a strict decode."""
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\xc2" not in data or _C1_UTF8.search(data) is None


_C1_UTF8 = re.compile(b"\xc2[\x80-\x9f]")
"""A C1 control in valid UTF-8 (where a byte 0x80-0x9F after any other lead byte continues a character)."""


def _last_esc(data: bytes, end: int) -> int:
    """The last introducer before ``end`` in bytes with no C1 control: the last ESC."""
    return data.rfind(b"\x1b", 0, end)


_TEXT_SEARCHES: list[re.Pattern[str]] = []
_BYTE_SEARCHES: list[re.Pattern[bytes]] = []
_ESC_AT_END = f"{ESC}\\Z"


def _searches(into: list[re.Pattern[AnyStr]], forms: dict[str, str], form: Callable[[str], AnyStr],
              ) -> list[re.Pattern[AnyStr]]:
    """``into`` filled, on first use, with the searches :func:`end_of` and :func:`unfinished` make (the whole
    grammar, a string's introducer, an ESC at the end), from ``forms`` made text or bytes by ``form``."""
    if not into:
        into.extend(re.compile(form(pattern)) for pattern in (forms["TOKEN"], forms["STRING_START"], _ESC_AT_END))
    return into


def _last_introducer(text: str, end: int) -> int:
    """The last ESC or C1 introducer before ``end``, or -1: the last ESC, unless a C1 control follows it
    (searched for only after that ESC, usually a few characters, rather than an ``rfind`` per introducer)."""
    esc = text.rfind("\x1b", 0, end)
    if text.isascii() or _C1_ANYWHERE.search(text, esc + 1, end) is None:
        return esc
    return max(text.rfind(char, esc + 1, end) for char in _INTRODUCER_CHARS)


_INTRODUCER_CHARS = "".join(chr(code) for code in sorted(_INTRODUCERS)) + "".join(
    chr(code + 0xDC00) for code in sorted(_INTRODUCERS) if code >= 0x80)
_C1_ANYWHERE = re.compile("[\x80-\x9f\udc80-\udc9f]")
"""A C1 control in either form (decoded, or an undecodable byte 0x80-0x9F)."""
