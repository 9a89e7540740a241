"""lockfile.read checks every field of both lock formats against its grammar: a bad field is bad input (exit 2)
naming the lock, the entry and the value, never a traceback further on (bytes.fromhex in solve.py, a rattler
version parse, TARGETS[platform] in the hook)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.core.errors import BadInputError
from envsolver.lock import lockfile

MD5 = "0123456789abcdef" * 2
SHA = "0123456789abcdef" * 4
URL = "https://conda.anaconda.org/conda-forge/linux-64/tiny-lib-1.0-h0_0.tar.bz2"


def _explicit(tmp_path: Path, line: str, platform: str = "linux-64") -> Path:
    path = tmp_path / f"conda-{platform}.lock"
    path.write_text(f"# platform: {platform}\n@EXPLICIT\n{line}\n")
    return path


@pytest.mark.parametrize(
    ("line", "phrase"),
    [
        (f"https://h.example/c/linux-64/tiny-lib-..-h0_0.tar.bz2#{MD5}", "version '..'"),
        (f"https://h.example/c/linux-64/tiny-lib-1.0-h0%2F0.tar.bz2#{MD5}", "build 'h0%2F0'"),
        (f"{URL}#not-hex", "is not `url#md5`"),
        (f"{URL}#{MD5.upper()}", "is not `url#md5`"),
        (f"https:tiny-lib-1.0-h0_0.tar.bz2#{MD5}", "URL"),
        (f"https://h.example/tiny-lib-1.0-h0_0.tar.bz2#{MD5}", "URL"),
        (f"https://h.example/c/win-64/tiny-lib-1.0-h0_0.tar.bz2#{MD5}", "subdir 'win-64'"),
        (f"ftp://h.example/c/linux-64/tiny-lib-1.0-h0_0.tar.bz2#{MD5}", "URL"),
        (f"https://h.example/c/linux-64/tiny-lib-1.0-h0_0.zip#{MD5}", "file name"),
        (f"https://h.example/c d/linux-64/tiny-lib-1.0-h0_0.conda#{MD5}", "is not `url#md5`"),
        (f"https://h.example/c/linux-64/Tiny$Lib-1.0-h0_0.conda#{MD5}", "URL"),
        (URL, "no md5 or sha256"),
    ],
)
def test_explicit_lock_fields(tmp_path: Path, line: str, phrase: str) -> None:
    path = _explicit(tmp_path, line)
    with pytest.raises(BadInputError) as info:
        lockfile.read(path, None)
    message = str(info.value)
    assert phrase in message and str(path) in message and "line 1" in message, message


def test_explicit_lock_platform_is_known(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="win-64"):
        lockfile.read(_explicit(tmp_path, f"{URL}#{MD5}", platform="win-64"), None)


def test_explicit_lock_redacts_credentials(tmp_path: Path) -> None:
    line = f"https://user:secret@h.example/t/tk-9/c/linux-64/tiny-lib-..-h0_0.tar.bz2#{MD5}"
    with pytest.raises(BadInputError) as info:
        lockfile.read(_explicit(tmp_path, line), None)
    assert "secret" not in str(info.value) and "tk-9" not in str(info.value)


def _conda_lock(tmp_path: Path, package: dict[str, object], platforms: str = "[linux-64]", custom: str = "") -> Path:
    fields = "\n".join(f"  {k}: {v}" for k, v in package.items())
    path = tmp_path / "conda-lock.yml"
    path.write_text(
        "version: 1\nmetadata:\n  content_hash: {linux-64: x}\n  channels: []\n"
        f"  platforms: {platforms}\n  sources: [environment.yml]\n{custom}package:\n- {fields.lstrip()}\n"
    )
    return path


GOOD = {
    "name": "tiny-lib",
    "version": "'1.0'",
    "manager": "conda",
    "platform": "linux-64",
    "dependencies": "{}",
    "url": URL,
    "hash": f"{{md5: '{MD5}', sha256: '{SHA}'}}",
    "build": "h0_0",
    "category": "main",
    "optional": "false",
}


def test_conda_lock_good_entry_reads(tmp_path: Path) -> None:
    lock = lockfile.read(_conda_lock(tmp_path, GOOD), None)
    assert [(e.name, e.version, e.build, e.subdir) for e in lock.entries] == [("tiny-lib", "1.0", "h0_0", "linux-64")]


@pytest.mark.parametrize(
    ("field", "value", "phrase"),
    [
        ("version", "'..'", "version '..'"),
        ("build", "h0/0", "build 'h0/0'"),
        ("hash", "{md5: not-hex}", "md5 'not-hex'"),
        ("hash", f"{{md5: '{MD5}', sha256: abc}}", "sha256 'abc'"),
        ("hash", "{}", "hash: Value error, conda package hashes must use MD5"),
        ("url", "tiny-lib-1.0-h0_0.tar.bz2", "URL"),
        ("url", "'http://[::1/linux-64/tiny-lib-1.0-h0_0.tar.bz2'", "URL"),
        ("name", "other", "does not match"),
        ("version", "'2.0'", "does not match"),
        ("name", "'$(id)'", "name '$(id)'"),
        ("platform", "win-64", "win-64"),
        ("dependencies", "{'bad name': '>=1'}", "dependency"),
    ],
)
def test_conda_lock_fields(tmp_path: Path, field: str, value: str, phrase: str) -> None:
    path = _conda_lock(tmp_path, {**GOOD, field: value})
    with pytest.raises(BadInputError) as info:
        lockfile.read(path, None)
    message = str(info.value)
    assert phrase in message and str(path) in message, message
    assert "package 1" in message or "package.0" in message, message


@pytest.mark.parametrize(
    ("platforms", "chosen", "phrase"),
    [
        ("[]", None, "lists no platforms"),
        ("[]", "linux-64", "lists no platforms"),
        ("[win-64]", None, "win-64"),
        ("[linux-64, linux-aarch64]", None, "Pass --platform"),
    ],
)
def test_conda_lock_platforms(tmp_path: Path, platforms: str, chosen: str | None, phrase: str) -> None:
    with pytest.raises(BadInputError, match=phrase):
        lockfile.read(_conda_lock(tmp_path, GOOD, platforms=platforms), chosen)


def test_conda_lock_arch_list_is_checked(tmp_path: Path) -> None:
    custom = "  custom_metadata: {envsolver_torch_cuda_arch_list: '8.0; rm -rf ~'}\n"
    with pytest.raises(BadInputError, match="envsolver_torch_cuda_arch_list"):
        lockfile.read(_conda_lock(tmp_path, GOOD, custom=custom), None)


def test_lock_file_errors(tmp_path: Path) -> None:
    binary = tmp_path / "bin.lock"
    binary.write_bytes(b"\xff\xfe@EXPLICIT\n")
    with pytest.raises(BadInputError, match="not UTF-8"):
        lockfile.read(binary, None)
    with pytest.raises(BadInputError, match="is a character device"):
        lockfile.read(Path("/dev/zero"), None)  # refused at once (core.boundedread), not read up to the limit
    big = tmp_path / "big.lock"
    big.write_bytes(b"#" * (lockfile.MAX_BYTES + 1))
    with pytest.raises(BadInputError, match="larger than"):
        lockfile.read(big, None)


@pytest.mark.parametrize(
    "base", ["http://127.0.0.1:9/t/tk-secret9/c", "http://alice:tk-secret9@127.0.0.1:9/c"], ids=["token", "userinfo"]
)
def test_install_messages_hold_no_credentials(tmp_path: Path, base: str) -> None:
    """A channel that cannot be reached (a closed port): the message names it without its credentials. (A
    file:// URL holds none: its /t/ is a directory.)"""
    path = _explicit(tmp_path, f"{base}/linux-64/tiny-lib-1.0-h0_0.conda#{MD5}")
    result = CliRunner().invoke(
        main,
        ["install", str(path), "-p", str(tmp_path / "env"), "--no-hook"],
        env={"ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert result.exit_code == 2, result.output
    assert "tk-secret9" not in result.output, result.output
