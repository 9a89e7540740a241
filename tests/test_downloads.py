"""install's downloads against a local server that fails on purpose (tests/httplab.py): retries of transient
failures only, Retry-After, resume with Range or a clean restart, parallel fetches, Ctrl-C, proxies, the
certificate settings (conda's ssl_verify, REQUESTS_CA_BUNDLE, SSL_CERT_FILE) and the byte progress line.
The packages served are real archives built by tests/conda_packages.py, their hashes taken from the solve."""

from __future__ import annotations

import _thread
import hashlib
import ssl
import threading
import time
from pathlib import Path

import pytest

from envsolver.core.errors import BadInputError
from envsolver.install import run as installer
from envsolver.install.pkgcache import FetchError
from envsolver.net import netconf
from envsolver.net.http import DownloadError, download
from tests.httplab import Faults, channel_with_big, proxy, serve, write_lock

SECRET = "pw-S3CRET-9"
ARCHIVE = "linux-64/tiny-data-2.1-h0_0.tar.bz2"


@pytest.fixture
def channel(tmp_path: Path) -> Path:
    return channel_with_big(tmp_path)


def _leftovers(cache: Path) -> list[str]:
    """Partial files in the cache, and staging directories left behind."""
    found = [str(p) for p in cache.rglob("*.part")] if cache.exists() else []
    staging = cache / "staging"
    return found + ([str(p) for p in staging.iterdir()] if staging.exists() else [])


# -- retries -------------------------------------------------------------------------------------------------


def test_a_transient_503_is_tried_again(channel: Path, tmp_path: Path) -> None:
    with serve(channel, Faults(fail=2)) as lab:
        download(f"{lab.url}/{ARCHIVE}", tmp_path / "x", environ={})
    assert (tmp_path / "x").read_bytes() == (channel / ARCHIVE).read_bytes()
    assert lab.seen[f"/{ARCHIVE}"] == 3


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_transient_statuses_are_retried(channel: Path, tmp_path: Path, status: int) -> None:
    with serve(channel, Faults(fail=1, status=status, retry_after="0")) as lab:
        download(f"{lab.url}/{ARCHIVE}", tmp_path / "x", environ={})
    assert lab.seen[f"/{ARCHIVE}"] == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410])
def test_other_client_errors_are_not_retried(channel: Path, tmp_path: Path, status: int) -> None:
    with serve(channel, Faults(fail=9, status=status)) as lab, pytest.raises(DownloadError, match=f"HTTP {status}"):
        download(f"{lab.url}/{ARCHIVE}", tmp_path / "x", environ={})
    assert lab.seen[f"/{ARCHIVE}"] == 1
    assert not (tmp_path / "x").exists()


def test_a_413_with_retry_after_is_not_retried(channel: Path, tmp_path: Path) -> None:
    """urllib3 alone would try a 413 again when it carries a Retry-After; only 408, 429 and 5xx are tried."""
    with serve(channel, Faults(fail=9, status=413, retry_after="0")) as lab, pytest.raises(DownloadError) as info:
        download(f"{lab.url}/{ARCHIVE}", tmp_path / "x", environ={})
    assert "HTTP 413" in str(info.value) and "tried" not in str(info.value), info.value
    assert lab.seen[f"/{ARCHIVE}"] == 1


def test_retry_after_is_honoured(channel: Path, tmp_path: Path) -> None:
    with serve(channel, Faults(fail=1, status=429, retry_after="1")) as lab:
        started = time.monotonic()
        download(f"{lab.url}/{ARCHIVE}", tmp_path / "x", environ={})
    assert time.monotonic() - started >= 1.0
    assert lab.seen[f"/{ARCHIVE}"] == 2


def test_retry_after_is_capped(channel: Path, tmp_path: Path) -> None:
    from envsolver.net.http import Retry

    with serve(channel, Faults(fail=1, status=503, retry_after="3600")) as lab:
        started = time.monotonic()
        download(f"{lab.url}/{ARCHIVE}", tmp_path / "x", environ={}, retry=Retry(cap_s=0.2))
    waited = time.monotonic() - started
    assert waited < 30, f"waited {waited:.1f} s: Retry-After 3600 was not capped at 0.2 s"  # loaded CI: margin
    assert lab.seen[f"/{ARCHIVE}"] == 2


