"""Every download body is bounded (envsolver.net.bodylimit): a server that streams without end, or announces more
than the limit, ends in exit 2 with the partial file removed and the disk use bounded, and is not asked again.
The limit is the archive's size where the snapshot's repodata records it, else ENVSOLVER_MAX_DOWNLOAD.
Servers: tests/httplab.py on 127.0.0.1; `sent` counts the body bytes it wrote, which bounds what reached disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envsolver.core.errors import BadInputError
from envsolver.lock.snapshot import data_dir
from envsolver.net.http import DownloadError, download
from tests.httplab import Faults, channel_with_big, serve, write_lock

SLACK = 32 << 20  # socket buffers between the server and the client, on both sides (loopback autotuning)
ENVSOLVER = Path(sys.executable).parent / "envsolver"


def _leftovers(root: Path) -> list[str]:
    """Partial files and staging directories under the cache."""
    found = [str(p) for p in root.rglob("*.part")] if root.exists() else []
    staging = root / "staging"
    return found + ([str(p) for p in staging.iterdir()] if staging.exists() else [])


@pytest.mark.parametrize("endless", ["close", "chunked"])
def test_an_endless_body_stops_at_the_ceiling(tmp_path: Path, endless: str) -> None:
    with serve(tmp_path, Faults(endless=endless)) as lab, pytest.raises(DownloadError) as info:
        download(f"{lab.url}/linux-64/x-1-0.conda", tmp_path / "x", environ={"ENVSOLVER_MAX_DOWNLOAD": "1M"})
    text = str(info.value)
    assert "sent more than 1048576 bytes, past 1.0 MiB, the download limit (ENVSOLVER_MAX_DOWNLOAD)" in text, text
    assert "export ENVSOLVER_MAX_DOWNLOAD=16G" in text, text
    assert not (tmp_path / "x").exists(), text
    assert lab.sent < (1 << 20) + SLACK, f"the server sent {lab.sent} bytes: {text}"
    assert lab.seen["/linux-64/x-1-0.conda"] == 1, text  # never tried again


@pytest.mark.parametrize("endless", ["close", "chunked"])
def test_a_failing_answers_endless_body_is_never_read(tmp_path: Path, endless: str) -> None:
    """A 503 whose body never ends: each try gives up on the answer at its status, reading none of the body
    (urllib3's own retry of a status reads the whole body first, without a bound, so it retries none)."""
    from envsolver.net.http import Retry

    with serve(tmp_path, Faults(endless=endless, endless_status=503)) as lab, pytest.raises(DownloadError) as info:
        download(f"{lab.url}/x-1-0.conda", tmp_path / "x", environ={}, retry=Retry(attempts=2, cap_s=0))
    text = str(info.value)
    assert "HTTP 503" in text and "(tried 2 times)" in text, text
    assert lab.seen["/x-1-0.conda"] == 2, text
    assert lab.sent < 2 * (16 << 20), f"the server sent {lab.sent} bytes of two failing answers: {text}"


def test_a_known_size_is_the_limit(tmp_path: Path) -> None:
    with serve(tmp_path, Faults(endless="close")) as lab, pytest.raises(DownloadError) as info:
        download(f"{lab.url}/x.conda", tmp_path / "x", environ={}, size=396)
    text = str(info.value)
    assert "sent more than 396 bytes, past 396 bytes, the size its record gives" in text, text
    assert "--mirror FROM=TO" in text, text
    assert not (tmp_path / "x").exists() and lab.sent < 396 + SLACK, f"{lab.sent} bytes sent: {text}"


def test_an_announced_length_past_the_limit_is_refused_before_reading(tmp_path: Path) -> None:
    """A Content-Length of a petabyte (a lie: the body has no end either) is refused from the header alone."""
    with serve(tmp_path, Faults(endless="close", length=1 << 50)) as lab, pytest.raises(DownloadError) as info:
        download(f"{lab.url}/x.conda", tmp_path / "x", environ={"ENVSOLVER_MAX_DOWNLOAD": "64M"})
    text = str(info.value)
    assert f"the server announces {1 << 50} bytes, past 64.0 MiB" in text, text
    assert not (tmp_path / "x").exists() and lab.sent < SLACK, f"{lab.sent} bytes sent: {text}"
    assert lab.seen["/x.conda"] == 1, text


def test_a_short_content_length_reads_no_further(tmp_path: Path) -> None:
    """A Content-Length smaller than what follows: exactly that many bytes are read, and the caller's hash
    decides (install refuses them)."""
    with serve(tmp_path, Faults(endless="close", length=1000)) as lab:
        download(f"{lab.url}/x.conda", tmp_path / "x", environ={})
    assert (tmp_path / "x").read_bytes() == b"x" * 1000


def test_a_local_file_is_bounded_and_must_be_regular(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"y" * 5000)
    with pytest.raises(DownloadError, match="holds more than 4096 bytes, past 4096 bytes, the size its record"):
        download((tmp_path / "big").as_uri(), tmp_path / "x", environ={}, size=4096)
    assert not (tmp_path / "x").exists()
    started = time.monotonic()
    for special in ("/dev/zero", str(_fifo(tmp_path))):
        with pytest.raises(DownloadError, match="not a regular file"):
            download(Path(special).as_uri(), tmp_path / "x", environ={})
    assert time.monotonic() - started < 5
    download((tmp_path / "big").as_uri(), tmp_path / "x", environ={}, size=5000)
    assert (tmp_path / "x").stat().st_size == 5000


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(("value", "expected"), [("", 4 << 30), ("1K", 1024), ("8g", 8 << 30), ("12MiB", 12 << 20),
                                                 ("5000", 5000), (" 2T ", 2 << 40)])  # fmt: skip
def test_the_ceiling_from_the_environment(value: str, expected: int) -> None:
    from envsolver.net import bodylimit

    assert bodylimit.ceiling({"ENVSOLVER_MAX_DOWNLOAD": value}) == expected


@pytest.mark.parametrize("value", ["0", "1000", "-1G", "4.5G", "lots", "1P", "1" * 17])
def test_a_bad_ceiling_is_refused_with_the_fix(value: str) -> None:
    from envsolver.net import bodylimit

    with pytest.raises(BadInputError, match="export ENVSOLVER_MAX_DOWNLOAD=16G"):
        bodylimit.ceiling({"ENVSOLVER_MAX_DOWNLOAD": value})


def _install(lock: Path, tmp_path: Path, mirror: str, **env: str) -> subprocess.CompletedProcess[str]:
    argv = [str(ENVSOLVER), "install", str(lock), "-p", str(tmp_path / "env"), "--no-hook", "--mirror", mirror]
    environ = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ENVSOLVER_CACHE_DIR": str(tmp_path / "cache"), **env}
    return subprocess.run(argv, capture_output=True, text=True, env=environ, timeout=120)


@pytest.mark.parametrize("endless", ["close", "chunked"])
def test_install_from_an_endless_mirror_exits_2_and_leaves_nothing(tmp_path: Path, endless: str) -> None:
    channel = channel_with_big(tmp_path)
    lock = write_lock(channel, tmp_path)
    started = time.monotonic()
    with serve(channel, Faults(endless=endless)) as lab:
        done = _install(lock, tmp_path, f"{channel.as_uri()}={lab.url}", ENVSOLVER_MAX_DOWNLOAD="1M")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "past 1.0 MiB, the download limit (ENVSOLVER_MAX_DOWNLOAD)" in done.stderr, done.stderr
    assert _leftovers(tmp_path / "cache") == [], done.stderr
    assert not (tmp_path / "env").exists(), done.stderr
    # Three archives fetched at once, each stopped at 1 MiB, each asked for once.
    assert lab.sent < 3 * ((1 << 20) + SLACK), f"the server sent {lab.sent} bytes; {done.stderr}"
    assert all(n == 1 for n in lab.seen.values()), f"{lab.seen}; {done.stderr}"
    assert time.monotonic() - started < 60, done.stderr


def test_install_takes_the_limit_from_the_snapshots_record(tmp_path: Path) -> None:
    """A real record of the bundled snapshot (_libgcc_mutex, 2562 bytes in conda-forge's repodata): a mirror that
    streams without end for it is cut at the record's size, with no ENVSOLVER_MAX_DOWNLOAD set."""
    name = "_libgcc_mutex-0.1-conda_forge.tar.bz2"
    repodata = json.loads((data_dir() / "conda-forge" / "linux-64" / "repodata.json").read_text())
    record = repodata["packages"][name]
    lock = tmp_path / "conda-linux-64.lock"
    lock.write_text(
        "# platform: linux-64\n@EXPLICIT\n"
        f"https://conda.anaconda.org/conda-forge/linux-64/{name}#sha256={record['sha256']}\n"
    )
    with serve(tmp_path, Faults(endless="close")) as lab:
        done = _install(lock, tmp_path, f"https://conda.anaconda.org/conda-forge={lab.url}")
    assert done.returncode == 2, done.stderr
    assert f"sent more than {record['size']} bytes, past {record['size']} bytes, the size its record gives" in (
        " ".join(done.stderr.split())
    ), done.stderr
    assert lab.sent < record["size"] + SLACK, f"the server sent {lab.sent} bytes; {done.stderr}"
    assert _leftovers(tmp_path / "cache") == [], done.stderr


def test_a_bad_ceiling_stops_install_before_any_fetch(tmp_path: Path) -> None:
    channel = channel_with_big(tmp_path)
    lock = write_lock(channel, tmp_path)
    with serve(channel) as lab:
        done = _install(lock, tmp_path, f"{channel.as_uri()}={lab.url}", ENVSOLVER_MAX_DOWNLOAD="lots")
    assert done.returncode == 2, done.stderr
    assert "ENVSOLVER_MAX_DOWNLOAD='lots' is not a download limit" in done.stderr, done.stderr
    assert lab.requests == [], done.stderr


def test_a_file_whose_size_and_sha256_are_known(tmp_path: Path) -> None:
    """The call a caller with a record makes (a PyPI file's size and sha256): the right file arrives; another
    file of the same size is refused as a Mismatch and removed; a longer one is cut at the size."""
    import hashlib

    from envsolver.net.http import Mismatch

    (tmp_path / "srv").mkdir()
    body = b"wheel bytes " * 100
    (tmp_path / "srv" / "w.whl").write_bytes(body)
    (tmp_path / "srv" / "other.whl").write_bytes(body.upper())
    (tmp_path / "srv" / "long.whl").write_bytes(body + b"!")
    digest = hashlib.sha256(body).hexdigest()
    with serve(tmp_path / "srv") as lab:
        download(f"{lab.url}/w.whl", tmp_path / "w", environ={}, size=len(body), sha256=digest.upper())
        assert (tmp_path / "w").read_bytes() == body
        with pytest.raises(Mismatch) as info:
            download(f"{lab.url}/other.whl", tmp_path / "o", environ={}, size=len(body), sha256=digest)
        assert f"expected {digest}; it was removed" in str(info.value) and info.value.kind == "integrity", info.value
        assert not (tmp_path / "o").exists(), info.value
        with pytest.raises(DownloadError, match=f"announces {len(body) + 1} bytes, past {len(body)} bytes"):
            download(f"{lab.url}/long.whl", tmp_path / "l", environ={}, size=len(body), sha256=digest)
        assert not (tmp_path / "l").exists()
