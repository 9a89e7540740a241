"""The <a> elements of an HTML page, read in one pass: time linear in the page's length, memory in what is kept.

A PEP 503 simple page is a list of `<a href="URL#sha256=HEX" data-requires-python="&gt;=3.9" ...>NAME</a>`.
html.parser, which read them before, scans an unclosed tag again from its '<' for every later tag, so a page of
unclosed `<a` tags took time quadratic in its length (100 KB of `<a ` 16 s; 16 MiB, days). This reads tags as
the HTML standard's tokenizer does (https://html.spec.whatwg.org/multipage/parsing.html#tokenization: the tag
open, tag name, attribute name and attribute value states), each character once, and an unfinished tag (a
quote or a '>' that never comes) ends the page there: nothing after it can be a tag.

What it gives is what html.parser gave envsolver (tests/test_anchors.py compares both on real pages and on
generated ones): a tag name and attribute names in lowercase, values with their character references decoded
(html.unescape), a value-less attribute as None, the last of two attributes with one name; an `<a ...>` counts
when an `</a>` closes it before the next `<a`, or as `<a .../>`; nothing inside a comment, a `<!...>` or `<?...>`
declaration, or a `<script>`/`<style>` element is a tag.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

Attributes = dict[str, "str | None"]

# The standard's ASCII whitespace: tab, LF, FF, CR, space.
_TAG_NAME = re.compile(r"[^\t\n\f\r />]*")
_BEFORE_NAME = re.compile(r"[\t\n\f\r /]*")
_ATTR_NAME = re.compile(r"[^\t\n\f\r />][^\t\n\f\r />=]*")  # its first character may be '='
_SPACES = re.compile(r"[\t\n\f\r ]*")
_UNQUOTED = re.compile(r"[^\t\n\f\r >]*")
# The longest tag read: a simple page's <a> holds a URL (pypi_index takes at most 4096 characters) and a few
# data-* attributes; a longer tag is no simple page's.
MAX_TAG = 64 << 10
_RAW_TEXT = {name: re.compile(rf"</[\t\n\f\r ]*{name}[\t\n\f\r ]*>", re.IGNORECASE) for name in ("script", "style")}


def anchors(text: str) -> Iterator[Attributes]:
    """The attributes of each closed <a> element of TEXT, in page order (module docstring). A tag that the page
    ends in, or that runs past MAX_TAG characters, ends the reading there. Never raises."""
    pending: Attributes | None = None
    at, last = 0, text.rfind(">")  # past the last '>', no tag can end
    while 0 <= (at := text.find("<", at)) < last:
        after = text[at + 1]
        if text.startswith("<!--", at):
            close = text.find("-->", at + 4)
            if close < 0:
                return
            at = close + 3
        elif after in "!?" or (after == "/" and not _letter(text[at + 2])):  # a declaration, a bogus comment
            at = text.find(">", at + 2) + 1  # `</>` included; at < last, so there is one
        elif after == "/":
            name = _TAG_NAME.match(text, at + 2)
            assert name is not None  # the pattern matches the empty string
            if name.group().lower() == "a" and pending is not None:
                yield pending
                pending = None
            at = text.find(">", name.end()) + 1
            if at == 0:
                return
        elif _letter(after):
            name = _TAG_NAME.match(text, at + 1, at + MAX_TAG)
            assert name is not None
            tag = name.group().lower()
            found = _attributes(text, name.end(), tag == "a", at + MAX_TAG)
            if found is None:
                return
            attributes, at, closed = found
            if tag == "a":
                pending = attributes
                if closed:
                    yield pending
                    pending = None
            elif tag in _RAW_TEXT and not closed:
                raw_end = _RAW_TEXT[tag].search(text, at)
                if raw_end is None:
                    return
                at = raw_end.end()
        else:
            at += 1


def _letter(char: str) -> bool:
    return char.isascii() and char.isalpha()


def _attributes(text: str, at: int, keep: bool, limit: int) -> tuple[Attributes, int, bool] | None:
    """(the tag's attributes, where the tag ends, whether it ends with `/>`) for the tag whose name ends at AT;
    None when the page ends first or the tag runs past LIMIT. The values are decoded only when KEEP (an <a>)."""
    attributes: Attributes = {}
    end = min(len(text), limit)
    while at < end:
        before = _BEFORE_NAME.match(text, at, end)
        assert before is not None
        at = before.end()
        if at >= end:
            return None
        if text[at] == ">":
            return attributes, at + 1, before.group().endswith("/")
        name = _ATTR_NAME.match(text, at, end)
        assert name is not None  # text[at] is none of whitespace, '/' and '>'
        at = _after_spaces(text, name.end(), end)
        value: str | None = None
        if at < end and text[at] == "=":
            at = _after_spaces(text, at + 1, end)
            if at >= end:
                return None
            if text[at] in "\"'":
                close = text.find(text[at], at + 1, end)
                if close < 0:
                    return None
                value, at = text[at + 1 : close], close + 1
            else:
                bare = _UNQUOTED.match(text, at, end)
                assert bare is not None
                value, at = bare.group(), bare.end()
        if keep:
            attributes[name.group().lower()] = html.unescape(value) if value else value
    return None


def _after_spaces(text: str, at: int, end: int) -> int:
    spaces = _SPACES.match(text, at, end)
    assert spaces is not None
    return spaces.end()