def test_retries_are_bounded_and_the_message_ends_with_the_fix(channel: Path, tmp_path: Path) -> None:
    from envsolver.net.http import Retry

    url = f"http://alice:{SECRET}@127.0.0.1"
    with serve(channel, Faults(fail=99)) as lab, pytest.raises(DownloadError) as info:
        download(url + lab.url.removeprefix("http://127.0.0.1") + f"/{ARCHIVE}", tmp_path / "x", environ={},
                 retry=Retry(attempts=3, base_s=0.01))  # fmt: skip
    assert lab.seen[f"/{ARCHIVE}"] == 3
    assert "tried 3 times" in str(info.value) and str(info.value).endswith("--mirror FROM=TO.")
    assert SECRET not in str(info.value)
    assert not (tmp_path / "x").exists()


# -- resume or restart ---------------------------------------------------------------------------------------


def test_a_dropped_connection_resumes_with_a_range_request(channel: Path, tmp_path: Path) -> None:
    body = (channel / ARCHIVE).read_bytes()
    with serve(channel, Faults(drop=1)) as lab:
        download(f"{lab.url}/{ARCHIVE}", tmp_path / "x", environ={})
    assert (tmp_path / "x").read_bytes() == body
    assert lab.requests == [(f"/{ARCHIVE}", None), (f"/{ARCHIVE}", f"bytes={len(body) // 2}-")]


def test_a_server_without_ranges_restarts_from_zero(channel: Path, tmp_path: Path) -> None:
    with serve(channel, Faults(drop=2, ranges=False)) as lab:
        download(f"{lab.url}/{ARCHIVE}", tmp_path / "x", environ={})
    assert (tmp_path / "x").read_bytes() == (channel / ARCHIVE).read_bytes()
    assert lab.seen[f"/{ARCHIVE}"] == 3


def test_cancel_stops_a_download_and_removes_its_file(channel: Path, tmp_path: Path) -> None:
    from envsolver.net.http import Cancelled, Watch

    big = channel_with_big(tmp_path / "big", big_bytes=400_000)
    (archive,) = (big / "linux-64").glob("tiny-big-*")
    watch = Watch()
    threading.Timer(0.5, watch.cancel.set).start()
    with serve(big, Faults(bytes_per_s=100_000)) as lab, pytest.raises(Cancelled):
        download(f"{lab.url}/linux-64/{archive.name}", tmp_path / "x", environ={}, watch=watch)
    assert not (tmp_path / "x").exists()


def test_cancel_stops_the_wait_between_tries(channel: Path, tmp_path: Path) -> None:
    """A cancel during urllib3's wait before another try (a 503 asking for 60 s) ends it at once."""
    from envsolver.net.http import Cancelled, Retry, Watch

    watch = Watch()
    threading.Timer(0.5, watch.cancel.set).start()
    started = time.monotonic()
    with serve(channel, Faults(fail=99, retry_after="60")) as lab, pytest.raises(Cancelled):
        download(f"{lab.url}/{ARCHIVE}", tmp_path / "x", environ={}, watch=watch, retry=Retry(cap_s=60))
    waited = time.monotonic() - started
    assert waited < 20, f"the cancel came after 0.5 s, the download stopped after {waited:.1f} s"
    assert lab.seen[f"/{ARCHIVE}"] == 1 and not (tmp_path / "x").exists()


# -- install: parallel, verified, nothing left behind ---------------------------------------------------------


def _install(lock: Path, prefix: Path, cache: Path, url: str, channel: Path, **environ: str) -> installer.InstallReport:
    return installer.install(lock, prefix, None, {channel.as_uri(): url}, cache, lambda _: None, environ)


def test_install_fetches_in_parallel(channel: Path, tmp_path: Path) -> None:
    lock = write_lock(channel, tmp_path)
    with serve(channel, Faults(delay_s=0.4)) as lab:
        report = _install(lock, tmp_path / "env", tmp_path / "cache", lab.url, channel)
    assert report.fetched == 3 and lab.most_active >= 2
    assert (tmp_path / "env" / "bin" / "tiny-app").exists()


