"""Running uv (envsolver.lock.pypi.uvrun), the trust boundary: which binary, its argv (validated names only, never
an index or a credential), its environment (none of the user's UV_*, PIP_*, PYTHONPATH; the certificates envsolver
trusts), and its version check."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from envsolver.core.versions import MajorMinor
from envsolver.lock.pypi import uvrun
from envsolver.lock.pypi.target import Target

TARGET = Target(MajorMinor(3, 12), "linux-64", MajorMinor(2, 28))
SECRET_INDEX = "https://alice:s3cret-token@pypi.example.org/simple"


def _request(**kw: object) -> uvrun.Request:
    base: dict[str, object] = dict(
        requirements=("accelerate", "peft>=0.10"),
        held=(("numpy", "2.3.5"), ("torch", "2.9.1")),
        excluded=("pyyaml",),
        preferences=(("peft", "0.20.0"),),
        upgrade=("accelerate",),
        target=TARGET,
        index=SECRET_INDEX,
        cache=Path("/tmp/cache"),
    )
    base.update(kw)
    return uvrun.Request(**base)  # type: ignore[arg-type]


def test_the_binary_is_the_uv_packages_own_never_paths() -> None:
    found = uvrun.binary()
    assert (found.is_file() and Path(sys.prefix) in found.resolve().parents) or found.parent == Path(
        sys.executable
    ).parent, found


def test_argv_holds_fixed_options_and_names_never_the_index(tmp_path: Path) -> None:
    argv = uvrun.argv(_request(), Path("/x/uv"), tmp_path)
    assert "s3cret" not in " ".join(argv) and "pypi.example.org" not in " ".join(argv), argv
    for flag in ("--no-config", "--no-build", "--no-python-downloads", "--no-header"):
        assert flag in argv, (flag, argv)
    assert argv[argv.index("--python") + 1] == sys.executable, "uv is given envsolver's own python"
    assert argv[argv.index("--python-platform") + 1] == "x86_64-manylinux_2_28", argv
    assert argv[argv.index("--python-version") + 1] == "3.12", argv
    assert argv[argv.index("--format") + 1] == "pylock.toml", argv
    assert argv[argv.index("--no-emit-package") :][:4] == ["--no-emit-package", "numpy", "--no-emit-package", "torch"]
    assert argv[argv.index("--upgrade-package") + 1] == "accelerate", argv
    assert argv[argv.index("--excludes") :][:2] == ["--excludes", "excludes.txt"], argv


def test_the_inputs_are_written_from_validated_values(tmp_path: Path) -> None:
    uvrun.write_inputs(_request(), tmp_path)
    assert (tmp_path / "req.in").read_text() == "accelerate\npeft>=0.10\n"
    assert (tmp_path / "constraints.txt").read_text() == "numpy==2.3.5\ntorch==2.9.1\n"
    assert (tmp_path / "excludes.txt").read_text() == "pyyaml\n"
    assert 'name = "torch"\nversion = "2.9.1"\nrequires-dist = []' in (tmp_path / "uv.toml").read_text()
    assert 'name = "peft"\nversion = "0.20.0"' in (tmp_path / "pylock.toml").read_text(), "preferences"
    for bad in (dict(held=(("torch;id", "1"),)), dict(held=(("torch", "1 --index x"),)), dict(upgrade=("a b",))):
        with pytest.raises(ValueError):
            uvrun.write_inputs(_request(**bad), tmp_path)


def test_the_environment_is_uvs_own(tmp_path: Path) -> None:
    user = {
        "HOME": str(tmp_path),
        "UV_INDEX_URL": "https://evil.example/simple",
        "UV_CONFIG_FILE": "/tmp/evil.toml",
        "UV_EXCLUDE_NEWER": "1990-01-01",
        "PIP_INDEX_URL": "https://evil.example/simple",
        "PIP_CONSTRAINT": "/tmp/c.txt",
        "PYTHONPATH": "/tmp/evil",
        "VIRTUAL_ENV": "/tmp/venv",
        "CONDA_PREFIX": "/tmp/conda",
        "LD_PRELOAD": "/tmp/evil.so",
        "HTTPS_PROXY": "http://proxy.example:3128",
        "no_proxy": "localhost",
        "REQUESTS_CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt",
    }
    env, flags = uvrun.environment(_request(), user, tmp_path / "work")
    assert set(env) == {"PATH", "HOME", "TMPDIR", "UV_DEFAULT_INDEX", "HTTPS_PROXY", "no_proxy", "SSL_CERT_FILE"}, env
    assert env["UV_DEFAULT_INDEX"] == SECRET_INDEX, "the credentials travel in the environment only"
    assert env["HOME"] == str(tmp_path / "work"), "no user configuration under the user's HOME"
    assert env["SSL_CERT_FILE"] == "/etc/ssl/certs/ca-certificates.crt" and flags == [], (env, flags)


def test_ssl_verify_false_lets_uv_skip_verification_for_the_index_host_only(tmp_path: Path) -> None:
    (tmp_path / ".condarc").write_text("ssl_verify: false\n")
    env, flags = uvrun.environment(_request(), {"HOME": str(tmp_path)}, tmp_path / "work")
    assert flags == ["--allow-insecure-host", "pypi.example.org"], flags
    assert "SSL_CERT_FILE" not in env, env


def test_a_binary_that_is_not_the_installed_uv_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "uv"
    fake.write_text("#!/bin/sh\necho 'uv 0.0.1 (deadbeef)'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(uvrun.UvUnusable) as caught:
        uvrun.check_binary(fake, tmp_path)
    assert "not the installed uv package's version" in str(caught.value), str(caught.value)
    uvrun.check_binary(uvrun.binary(), tmp_path)  # the real one passes
