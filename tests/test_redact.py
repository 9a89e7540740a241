"""Credentials never reach a written file, stdout or stderr: redact/redact_text on every form of credential
(tables and hypothesis properties), and `envsolver make --channel` against real local servers."""

from __future__ import annotations

import base64
import http.server
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st

from envsolver.cli.main import main
from envsolver.core.errors import BadInputError
from envsolver.core.redact import MASK, SECRET_KEY_PARTS, redact, redact_text
from envsolver.lock import run as lock
from tests.test_http import Server, send, serve

SNAPSHOT = Path(__file__).parent.parent / "envsolver" / "lock" / "snapshot" / "data"


@pytest.mark.parametrize(
    ("url", "public", "masked"),
    [
        (
            "https://user:s3cret@mirror.example.org/conda-forge",
            "https://mirror.example.org/conda-forge",
            "https://***@mirror.example.org/conda-forge",
        ),
        (
            "https://tk-123@mirror.example.org/conda-forge",
            "https://mirror.example.org/conda-forge",
            "https://***@mirror.example.org/conda-forge",
        ),
        (
            "https://conda.anaconda.org/t/ab-12cd34/private/linux-64/x-1-0.conda",
            "https://conda.anaconda.org/private/linux-64/x-1-0.conda",
            "https://conda.anaconda.org/t/***/private/linux-64/x-1-0.conda",
        ),
        ("https://h/t/tok", "https://h", "https://h/t/***"),
        ("https://h/c/t/t/tok/x", "https://h/c/x", "https://h/c/t/***/***/x"),
        ("https://h/c?token=tk-1", "https://h/c", "https://h/c?token=***"),
        ("https://h/c?a=1&access_token=tk-1&b=2", "https://h/c?a=1&b=2", "https://h/c?a=1&access_token=***&b=2"),
        ("https://h/c?API-Key=k&password=p", "https://h/c", "https://h/c?API-Key=***&password=***"),
        ("https://h/c?token=a?b#c&d=1", "https://h/c?d=1", "https://h/c?token=***&d=1"),
        ("https://h/c#access_token=x", "https://h/c", "https://h/c#access_token=***"),
        ("https://h/c?page=2", "https://h/c?page=2", "https://h/c?page=2"),
        ("https://u:p/w@h/c", "https://h/c", "https://***@h/c"),  # an unencoded '/' in the password
        ("http://u:pw@[::1/t/tok/", "http://[::1/", "http://***@[::1/t/***/"),  # not a valid URL
        ("http://[::1", "http://[::1", "http://[::1"),
        (
            "file:///srv/t/channels/conda-forge",
            "file:///srv/t/channels/conda-forge",
            "file:///srv/t/channels/conda-forge",
        ),
        ("conda-forge", "conda-forge", "conda-forge"),
        ("", "", ""),
    ],
)
def test_redact_table(url: str, public: str, masked: str) -> None:
    assert redact(url) == public
    assert redact_text(url) == masked


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (
            "error sending request for url (http://u:********@h/t/********/c/linux-64/repodata.json)",
            "error sending request for url (http://***@h/t/***/c/linux-64/repodata.json)",
        ),
        (
            "--mirror 'FROM=http://user:pw@host/t/tk-SECRET/x' is not FROM=TO",
            "--mirror 'FROM=http://***@host/t/***/x' is not FROM=TO",
        ),
        (
            "https://conda.anaconda.org=https://u:pw@mirror/t/tk/conda and http://v:pw2@other/",
            "https://conda.anaconda.org=https://***@mirror/t/***/conda and http://***@other/",
        ),
        ("mail me@example.org about /home/t/notes", "mail me@example.org about /home/t/***"),
        ("nothing to hide: 4 packages", "nothing to hide: 4 packages"),
    ],
)
def test_redact_text_table(text: str, masked: str) -> None:
    assert redact_text(text) == masked


