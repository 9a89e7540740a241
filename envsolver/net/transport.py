"""requests and urllib3 under envsolver.net.http: the hops of one download (Way: an HTTPAdapter, each hop's proxy
and Authorization header, redirects), and urllib3's Retry for what is tried again.

Only envsolver.net.http imports this module, and only when it fetches over http(s): `import requests` costs tens of
milliseconds (docs/downloads.md), which commands that download nothing never pay.

requests' Session is not used, only its adapter (`HTTPAdapter.send` on a prepared request): Session.send reads a
redirect's whole body into memory, with allow_redirects=False too, and its trust_env reads os.environ (proxies,
netrc, CA bundle) where envsolver takes an `environ` mapping, and sends netrc's `default` entry to whatever
host a redirect names. docs/downloads.md has the measurements; Way follows redirects itself.
"""

from __future__ import annotations

import socket
import ssl
import threading
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import InsecureRequestWarning
from urllib3.util.retry import Retry

from envsolver.core.redact import redact_text
from envsolver.net import netconf
from envsolver.net.pace import Watchdog

if TYPE_CHECKING:
    from typing_extensions import Self
    from urllib3.response import BaseHTTPResponse

MAX_REDIRECTS = 10  # urllib's HTTPRedirectHandler.max_redirections, which downloads followed before requests
Pause = Callable[[int, "str | None"], float]  # (failures so far, the Retry-After header) -> seconds to wait
Follow = Callable[[str, str], str]  # (a URL, its redirect's Location) -> the URL to fetch next, or it raises


class WaitCancelled(Exception):
    """The cancel was set during a wait between two tries. Not an OSError, so requests lets it through."""


class Redirects(Exception):
    """More than MAX_REDIRECTS redirects."""


class Expired(Exception):
    """The download's deadline passed during a wait between two tries (envsolver.net.pace). Not an OSError, so
    requests lets it through."""


@dataclass
class Tally:
    """How many times urllib3 tried again (one more request each), shared by the copies Retry makes of itself."""

    retries: int = 0


class Retries(Retry):
    """urllib3's Retry with envsolver's waits: a failed connection and a failed read before the answer are tried
    again within `total`. A status is never retried here: urllib3 would first read the failed answer's whole body
    (drain_conn, no bound), so envsolver.net.http retries 408, 429 and 5xx itself; what urllib3 calls "other" (a TLS
    failure, a proxy's refusal) is left to it too. Before each new try it waits `pause(failures, Retry-After)` on the
    cancel event, which stops the wait, and never past the download's deadline (`watchdog`)."""

    pause: Pause
    cancel: threading.Event
    tally: Tally
    failures_before: int  # the failures of earlier attempts of the same download (a body cut short)
    watchdog: Watchdog

    @classmethod
    def make(
        cls, total: int, pause: Pause, cancel: threading.Event, failures_before: int, watchdog: Watchdog
    ) -> Retries:
        made = cls(
            total=total,
            other=0,
            redirect=False,  # Way follows redirects itself, one request at a time
            status_forcelist=(),  # no status: the answer comes back unread, its body bounded by envsolver.net.http
            raise_on_status=False,  # the last answer comes back, so its status reaches the message
            respect_retry_after_header=False,  # urllib3 would retry a 413 with Retry-After
        )
        made.pause, made.cancel, made.tally, made.failures_before = pause, cancel, Tally(), failures_before
        made.watchdog = watchdog
        return made

    def new(self, **kw: Any) -> Self:
        made = super().new(**kw)
        made.pause, made.cancel, made.tally = self.pause, self.cancel, self.tally
        made.failures_before, made.watchdog = self.failures_before, self.watchdog
        return made

    def sleep(self, response: BaseHTTPResponse | None = None) -> None:
        self.tally.retries += 1
        header = response.headers.get("Retry-After") if response is not None else None
        wait = self.pause(self.failures_before + self.tally.retries, header)
        left = self.watchdog.remaining()
        if self.cancel.wait(wait if left is None else min(wait, left)):
            raise WaitCancelled
        if self.watchdog.expired or (left is not None and left <= wait):
            raise Expired
        self.watchdog.attempt()


