"""envsolver.net.anchors: linear in the page's length, and what html.parser (which read simple pages before it)
gave for every real page and for generated ones."""

from __future__ import annotations

import html
import html.parser
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envsolver.lock.pypi import loopback, snapshot
from envsolver.net import anchors
from envsolver.net import pypi_index as index
from tests.test_pins import PAGE

SHA = "a" * 64
MIB16 = 16 << 20


class _Reference(html.parser.HTMLParser):
    """What parse_html read simple pages with before envsolver.net.anchors: each <a>'s attributes, kept at its </a>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[dict[str, str | None]] = []
        self._open: dict[str, str | None] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open = dict(attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.found.append(self._open)
            self._open = None


def reference(text: str) -> list[dict[str, str | None]]:
    parser = _Reference()
    parser.feed(text)
    parser.close()
    return parser.found


def _real_pages() -> list[tuple[str, str, str]]:
    """(project, page, its URL): PyPI's real deepspeed page and the loopback index's page of every project the
    bundled snapshot holds (the pages uv and make read offline)."""
    pages = [("deepspeed", PAGE.read_text(), "https://pypi.org/simple/deepspeed/")]
    for path in sorted(snapshot.data_dir().glob("*.json")):
        served = loopback.page_html(path.stem, "http://127.0.0.1:8000")
        assert served is not None, path
        pages.append((path.stem, served.decode(), f"http://127.0.0.1:8000/simple/{path.stem}/"))
    return pages


def test_every_real_page_reads_as_html_parser_read_it() -> None:
    pages = _real_pages()
    assert len(pages) > 20, "the bundled snapshot's pages are read"
    files = 0
    for project, text, url in pages:
        assert list(anchors.anchors(text)) == reference(text), project
        found = index.parse_html(text, project, url)
        assert found, f"{project}: no lockable file read from its page"
        files += len(found)
    assert files > 1000, files


# Generated pages: the forms simple pages take (quoting, case, entities, comments, scripts, self-closing tags),
# each read the same by both.
_NAMES = st.sampled_from(["href", "HREF", "data-requires-python", "data-yanked", "data-core-metadata", "rel", "x"])
_VALUES = st.text(st.sampled_from("ab=/#:.&;<> \"'-_01"), max_size=12).map(lambda v: v.replace("&", "&amp;"))


@st.composite
def _attribute(draw: st.DrawFn) -> str:
    name, value = draw(_NAMES), draw(_VALUES)
    form = draw(st.sampled_from(["bare-name", "double", "single", "unquoted", "entity"]))
    space = draw(st.sampled_from(["", " ", "\n"]))
    if form == "bare-name":
        return name
    if form == "double":
        return f'{name}{space}={space}"{value.replace(chr(34), "&quot;")}"'
    if form == "single":
        return f"{name}='{value.replace(chr(39), '&#39;')}'"
    if form == "entity":
        return f'{name}="&gt;=3.{len(value)}&lt;4"'
    bare = "".join(c for c in value if c not in " \t\n\"'<>=&`") or "v"
    return f"{name}={bare}"


@st.composite
def _piece(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["a", "a", "a", "br", "h1", "comment", "script", "text", "doctype", "A"]))
    attributes = draw(st.lists(_attribute(), max_size=4))
    joined = "".join(" " + a for a in attributes)
    if kind in ("a", "A"):
        closing = draw(st.sampled_from(["</a>", "</A>", "</a >", "", "self"]))
        text = html.escape(draw(st.text(st.sampled_from("ab.-<>&"), max_size=6)))
        if closing == "self":
            return f"<{kind}{joined}/>"
        return f"<{kind}{joined}>{text}{closing}"
    if kind == "br":
        return "<br/>"
    if kind == "h1":
        return f"<h1{joined}>Links</h1>"
    if kind == "comment":
        return f'<!-- <a href="https://h/deepspeed-9.tar.gz#sha256={SHA}"></a> -->'
    if kind == "script":
        return '<script>var s = "<a href=x></a>";</script>'
    if kind == "doctype":
        return "<!DOCTYPE html>"
    return html.escape(draw(st.text(st.sampled_from("ab <>&\n"), max_size=8)))


@settings(max_examples=300, deadline=None)
@given(st.lists(_piece(), max_size=12))
def test_generated_pages_read_as_html_parser_read_them(pieces: list[str]) -> None:
    text = "<html><body>\n" + "\n".join(pieces) + "\n</body></html>"
    assert list(anchors.anchors(text)) == reference(text), text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('<A HREF="x" Data-Yanked>t</A>', [{"href": "x", "data-yanked": None}]),
        ("<a href='&gt;=3' data-yanked=\"\">t</a>", [{"href": ">=3", "data-yanked": ""}]),
        ("<a href=x/>", []),  # an unquoted value takes the '/': no self-closing tag, no </a>
        ('<a href="x"/>', [{"href": "x"}]),
        ('<a href="1"><a href="2"></a></a>', [{"href": "2"}]),  # the later <a> replaces the open one
        ('<a href="a>b">t</a>', [{"href": "a>b"}]),  # a quoted '>' does not end the tag
        ('<a href="1" href="2">t</a>', [{"href": "2"}]),  # the last of two, as html.parser gave
        ('<!-- <a href="x"></a> --><a href="y"></a>', [{"href": "y"}]),
        ('<script><a href="x"></a></script><a href="y"></a>', [{"href": "y"}]),
        ('<style><a href="x"></a></STYLE ><a href="y"></a>', [{"href": "y"}]),
        ('</ <a href="x">t</a>', []),  # `</` and no letter: a bogus comment to the first '>'
        ('<a href="x">t</a><a href="unclosed', [{"href": "x"}]),  # a quote that never closes ends the page
        ('<a href="x">t</a><!-- never closed <a href="y"></a>', [{"href": "x"}]),
        ('<a href="x">t</a><a' + " y" * (anchors.MAX_TAG // 2) + "></a>", [{"href": "x"}]),  # past MAX_TAG
    ],
    ids=[
        "case",
        "entities-and-empty",
        "unquoted-slash",
        "self-closing",
        "nested",
        "quoted-gt",
        "duplicate",
        "comment",
        "script",
        "style",
        "bogus-end-tag",
        "unclosed-quote",
        "unclosed-comment",
        "tag-past-bound",
    ],
)
def test_what_the_reader_takes(text: str, expected: list[dict[str, str | None]]) -> None:
    assert list(anchors.anchors(text)) == expected


@pytest.mark.parametrize(
    "unit",
    ["<a ", "<a", '<a href="x', "<a href=x ", "<a href='", "<a data-yanked ", "<!--<a "],
    ids=["space", "bare", "unclosed-quote", "unquoted", "single-quote", "attribute", "comment"],
)
@pytest.mark.parametrize("end", ["", ">"], ids=["to-the-end", "then-one-gt"])
def test_16_mib_of_unclosed_a_tags_parse_in_under_2_s(unit: str, end: str) -> None:
    # html.parser took 1.2 s for 25 KB, 4.3 s for 50 KB, 16.4 s for 100 KB of them (the audit's figures);
    # 18.4 s for 50 KB of `<a ` on this machine.
    text = unit * (MIB16 // len(unit)) + end
    started = time.perf_counter()
    files = index.parse_html(text, "deepspeed", "https://h/simple/deepspeed/")
    took = time.perf_counter() - started
    assert files == [] and took < 2.0, f"{len(text)} characters of {unit!r} took {took:.2f} s"