# Secrets start with a marker no other part can contain (the other parts are lower case), and are drawn from
# the characters each position allows unencoded (RFC 3986), plus what users paste in practice ('/', '?', '#'
# in a password). A password holding `://` itself is outside what any URL reader can take apart.
UNRESERVED = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~%"
SUB_DELIMS = "!$&'()*+,;="
MARK = "S3CR"
lower = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-._", min_size=1, max_size=8)
password = st.text(alphabet=UNRESERVED + SUB_DELIMS + ":@/?#", max_size=12).filter(lambda s: "://" not in s)
path_token = st.text(alphabet=UNRESERVED + SUB_DELIMS + ":@", max_size=12)
query_value = st.text(alphabet=UNRESERVED + SUB_DELIMS.replace("&", "").replace(";", "") + ":@/?#", max_size=12)
secret_key = st.sampled_from(["token", "access_token", "api_key", "apikey", "password", "X-Amz-Signature", "key"])


@st.composite
def urls_with_secrets(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "https", "HTTPS", "s3", "oci"]))
    host = draw(st.sampled_from(["h", "mirror.example.org", "127.0.0.1:8080", "[::1]", "[::1", "t"]))
    user = draw(lower)
    userinfo = draw(st.sampled_from(["", f"{user}@", f"{user}:{MARK}{draw(password)}@", f"{MARK}{draw(password)}@"]))
    segments = draw(st.lists(st.one_of(lower, st.just("t")), max_size=4))
    if draw(st.booleans()):
        segments.insert(draw(st.integers(0, len(segments))), f"t/{MARK}{draw(path_token)}")
    params = [f"{k}={v}" for k, v in draw(st.lists(st.tuples(lower, lower), max_size=3))]
    if draw(st.booleans()):
        params.insert(draw(st.integers(0, len(params))), f"{draw(secret_key)}={MARK}{draw(query_value)}")
    query = ("?" + draw(st.sampled_from(["&", ";"])).join(params)) if params else ""
    fragment = draw(st.sampled_from(["", "#md5", "#frag"]))
    url = f"{scheme}://{userinfo}{host}/{'/'.join(segments)}{query}{fragment}"
    before = draw(st.sampled_from(["", "error: (", "--channel '", "FROM=", "https://a.org/x=", "see "]))
    after = draw(st.sampled_from(["", ")", "' is bad", " and more", ": 401", "\n"]))
    return before + url + after


@settings(max_examples=400, deadline=None)
@given(urls_with_secrets())
@example(f"http://u:{MARK}@[::1/t/{MARK}x/?token={MARK}")
@example(f"https://h/t/t/{MARK}/x")
@example(f"https://h/x?next=https://h/y?token={MARK}#md5")
@example(f"'https://u:{MARK}'@h/x'")
def test_no_secret_survives(url: str) -> None:
    assert MARK not in redact(url)
    assert MARK not in redact_text(url)


@settings(max_examples=400, deadline=None)
@given(st.text())
@example("http://[::1")
@example("://@://@")
@example("?token=&&token=")
def test_any_text_is_accepted_and_the_public_form_has_nothing_left_to_mask(text: str) -> None:
    public = redact(text)
    assert redact_text(public) == public
    masked = redact_text(text)
    assert redact_text(masked) == masked


@pytest.mark.parametrize(
    "text",
    ["https://h/" + "a" * 100_000, "http://" + "a" * 100_000 + "@", ("?token=" + "a" * 10) * 8000, "://" * 30_000],
    ids=["long path", "long authority", "many params", "many schemes"],
)
def test_long_texts_take_linear_time(text: str) -> None:
    """Solver texts can be long; a quadratic scan took minutes on these."""
    started = time.monotonic()
    assert MARK not in redact(text) + redact_text(text)
    took = time.monotonic() - started
    assert took < 30, f"took {took:.1f} s"  # quadratic, minutes; linear, milliseconds