class Adapter(HTTPAdapter):
    """requests' HTTPAdapter whose https connections, direct or tunnelled through a proxy, verify with
    `context` alone: the CA bundle and the verification envsolver.net.netconf chose. requests' own cert_verify
    would load certifi's bundle into that context (so a site's REQUESTS_CA_BUNDLE would trust certifi too).
    Every socket its connections open, a proxy's too, is handed to `watchdog` as soon as it connects."""

    def __init__(self, context: ssl.SSLContext | None, watchdog: Watchdog) -> None:
        self.context, self.watchdog = context, watchdog
        self.verify = context is None or context.verify_mode != ssl.CERT_NONE
        if not self.verify:  # netconf.FALSE_WARNING has said it, before any download; urllib3 would per host
            warnings.filterwarnings("ignore", category=InsecureRequestWarning)
        super().__init__(pool_connections=1, pool_maxsize=1)

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any) -> None:
        if self.context is not None:
            pool_kwargs["ssl_context"] = self.context
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        _watch_pools(self.poolmanager, self.watchdog.watch)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        if self.context is not None:
            proxy_kwargs["ssl_context"] = self.context
        fresh = proxy not in self.proxy_manager
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if fresh:
            _watch_pools(manager, self.watchdog.watch)
        return manager

    def cert_verify(self, conn: Any, url: str, verify: Any, cert: Any) -> None:
        conn.cert_reqs = "CERT_REQUIRED" if verify else "CERT_NONE"
        conn.ca_certs = conn.ca_cert_dir = None


def _watch_pools(manager: Any, watch: Callable[[socket.socket], None]) -> None:
    """Every connection that MANAGER's pools open hands its socket to WATCH as soon as it connects (before TLS,
    a proxy's CONNECT or a byte of the answer)."""
    manager.pool_classes_by_scheme = {
        scheme: _watched(pool, watch) for scheme, pool in manager.pool_classes_by_scheme.items()
    }


def _watched(pool: Any, watch: Callable[[socket.socket], None]) -> Any:
    class Connection(pool.ConnectionCls):  # type: ignore[misc]
        def _new_conn(self) -> socket.socket:
            sock: socket.socket = super()._new_conn()
            watch(sock)
            return sock

    return type(pool.__name__, (pool,), {"ConnectionCls": Connection})


class Way:
    """How one download reaches its server, hop by hop: an Adapter (made again with the TLS context when a hop
    first needs https), the proxy of each hop's URL (envsolver.net.netconf.proxy_for) and the Authorization header
    `authorization(url)` gives each hop; every socket watched by `watchdog` (envsolver.net.pace). Redirects are
    followed here, not by requests' Session, which would read a redirect's whole body (module docstring)."""

    def __init__(
        self,
        authorization: Callable[[str], str | None],
        proxies: Mapping[str, str],
        tls: Callable[[], ssl.SSLContext],
        timeout: float,
        user_agent: str,
        watchdog: Watchdog,
    ) -> None:
        self.authorization, self.proxies, self.tls, self.timeout = authorization, proxies, tls, timeout
        self.user_agent, self.watchdog = user_agent, watchdog
        self.adapter: Adapter | None = None

    def __enter__(self) -> Way:
        return self

    def __exit__(self, *_: object) -> None:
        if self.adapter is not None:
            self.adapter.close()

    def _adapter_for(self, scheme: str) -> Adapter:
        if scheme == "https" and (self.adapter is None or self.adapter.context is None):
            if self.adapter is not None:
                self.adapter.close()
            self.adapter = Adapter(self.tls(), self.watchdog)
        elif self.adapter is None:
            self.adapter = Adapter(None, self.watchdog)
        return self.adapter

    def get(self, url: str, have: int, retries: Retries, follow: Follow) -> requests.Response:
        """The answer to a GET of `url` (from byte `have` on), after at most MAX_REDIRECTS redirects, each
        hop's URL from `follow`; its body not yet read. Raises Redirects past MAX_REDIRECTS, what `follow` and
        `tls` raise, and requests' exceptions for what the connection met."""
        for _ in range(MAX_REDIRECTS + 1):
            headers = {"User-Agent": self.user_agent, "Accept-Encoding": "identity"}  # bytes as sent, see Range
            if have:
                headers["Range"] = f"bytes={have}-"
            header = self.authorization(url)
            if header is not None:
                headers["Authorization"] = header
            adapter = self._adapter_for(urlsplit(url).scheme)
            adapter.max_retries = retries
            response = adapter.send(
                requests.Request("GET", url, headers=headers).prepare(),
                stream=True,
                timeout=self.timeout,
                verify=adapter.verify,
                proxies=netconf.proxy_for(url, self.proxies),
            )
            if not response.is_redirect:
                return response
            location = response.headers["Location"]
            response.close()  # the redirect's body is not read: the connection goes, not its bytes
            url = follow(url, location)
        raise Redirects


def reason(exc: BaseException) -> str:
    """What went wrong, in the words of the deepest error that has some: an OSError's own text where one caused
    it (`Connection refused`), else the innermost message, redacted. requests' and urllib3's outer messages
    name the pool and the URL's path, so they are not shown."""
    seen: set[int] = set()
    chain: list[BaseException] = []
    stack = [exc]
    while stack:
        error = stack.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        chain.append(error)
        nested = (getattr(error, "reason", None), getattr(error, "original_error", None), error.__cause__, *error.args)
        stack.extend(e for e in nested if isinstance(e, BaseException))
    for error in reversed(chain):
        if isinstance(error, OSError) and error.strerror:
            return error.strerror
    return redact_text(str(chain[-1])) or type(chain[-1]).__name__