def test_download_jobs_1_fetches_one_at_a_time(channel: Path, tmp_path: Path) -> None:
    lock = write_lock(channel, tmp_path)
    with serve(channel, Faults(delay_s=0.2)) as lab:
        _install(lock, tmp_path / "env", tmp_path / "cache", lab.url, channel, ENVSOLVER_DOWNLOAD_JOBS="1")
    assert lab.most_active == 1 and len(lab.requests) == 3


@pytest.mark.parametrize("value", ["0", "65", "four", "-1", "2.5"])
def test_bad_download_jobs_is_refused_with_the_fix(value: str) -> None:
    with pytest.raises(BadInputError, match="ENVSOLVER_DOWNLOAD_JOBS=4"):
        installer.download_jobs({"ENVSOLVER_DOWNLOAD_JOBS": value})


def test_install_survives_failures_and_drops(channel: Path, tmp_path: Path) -> None:
    lock = write_lock(channel, tmp_path)
    with serve(channel, Faults(fail=1, drop=1, retry_after="0")) as lab:
        report = _install(lock, tmp_path / "env", tmp_path / "cache", lab.url, channel)
    assert report.fetched == 3 and all(n == 3 for n in lab.seen.values())
    assert _leftovers(tmp_path / "cache") == []
    assert sorted(p.name.split("-", 1)[1] for p in (tmp_path / "cache" / "verified").iterdir()) == sorted(
        p.name for p in (channel / "linux-64").glob("*.tar.bz2")
    )


def test_a_failed_install_leaves_no_partial_file_and_no_prefix(channel: Path, tmp_path: Path) -> None:
    lock = write_lock(channel, tmp_path)
    with serve(channel, Faults(fail=99, status=404)) as lab, pytest.raises(FetchError, match="HTTP 404"):
        _install(lock, tmp_path / "env", tmp_path / "cache", lab.url, channel)
    assert not (tmp_path / "env").exists()
    assert _leftovers(tmp_path / "cache") == []
    assert not list((tmp_path / "cache").rglob("*.bz2"))


def test_ctrl_c_mid_download_leaves_nothing_half_done(tmp_path: Path) -> None:
    big = channel_with_big(tmp_path, big_bytes=600_000)
    lock = write_lock(big, tmp_path, ("tiny-app", "tiny-big"))
    threading.Timer(1.0, _thread.interrupt_main).start()
    with serve(big, Faults(bytes_per_s=100_000)) as lab, pytest.raises(KeyboardInterrupt):
        _install(lock, tmp_path / "env", tmp_path / "cache", lab.url, big)
    assert not (tmp_path / "env").exists()
    assert _leftovers(tmp_path / "cache") == []
    for kept in (tmp_path / "cache" / "verified").glob("*"):  # only whole, proven archives are kept
        assert hashlib.sha256(kept.read_bytes()).hexdigest() == kept.name.split("-", 1)[0]
    with serve(big) as lab:  # a rerun completes
        report = _install(lock, tmp_path / "env", tmp_path / "cache", lab.url, big)
    assert report.fetched == 4 and (tmp_path / "env" / "share" / "big.txt").exists()


def test_progress_reports_bytes_and_files(tmp_path: Path) -> None:
    big = channel_with_big(tmp_path, big_bytes=300_000)
    lock = write_lock(big, tmp_path, ("tiny-app", "tiny-big"))
    lines: list[str] = []
    with serve(big, Faults(bytes_per_s=400_000)) as lab:
        installer.install(lock, tmp_path / "env", None, {big.as_uri(): lab.url}, tmp_path / "cache", lines.append, {})
    shown = [line for line in lines if line.startswith("downloading ")]
    assert shown[-1].startswith("downloading 4/4 · ")
    assert any("KiB/s" in line or "MiB/s" in line for line in shown)
    assert any(" / " in line for line in shown)