def test_secret_key_parts_cover_the_documented_keys() -> None:
    for key in (
        "token",
        "access_token",
        "auth_token",
        "private_token",
        "X-Amz-Security-Token",
        "api_key",
        "apikey",
        "key",
        "password",
        "passwd",
        "pwd",
        "secret",
        "client_secret",
        "sig",
        "signature",
        "credential",
    ):
        assert any(part in key.lower().replace("-", "_") for part in SECRET_KEY_PARTS), key
    assert redact_text("https://h/c?page=2&arch=x") == "https://h/c?page=2&arch=x"
    assert MASK == "***"


# `envsolver make --channel` end to end. The servers serve the bundled snapshot's conda-forge directory, so
# a real lock is solved over HTTP; they insist on the credential, so a lock that succeeds proves it was sent.
USER, PASSWORD, TOKEN = "alice", "pw-S3CRET-1", "tk-S3CRET-2"


def _snapshot_file(handler: http.server.BaseHTTPRequestHandler, path: str) -> bool:
    local = SNAPSHOT / path.lstrip("/")
    if ".." in path or not local.is_file():
        return False
    return send(handler, local.read_bytes())


@pytest.fixture
def token_channel() -> Iterator[Server]:
    """Serves the snapshot under /t/TOKEN/ only."""

    def route(handler: http.server.BaseHTTPRequestHandler) -> bool:
        prefix = f"/t/{TOKEN}/"
        if not handler.path.startswith(prefix):
            return send(handler, b"token required", 403)
        return _snapshot_file(handler, handler.path[len(prefix) :])

    with serve(route) as server:
        yield server


@pytest.fixture
def basic_channel() -> Iterator[Server]:
    """Serves the snapshot to Basic auth USER:PASSWORD only."""
    expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()

    def route(handler: http.server.BaseHTTPRequestHandler) -> bool:
        if handler.headers.get("Authorization") != expected:
            return send(handler, b"", 401)
        return _snapshot_file(handler, handler.path)

    with serve(route) as server:
        yield server


def _make(tmp_path: Path, channel: str, *extra: str) -> tuple[int, str, str, str]:
    """(exit code, stdout, stderr, every written file's text) of `envsolver make --gpu a100 --channel URL` (with
    conda-forge's DeepSpeed: the channel serves the bundled snapshot's conda-forge, whose newest torch is 2.10)."""
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main,
        ["make", "--gpu", "a100", "--deepspeed-from", "conda-forge", "--out", str(out), "--channel", channel, *extra],
        env={"ENVSOLVER_CACHE_DIR": str(tmp_path / "cache"), "ENVSOLVER_GPUS": None, "ENVSOLVER_DRIVER": None},
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    written = "".join(p.read_text() for p in sorted(out.glob("*"))) if out.exists() else ""
    return result.exit_code, result.stdout, result.stderr, written


def _assert_clean(*texts: str) -> None:
    for text in texts:
        for secret in (PASSWORD, TOKEN, "S3CRET"):
            assert secret not in text, text


@pytest.mark.parametrize("how", ["path token", "user info"])
@pytest.mark.parametrize("as_json", [False, True])
def test_make_over_an_authenticated_channel_writes_no_credential(
    token_channel: Server, basic_channel: Server, tmp_path: Path, how: str, as_json: bool
) -> None:
    if how == "path token":
        channel, public = f"{token_channel.url}/t/{TOKEN}/conda-forge", f"{token_channel.url}/conda-forge"
    else:
        channel = basic_channel.url.replace("http://", f"http://{USER}:{PASSWORD}@") + "/conda-forge"
        public = f"{basic_channel.url}/conda-forge"
    code, stdout, stderr, written = _make(tmp_path, channel, *(["--json"] if as_json else []))
    assert code == 0, stderr
    _assert_clean(stdout, stderr, written)
    assert f"{public}/linux-64/" in written and f"--channel {public}" in written
    assert public in stdout
    cached = [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and b"S3CRET" in p.read_bytes()]
    assert cached == []  # rattler's repodata cache records the URLs it fetched: never a credentialed one


