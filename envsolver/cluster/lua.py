"""Lua string literals for the modulefiles envsolver writes (Lmod reads them as Lua source).

Every value reaches the file as one double-quoted literal built here, never pasted: a quote, a backslash, `]]`,
`--[[` or a newline inside a value cannot end the literal or start code. The literal is plain ASCII: the value's
UTF-8 bytes outside printable ASCII are written as `\\n` (a newline) or three-digit decimal escapes (`\\195\\169` for
'é'), which Lua 5.1 to 5.4 read the same way.
"""

from __future__ import annotations

# Source: Lua 5.3 reference manual, section 3.1 (Lexical Conventions): in a short literal string a backslash
# escapes '"' and '\\', and `\ddd` (up to three decimal digits) is the byte with that value.


def string(text: str) -> str:
    """`text` as a Lua string literal. Raises UnicodeEncodeError for text that is not valid UTF-8 (lone
    surrogates, as a non-UTF-8 file name decodes): callers validate values against their grammar first."""
    out = ['"']
    for byte in text.encode("utf-8"):
        if byte in (0x22, 0x5C):  # '"' and '\\'
            out.append("\\" + chr(byte))
        elif byte == 0x0A:
            out.append("\\n")
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:03d}")
    out.append('"')
    return "".join(out)


def concat(parts: list[str]) -> str:
    """Lua expressions (names or literals) joined with `..`."""
    return " .. ".join(parts)
