"""A small, fast YAML emitter for the documents envsolver writes (mappings, lists, strings, integers, booleans).

PyYAML's representer is pure Python and dominated `make`'s write time. This emitter writes block style
like PyYAML and has one quoting rule for every string (`scalar`): plain only when no YAML 1.1 or 1.2 reader
can take it for anything but that string, else double-quoted with every character that is not printable
escaped. Round-trip tests (tests/test_yamlemit.py) check it against yaml.safe_load and ruamel.yaml.
"""

from __future__ import annotations

import re
from typing import Any

# Plain-scalar grammar: no indicator first, no ": " or " #", no space at either end, nothing a reader folds.
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-/+=;]*(?::[A-Za-z0-9_.\-/+=;]+)*|https?://[A-Za-z0-9_.\-/+%~:@]+")
# YAML 1.1 reads these words (any case) as booleans or null when plain; 1.2 reads a subset of them.
_RESERVED = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}
# Every implicit non-string scalar of YAML 1.1 (bool, int incl. 0b/0x/sexagesimal, float incl. .inf/.nan,
# null, timestamp, merge, value) and of YAML 1.2's core schema is spelled with digits, "+-._:~<= ", hex
# letters, x/o/b prefixes, the timestamp's t/z and the letters of its words (yes/no/on/off/true/false/null/
# inf/nan). A string holding any character outside that set can be none of them.
_NOT_IMPLICIT = frozenset("ghjkmpqvwGHJKMPQVW;/")
# YAML's double-quoted escapes for the control characters people read; others use \x, \u or \U.
_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b", "\f": "\\f"}
_QUOTED = {"\\": "\\\\", '"': '\\"'}
# An implicit key may be at most 1024 characters long (YAML 1.2 section 7.4, PyYAML's scanner).
_IMPLICIT_KEY_MAX = 1000


def _escape_char(char: str, quote: bool) -> str:
    if char.isprintable():
        return _QUOTED.get(char, char) if quote else char
    if char in _ESCAPES:
        return _ESCAPES[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape(text: str, quote: bool = False) -> str:
    """`text` with every non-printable character escaped (str.isprintable: controls, DEL, C1 controls,
    U+0085, U+2028/2029, U+FEFF and other format characters, surrogates, unassigned and private-use code
    points); with quote=True also '"' and '\\', as YAML's double-quoted style needs."""
    if text.isprintable():
        return text.replace("\\", "\\\\").replace('"', '\\"') if quote else text
    return "".join(_escape_char(ch, quote) for ch in text)


def comment(text: str) -> str:
    """`text` made safe to follow '#' on one line: nothing in it can end the comment (no line break that YAML,
    conda or str.splitlines knows) and nothing non-printable reaches the file; printable text is unchanged."""
    return escape(text)


def _plain(text: str) -> bool:
    if not _PLAIN.fullmatch(text):
        return False
    if text[0].isalpha() or text[0] == "_":
        return text.lower() not in _RESERVED
    return not _NOT_IMPLICIT.isdisjoint(text)


# str -> its scalar: a lock repeats its keys and many values (a few thousand scalars, a few hundred distinct).
_SCALARS: dict[str, str] = {}
_SCALARS_MAX = 8192


def _text(text: str) -> str:
    """A string's scalar: plain where YAML reads it back as this string, else double-quoted and escaped."""
    return text if _plain(text) else f'"{escape(text, quote=True)}"'


def scalar(value: Any) -> str:
    if type(value) is str:
        found = _SCALARS.get(value)
        if found is None:
            found = _text(value)
            if len(_SCALARS) < _SCALARS_MAX:
                _SCALARS[value] = found
        return found
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        try:
            return str(value)
        except ValueError:  # past sys.get_int_max_str_digits(); hex has no such limit in Python or YAML
            return f"-0x{-value:x}" if value < 0 else f"0x{value:x}"
    return _text(str(value))


def _key(value: Any, indent: str) -> str:
    """`key:`, or past the implicit-key limit an explicit key: `? key` and `:` on the next line."""
    text = scalar(str(value))
    if len(text) > _IMPLICIT_KEY_MAX:
        return f"{indent}? {text}\n{indent}:"
    return f"{indent}{text}:"


def _emit(value: Any, indent: str, out: list[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            head = _key(key, indent)
            if isinstance(item, dict) and item:
                out.append(head)
                _emit(item, indent + "  ", out)
            elif isinstance(item, list) and item:
                out.append(head)
                _emit(item, indent, out)
            else:
                out.append(f"{head} {_inline(item)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)) and item:
                lines: list[str] = []
                _emit(item, indent + "  ", lines)
                out.append(f"{indent}- {lines[0][len(indent) + 2 :]}")
                out.extend(lines[1:])
            else:
                out.append(f"{indent}- {_inline(item)}")
    else:
        out.append(f"{indent}{_inline(value)}")


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return scalar(value)


def dump(document: Any) -> str:
    out: list[str] = []
    if isinstance(document, (dict, list)) and not document:
        out.append(_inline(document))
    else:
        _emit(document, "", out)
    return "\n".join(out) + "\n"
