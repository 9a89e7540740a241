"""A small, fast YAML emitter for the documents envsolver writes (mappings, lists, strings, numbers, booleans).

PyYAML's representer is pure Python and dominated `make`'s write time. This emitter writes block style
like PyYAML, quotes every string that is not plainly safe as a JSON string (which YAML reads as a
double-quoted scalar), and is checked by round-trip tests against yaml.safe_load.
"""

from __future__ import annotations

import json
import re
from typing import Any

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/+]*(?::[A-Za-z0-9_.\-/+]+)*$|^https?://[A-Za-z0-9_.\-/+%~:@]+$")
# YAML 1.1 reads these words as booleans or null when plain.
_RESERVED = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _RESERVED:
        return text
    return json.dumps(text, ensure_ascii=False)


def _key(value: Any) -> str:
    return scalar(str(value))


def _emit(value: Any, indent: str, out: list[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict) and item:
                out.append(f"{indent}{_key(key)}:")
                _emit(item, indent + "  ", out)
            elif isinstance(item, list) and item:
                out.append(f"{indent}{_key(key)}:")
                _emit(item, indent, out)
            else:
                out.append(f"{indent}{_key(key)}: {_inline(item)}")
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
    _emit(document, "", out)
    return "\n".join(out) + "\n"
