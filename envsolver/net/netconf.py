"""The network settings a user already has, read from the environment and conda's configuration.

Proxies: `HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY` (and their lower-case forms, which win), as urllib's
`getproxies_environment` reads them, from the `environ` a download is given (not os.environ); an https URL goes
through its proxy with CONNECT (requests' adapter, urllib3's tunnel), and a proxy URL's credentials become a
`Proxy-Authorization` header to the proxy alone, never a message.

Certificates, in the order requests (which conda uses) applies them:
  - conda's `ssl_verify` (`~/.condarc`, then `$CONDARC`, the later winning, as in conda's SEARCH_PATH in
    conda/base/constants.py): `false` turns verification off (a loud warning says so), a path names a CA bundle
    file or a directory of certificates, `true` or `truststore` keep the default;
  - with the default, `REQUESTS_CA_BUNDLE` (then `CURL_CA_BUNDLE`) names the bundle (requests'
    `merge_environment_settings`), else `SSL_CERT_FILE` / `SSL_CERT_DIR` (OpenSSL's own variables), else the
    system's store.
Sources: conda's configuration reference (`ssl_verify`) and "Using non-standard certificates" page
(docs.conda.io), requests' `Session.merge_environment_settings`.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from envsolver.core import safeyaml
from envsolver.core.errors import BadInputError
from envsolver.core.redact import redact_text

CONDARC_LIMIT = 1 << 20
FALSE_WARNING = (
    "ssl_verify is false in {where}: package downloads over https are NOT verified, so anyone on the path can "
    "replace them (the lock's sha256 still refuses a changed archive). Set ssl_verify to true or to your CA "
    "bundle's path."
)


@dataclass(frozen=True)
class Tls:
    """What verifies https: off (verify False), a CA file or directory, or the default store."""

    verify: bool
    cafile: str | None
    capath: str | None
    warnings: tuple[str, ...]

    def context(self) -> ssl.SSLContext:
        """An SSLContext for these settings. Raises BadInputError (exit 2) for a CA path that cannot be read."""
        if not self.verify:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        try:
            return ssl.create_default_context(cafile=self.cafile, capath=self.capath)
        except (OSError, ssl.SSLError) as exc:
            where = self.cafile or self.capath
            raise BadInputError(
                f"cannot load the CA certificates {where!r} ({getattr(exc, 'strerror', None) or exc}). Point "
                "REQUESTS_CA_BUNDLE, SSL_CERT_FILE or conda's ssl_verify at a readable PEM bundle, or unset it."
            ) from None


def condarc_paths(environ: Mapping[str, str]) -> list[Path]:
    """The .condarc files read, in order (a later one wins): ~/.condarc, then $CONDARC."""
    out = []
    if environ.get("HOME"):
        out.append(Path(environ["HOME"]) / ".condarc")
    if environ.get("CONDARC"):
        out.append(Path(environ["CONDARC"]).expanduser())
    return out


def ssl_verify(environ: Mapping[str, str]) -> tuple[bool | str | None, str | None]:
    """conda's ssl_verify (True, False, a path, or None when no file sets it) and the file that set it.
    Raises BadInputError (exit 2) for a .condarc that is not YAML or an ssl_verify that is not one of those."""
    value: bool | str | None = None
    source = None
    for path in condarc_paths(environ):
        if not path.is_file():
            continue
        try:
            doc = safeyaml.load(safeyaml.read_text(path, CONDARC_LIMIT))
        except (OSError, safeyaml.SafeYamlError) as exc:
            raise BadInputError(
                f"cannot read conda's configuration {str(path)!r}: {redact_text(str(exc))}. Fix the file, or "
                "point CONDARC elsewhere."
            ) from None
        if not isinstance(doc, dict) or "ssl_verify" not in doc:
            continue
        setting = doc["ssl_verify"]
        if isinstance(setting, str) and setting.lower() in ("true", "false"):
            setting = setting.lower() == "true"
        if not isinstance(setting, (bool, str)) or setting == "":
            raise BadInputError(
                f"ssl_verify in {str(path)!r} is {setting!r}: expected true, false, truststore or the path of a "
                f"CA bundle. Fix that line in {str(path)!r}, e.g. `ssl_verify: true`."
            )
        value, source = setting, str(path)
    return value, source


def tls(environ: Mapping[str, str]) -> Tls:
    """The certificate settings from conda's ssl_verify and the environment (see the module docstring)."""
    setting, source = ssl_verify(environ)
    if setting is False:
        return Tls(False, None, None, (FALSE_WARNING.format(where=source),))
    if isinstance(setting, str) and setting != "truststore":
        path = os.path.expanduser(setting)
        return Tls(True, None, path, ()) if os.path.isdir(path) else Tls(True, path, None, ())
    bundle = environ.get("REQUESTS_CA_BUNDLE") or environ.get("CURL_CA_BUNDLE")
    if bundle:
        return Tls(True, bundle, None, ()) if not os.path.isdir(bundle) else Tls(True, None, bundle, ())
    cafile, capath = environ.get("SSL_CERT_FILE") or None, environ.get("SSL_CERT_DIR") or None
    return Tls(True, cafile, capath, ())


def proxies(environ: Mapping[str, str]) -> dict[str, str]:
    """scheme -> proxy URL (and "no" -> the NO_PROXY list), as urllib's getproxies_environment reads them:
    lower-case names win over upper-case ones, an empty value unsets, and HTTP_PROXY is ignored in a CGI
    request (REQUEST_METHOD set), where a client could have set it."""
    found: dict[str, str] = {}
    for name, value in environ.items():
        if name.upper().endswith("_PROXY") and name.upper() == name and value:
            found[name[:-6].lower()] = value
    for name, value in environ.items():
        if name.endswith("_proxy") and name.lower() == name:
            if value:
                found[name[:-6]] = value
            else:
                found.pop(name[:-6], None)
    if "REQUEST_METHOD" in environ:
        found.pop("http", None)
    return found


def proxy_for(url: str, found: Mapping[str, str]) -> dict[str, str]:
    """{scheme: proxy URL} for fetching `url` through the proxy `found` names for its scheme, as requests'
    `proxies` takes it; {} when there is none or NO_PROXY (found["no"]) covers its host, matched as urllib's
    `proxy_bypass_environment` matches (host names, domain suffixes, '*'; the port may be named)."""
    parts = urlsplit(url)
    proxy = found.get(parts.scheme)
    if not proxy:
        return {}
    import urllib.request  # loaded by requests already, when this runs

    # urllib's NO_PROXY matcher, public but left out of its stubs
    bypass: Callable[[str, Mapping[str, str]], bool] = getattr(urllib.request, "proxy_bypass_environment")  # noqa: B009
    host = parts.netloc.rpartition("@")[2]
    if host and bypass(host, {"no": found.get("no", "")}):
        return {}
    return {parts.scheme: proxy}
