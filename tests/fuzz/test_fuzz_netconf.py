"""Property-based fuzzing of what install's downloads parse from users and servers: a .condarc (conda's
ssl_verify), proxy variables, ENVSOLVER_DOWNLOAD_JOBS, ENVSOLVER_MAX_DOWNLOAD, ENVSOLVER_RATTLER_TIMEOUT,
Retry-After and Content-Range headers, and the progress line. Each returns or raises its documented error,
nothing else, within the time bound."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import strategies as st

from envsolver.core.errors import BadInputError
from envsolver.install import run as install
from envsolver.lock import worker_call
from envsolver.net import bodylimit, http, netconf, progress
from tests.fuzz import strategies as fs
from tests.fuzz.harness import Tally, check_function, modes, run_property

CONDARC = st.one_of(
    fs.file_junk,
    st.builds(lambda v: f"ssl_verify: {v}\n", st.one_of(fs.file_junk, st.sampled_from(["true", "False", "[1]", "~"]))),
)
HEADER = st.one_of(
    fs.file_junk, fs.huge_number, fs.odd_numbers, st.sampled_from(["bytes 5-9/10", "Wed, 21 Oct 2015 07:28:00 GMT"])
)


@modes(60)
def test_condarc_gives_settings_or_a_bad_input_error(seed_value: int | None, count: int) -> None:
    tally = Tally("netconf.tls")

    def check(text: str) -> None:
        with tempfile.TemporaryDirectory() as home:
            Path(home, ".condarc").write_text(text, encoding="utf-8", errors="surrogateescape")
            check_function(tally, text, lambda: netconf.tls({"HOME": home}), (BadInputError,))

    run_property(CONDARC, check, count, seed_value)
    tally.check()


@modes(100)
def test_header_and_variable_parsers_never_raise(seed_value: int | None, count: int) -> None:
    tally = Tally("download parsers")

    def check(text: str) -> None:
        check_function(tally, ("retry_after", text), lambda: http.retry_after(text), ())
        check_function(tally, ("range_start", text), lambda: http.range_start(text), ())
        check_function(tally, ("proxies", text), lambda: netconf.proxies({"HTTPS_PROXY": text, "no_proxy": text}), ())
        found = {"https": "http://proxy.example.org:3128", "no": text}
        check_function(tally, ("proxy_for", text), lambda: netconf.proxy_for("https://h.example.org:8443/x", found), ())
        check_function(tally, ("jobs", text), lambda: install.download_jobs({install.JOBS_ENV: text}), (BadInputError,))
        check_function(tally, ("ceiling", text), lambda: bodylimit.ceiling({bodylimit.ENV: text}), (BadInputError,))
        check_function(
            tally,
            ("worker", text),
            lambda: worker_call.time_limit(60.0, {worker_call.TIMEOUT_ENV: text}),
            (BadInputError,),
        )

    run_property(HEADER, check, count, seed_value)
    tally.check()


@modes(100)
def test_progress_line_for_any_counts(seed_value: int | None, count: int) -> None:
    tally = Tally("progress.line")
    counts = st.tuples(*(st.integers(0, 1 << 62) for _ in range(5)), st.one_of(st.none(), st.floats(0, 1e15)))

    def check(values: tuple[int, int, int, int, int, float | None]) -> None:
        check_function(tally, values, lambda: progress.line(*values), ())

    run_property(counts, check, count, seed_value)
    tally.check()
