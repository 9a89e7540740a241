"""uv's pylock.toml read as untrusted input (envsolver.lock.pypi.pylock): uv's real output parses; every field a lock
uses is held to its grammar, and a package from anything but an index is refused."""

from __future__ import annotations

import pytest

from envsolver.lock.pypi import pylock

SHA = "180885b6d7b05a19dc2dd6f722c5ce930f615e81e9e5f79d3ca910ddb9e6859e"
URL = "https://files.pythonhosted.org/packages/29/8e/d77aa769cf76472ede10e73e5c27ed22587ff12091fdd7408bc390f41af7"
# uv 0.13.9's output for `accelerate` (one package of it, as written), and a package with an sdist and a marker
REAL = f"""lock-version = "1.0"
created-by = "uv"
requires-python = ">=3.12"

[[packages]]
name = "accelerate"
version = "1.16.0"
wheels = [{{ url = "{URL}/accelerate-1.16.0-py3-none-any.whl", upload-time = 2026-11-16T21:00:36Z, size = 389390, \
hashes = {{ sha256 = "{SHA}" }} }}]

[[packages]]
name = "anyio"
version = "4.16.0"
marker = "sys_platform != 'emscripten'"
sdist = {{ url = "https://files.pythonhosted.org/packages/a9/16/anyio-4.16.0.tar.gz", size = 10, \
hashes = {{ sha256 = "{SHA}" }} }}
"""


def test_uvs_real_output_parses() -> None:
    packages = pylock.parse(REAL.encode())
    assert [(p.name, p.version) for p in packages] == [("accelerate", "1.16.0"), ("anyio", "4.16.0")], packages
    wheel = packages[0].wheels[0]
    assert wheel.filename == "accelerate-1.16.0-py3-none-any.whl" and wheel.sha256 == SHA and wheel.size == 389390
    assert packages[1].sdist is not None and packages[1].marker is not None, packages[1]


def _with(field: str) -> bytes:
    return f'lock-version = "1.0"\n\n[[packages]]\n{field}\n'.encode()


def _wheel(url: str = f"{URL}/accelerate-1.16.0-py3-none-any.whl", sha: str = SHA, extra: str = "") -> str:
    """A package entry of accelerate 1.16.0 with one wheel."""
    wheel = f'{{ url = "{url}", {extra}hashes = {{ sha256 = "{sha}" }} }}'
    return f'name = "accelerate"\nversion = "1.16.0"\nwheels = [{wheel}]'


WHEEL = f'wheels = [{{ url = "{URL}/accelerate-1.16.0-py3-none-any.whl", hashes = {{ sha256 = "{SHA}" }} }}]'


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"not = [toml", "is not TOML"),
        (b'lock-version = "2.0"\n', "expected '1.0'"),
        (_with(f'name = "Accelerate"\nversion = "1.16.0"\n{WHEEL}'), "not a normalized name"),
        (_with(f'name = "accelerate;id"\nversion = "1.16.0"\n{WHEEL}'), "not a normalized name"),
        (_with(f'name = "accelerate"\nversion = "1.16.0 && id"\n{WHEEL}'), "not a PEP 440 version"),
        (_with(f'name = "accelerate"\nversion = "1.16.0"\nmarker = "os_name == `x`"\n{WHEEL}'), "not PEP 508"),
        (
            _with('name = "accelerate"\nversion = "1.16.0"\nvcs = { url = "https://github.com/x/y" }'),
            "comes from a vcs",
        ),
        (_with('name = "accelerate"\nversion = "1.16.0"\ndirectory = { path = "/etc" }'), "from a directory"),
        (_with('name = "accelerate"\nversion = "1.16.0"'), "has no file"),
        (_with(f'name = "accelerate"\nversion = "1.16.0"\nsurprise = 1\n{WHEEL}'), "does not know"),
        (_with(_wheel("file:///etc/passwd")), "not a wheel or sdist of accelerate"),
        (_with(_wheel("https://x/$(id)/accelerate-1.16.0-py3-none-any.whl")), "not a plain http(s) file URL"),
        (_with(_wheel(f"{URL}/peft-0.1-py3-none-any.whl")), "not a wheel or sdist of accelerate 1.16.0"),
        (_with(_wheel(sha=SHA.upper())), "no sha256 of 64 lowercase hex"),
        (_with(_wheel(extra="size = -1, ")), "not a byte count"),
        (_with(f"{_wheel()}\n\n[[packages]]\n{_wheel()}"), "more than once"),
        (b"x" * (pylock.MAX_BYTES + 1), "more than the"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_hostile_pylock_is_refused_naming_the_field(data: bytes, why: str) -> None:
    with pytest.raises(pylock.BadLock) as caught:
        pylock.parse(data)
    assert why in str(caught.value), str(caught.value)


def test_a_url_with_credentials_is_never_shown() -> None:
    bad = _with(_wheel("https://alice:s3cret@x/a b/accelerate-1.16.0-py3-none-any.whl"))
    with pytest.raises(pylock.BadLock) as caught:
        pylock.parse(bad)
    assert "s3cret" not in str(caught.value), str(caught.value)