def test_install_verbose_prints_each_archive_fetched_not_each_byte_count(tmp_path: Path) -> None:
    """install -v: a step line as each archive's download ends (the downloads' own threads tell it), not the
    byte counts in between, which only the status line shows."""
    from click.testing import CliRunner

    from envsolver.cli.main import main

    big = channel_with_big(tmp_path, big_bytes=100_000)
    lock = write_lock(big, tmp_path, ("tiny-app", "tiny-big"))
    with serve(big) as lab:  # the meter's first byte count comes before any archive is done, however fast
        argv = ["install", str(lock), "-p", str(tmp_path / "env"), "--no-hook", "-v"]
        result = CliRunner().invoke(
            main, [*argv, "--mirror", f"{big.as_uri()}={lab.url}"], env={"ENVSOLVER_CACHE_DIR": str(tmp_path / "c")}
        )
    assert result.exit_code == 0, result.output
    fetched = [line.split("] ", 1)[1] for line in result.stderr.splitlines() if "] downloading " in line]
    assert [line.split(" · ")[0] for line in fetched] == [f"downloading {n}/4" for n in range(1, 5)], result.stderr
    assert "] linking 4 packages into " in result.stderr, result.stderr


# -- proxies --------------------------------------------------------------------------------------------------


def test_http_proxy_is_used_and_its_credentials_reach_only_the_proxy(channel: Path, tmp_path: Path) -> None:
    with serve(channel) as lab, proxy() as relay:
        with_user = relay.url.replace("http://", f"http://alice:{SECRET}@")
        download(f"{lab.url}/{ARCHIVE}", tmp_path / "x", environ={"HTTP_PROXY": with_user})
    assert (tmp_path / "x").read_bytes() == (channel / ARCHIVE).read_bytes()
    assert [(m, t) for m, t, _ in relay.seen] == [("GET", f"{lab.url}/{ARCHIVE}")]
    assert relay.seen[0][2] is not None and relay.seen[0][2].startswith("Basic ")


def test_no_proxy_bypasses_the_proxy(channel: Path, tmp_path: Path) -> None:
    with serve(channel) as lab, proxy() as relay:
        download(f"{lab.url}/{ARCHIVE}", tmp_path / "x", environ={"http_proxy": relay.url, "NO_PROXY": "127.0.0.1"})
    assert relay.seen == [] and lab.seen[f"/{ARCHIVE}"] == 1


def test_https_goes_through_the_proxy_with_connect_and_no_secret_is_shown(tmp_path: Path) -> None:
    from envsolver.net.http import Retry

    with proxy() as relay, pytest.raises(DownloadError) as info:
        with_user = relay.url.replace("http://", f"http://alice:{SECRET}@")
        download("https://pkgs.example.invalid/c/x.conda", tmp_path / "x", environ={"HTTPS_PROXY": with_user},
                 retry=Retry(attempts=1))  # fmt: skip
    assert relay.seen[0][:2] == ("CONNECT", "pkgs.example.invalid:443")
    assert SECRET not in str(info.value)


# -- certificates ---------------------------------------------------------------------------------------------


def _condarc(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_ssl_verify_false_turns_verification_off_loudly(tmp_path: Path) -> None:
    _condarc(tmp_path / ".condarc", "channels: [conda-forge]\nssl_verify: false\n")
    settings = netconf.tls({"HOME": str(tmp_path), "REQUESTS_CA_BUNDLE": "/etc/x.pem"})
    assert not settings.verify and "NOT verified" in settings.warnings[0]
    assert settings.context().verify_mode == ssl.CERT_NONE


def test_condarc_env_wins_over_home_and_a_path_is_a_bundle(tmp_path: Path) -> None:
    _condarc(tmp_path / ".condarc", "ssl_verify: false\n")
    other = _condarc(tmp_path / "site.condarc", "ssl_verify: /etc/site-ca.pem\n")
    settings = netconf.tls({"HOME": str(tmp_path), "CONDARC": str(other), "REQUESTS_CA_BUNDLE": "/etc/x.pem"})
    assert (settings.verify, settings.cafile, settings.warnings) == (True, "/etc/site-ca.pem", ())


@pytest.mark.parametrize(
    ("environ", "cafile", "capath"),
    [
        ({"REQUESTS_CA_BUNDLE": "/a.pem", "SSL_CERT_FILE": "/b.pem"}, "/a.pem", None),
        ({"CURL_CA_BUNDLE": "/c.pem"}, "/c.pem", None),
        ({"SSL_CERT_FILE": "/b.pem", "SSL_CERT_DIR": "/certs"}, "/b.pem", "/certs"),
        ({}, None, None),
    ],
)
def test_ca_bundle_from_the_environment(
    tmp_path: Path, environ: dict[str, str], cafile: str | None, capath: str | None
) -> None:
    _condarc(tmp_path / ".condarc", "ssl_verify: true\n")
    settings = netconf.tls({"HOME": str(tmp_path), **environ})
    assert (settings.verify, settings.cafile, settings.capath) == (True, cafile, capath)


@pytest.mark.parametrize("text", ["ssl_verify: [1, 2]\n", "ssl_verify: ''\n", "ssl_verify: {a: 1}\n", "a: [\n"])
def test_a_bad_condarc_is_refused_with_the_fix(tmp_path: Path, text: str) -> None:
    _condarc(tmp_path / ".condarc", text)
    with pytest.raises(BadInputError, match=r"\.condarc"):
        netconf.tls({"HOME": str(tmp_path)})


def test_an_unreadable_ca_bundle_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="REQUESTS_CA_BUNDLE"):
        netconf.tls({"REQUESTS_CA_BUNDLE": str(tmp_path / "missing.pem")}).context()