@pytest.mark.parametrize(
    "channel",
    [
        f"http://127.0.0.1:9/conda-forge?token={TOKEN}",
        f"http://127.0.0.1:9/conda-forge?access_token={TOKEN}&x=1",
        f"http://{USER}:{PASSWORD}@127.0.0.1:9/t/{TOKEN}/conda-forge",
        f"http://{USER}:{PASSWORD}@[::1/t/{TOKEN}/conda-forge",
        "http://[::1",
        f"http://{USER}:a/{PASSWORD}@127.0.0.1:9/conda-forge",
        f"ftp://{USER}:{PASSWORD}@127.0.0.1/conda-forge",
        f"conda.anaconda.org/t/{TOKEN}/conda-forge",
    ],
)
def test_make_errors_carry_no_credential(tmp_path: Path, channel: str) -> None:
    code, stdout, stderr, written = _make(tmp_path, channel)
    assert code in (1, 2) and stderr.startswith("error: ")
    assert written == ""
    _assert_clean(stdout, stderr)


def test_make_without_credentials_says_how_to_pass_them(basic_channel: Server, tmp_path: Path) -> None:
    code, _, stderr, written = _make(tmp_path, f"{basic_channel.url}/conda-forge")
    assert code == 2 and "401" in stderr and "https://USER:TOKEN@HOST/" in stderr and written == "", stderr


def test_make_with_a_query_token_writes_and_prints_no_token(tmp_path: Path) -> None:
    """The issue's case: against a channel that answers without the token, the token used to land in all three
    files and on stdout. rattler never sends a channel URL's query, so make now refuses it, naming it masked."""
    with serve(lambda handler: _snapshot_file(handler, handler.path)) as server:
        code, stdout, stderr, written = _make(tmp_path, f"{server.url}/conda-forge?token={TOKEN}")
    assert code == 2 and "?token=***" in stderr and written == "", stderr
    _assert_clean(stdout, stderr)


def test_a_query_token_is_refused_because_it_would_never_be_sent(token_channel: Server, tmp_path: Path) -> None:
    """rattler appends `<subdir>/repodata.json` to the channel's path and drops its query, so a ?token= would
    silently never reach the server: refused with the forms that work."""
    with pytest.raises(BadInputError) as info:
        lock._custom([f"{token_channel.url}/conda-forge?token={TOKEN}"])
    message = str(info.value)
    assert "?token=***" in message and "/t/TOKEN/" in message and "USER:TOKEN@" in message
    _assert_clean(message)


def test_custom_channel_public_form(tmp_path: Path) -> None:
    sources = lock._custom([f"https://{USER}:{PASSWORD}@mirror.example.org/t/{TOKEN}/conda-forge/", "file:///srv/t/c"])
    assert [(s.public, s.location) for s in sources] == [
        (
            "https://mirror.example.org/conda-forge",
            f"https://{USER}:{PASSWORD}@mirror.example.org/t/{TOKEN}/conda-forge",
        ),
        ("file:///srv/t/c", "file:///srv/t/c"),
    ]


def test_solver_errors_are_redacted(tmp_path: Path) -> None:
    """A channel that answers 401: the solver's error text (it names the URL) reaches the user redacted."""
    from envsolver.lock.solve import ChannelSource, ChannelsUnreachable, solve

    with serve(lambda handler: send(handler, b"", 401)) as server:
        location = server.url.replace("http://", f"http://{USER}:{PASSWORD}@") + f"/t/{TOKEN}/conda-forge"
        with pytest.raises(ChannelsUnreachable) as info:
            solve(["zlib"], [ChannelSource("public", location)], "linux-64", {}, tmp_path / "cache")
    assert re.search(r"401", str(info.value))
    _assert_clean(str(info.value))


def test_a_channel_rattler_cannot_parse_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    from envsolver.lock.solve import ChannelSource, ChannelsUnreachable, solve

    with pytest.raises(ChannelsUnreachable, match="not valid") as info:
        solve(
            ["zlib"], [ChannelSource("public", f"http://{USER}:{PASSWORD}@[::1/t/{TOKEN}/c")], "linux-64", {}, tmp_path
        )
    _assert_clean(str(info.value))