def test_install_reports_the_ssl_verify_warning(tmp_path: Path) -> None:
    """The warning reaches the report for an https download, whatever happens to the download."""
    _condarc(tmp_path / ".condarc", "ssl_verify: false\n")
    assert installer.tls_warnings({"HOME": str(tmp_path)})[0].startswith("ssl_verify is false in ")


def test_the_sha256_is_still_proven_with_verification_off(channel: Path, tmp_path: Path) -> None:
    lock = write_lock(channel, tmp_path)
    text = lock.read_text()
    digest = hashlib.sha256((channel / ARCHIVE).read_bytes()).hexdigest()
    lock.write_text(text.replace(digest, "f" * 64))
    _condarc(tmp_path / ".condarc", "ssl_verify: false\n")
    with serve(channel) as lab, pytest.raises(Exception, match="does not match the lock"):
        _install(lock, tmp_path / "env", tmp_path / "cache", lab.url, channel, HOME=str(tmp_path))
    assert not (tmp_path / "env").exists()


def test_cli_install_warns_about_ssl_verify_false_before_fetching(channel: Path, tmp_path: Path) -> None:
    """The warning is printed before the downloads, so a user sees it even when they fail."""
    from click.testing import CliRunner

    from envsolver.cli.main import main

    lock = write_lock(channel, tmp_path)
    _condarc(tmp_path / ".condarc", "ssl_verify: false\n")
    result = CliRunner().invoke(
        main,
        [
            "install",
            str(lock),
            "-p",
            str(tmp_path / "env"),
            "--no-hook",
            "--mirror",
            f"{channel.as_uri()}=https://127.0.0.1:9",
        ],
        env={"HOME": str(tmp_path), "ENVSOLVER_CACHE_DIR": str(tmp_path / "cache"), "ENVSOLVER_DOWNLOAD_JOBS": "3"},
    )
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "warning: ssl_verify is false in" in text and "NOT verified" in text
    assert text.index("warning: ssl_verify") < text.index("error")


def test_nothing_but_the_result_on_a_pipe(tmp_path: Path) -> None:
    """stderr is not a terminal: no progress line, no spinner; stdout says what was done."""
    import subprocess
    import sys

    big = channel_with_big(tmp_path, big_bytes=200_000)
    lock = write_lock(big, tmp_path, ("tiny-app", "tiny-big"))
    envsolver = Path(sys.executable).parent / "envsolver"
    with serve(big, Faults(bytes_per_s=400_000)) as lab:
        argv = [str(envsolver), "install", str(lock), "-p", str(tmp_path / "env"), "--no-hook"]
        argv += ["--mirror", f"{big.as_uri()}={lab.url}"]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ENVSOLVER_CACHE_DIR": str(tmp_path / "c")}
        done = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.startswith(f"{tmp_path / 'env'}: installed (4 packages for linux-64, 4 fetched and verified)")
