"""requests and urllib3 under envsolver.http: an HTTPAdapter per download, and urllib3's Retry for what is
tried again.

Only envsolver.http imports this module, and only when it fetches over http(s): `import requests` costs tens of
milliseconds (docs/downloads.md), which commands that download nothing never pay.

requests' Session is not used, only its adapter (`HTTPAdapter.send` on a prepared request): Session.send reads a
redirect's whole body into memory, with allow_redirects=False too, and its trust_env reads os.environ (proxies,
netrc, CA bundle) where envsolver takes an `environ` mapping, and sends netrc's `default` entry to whatever
host a redirect names. docs/downloads.md has the measurements; envsolver.http follows redirects itself.
"""

from __future__ import annotations

import ssl
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from requests.adapters import HTTPAdapter
from urllib3.exceptions import InsecureRequestWarning
from urllib3.util.retry import Retry

if TYPE_CHECKING:
    from typing_extensions import Self
    from urllib3.response import BaseHTTPResponse

# HTTP answers that another try may cure: a timeout, too many requests, a server error.
TRANSIENT = frozenset({408, 429, *range(500, 600)})

Pause = Callable[[int, "str | None"], float]  # (failures so far, the Retry-After header) -> seconds to wait


class WaitCancelled(Exception):
    """The cancel was set during a wait between two tries. Not an OSError, so requests lets it through."""


@dataclass
class Tally:
    """How many times urllib3 tried again (one more request each), shared by the copies Retry makes of itself."""

    retries: int = 0


class Retries(Retry):
    """urllib3's Retry with envsolver's waits: a failed connection, a failed read before the answer and a
    TRANSIENT status are tried again within `total`; what urllib3 calls "other" (a TLS failure, a proxy's
    refusal) is left to envsolver.http. Before each new try it waits `pause(failures, Retry-After)` on the
    cancel event, which stops the wait."""

    pause: Pause
    cancel: threading.Event
    tally: Tally
    failures_before: int  # the failures of earlier attempts of the same download (a body cut short)

    @classmethod
    def make(cls, total: int, pause: Pause, cancel: threading.Event, failures_before: int) -> Retries:
        made = cls(
            total=total,
            other=0,
            redirect=False,  # envsolver.http follows redirects itself, one request at a time
            status_forcelist=TRANSIENT,
            raise_on_status=False,  # the last answer comes back, so its status reaches the message
            respect_retry_after_header=False,  # only TRANSIENT statuses are tried again (urllib3 adds 413)
        )
        made.pause, made.cancel, made.tally, made.failures_before = pause, cancel, Tally(), failures_before
        return made

    def new(self, **kw: Any) -> Self:
        made = super().new(**kw)
        made.pause, made.cancel, made.tally = self.pause, self.cancel, self.tally
        made.failures_before = self.failures_before
        return made

    def sleep(self, response: BaseHTTPResponse | None = None) -> None:
        self.tally.retries += 1
        header = response.headers.get("Retry-After") if response is not None else None
        if self.cancel.wait(self.pause(self.failures_before + self.tally.retries, header)):
            raise WaitCancelled


class Adapter(HTTPAdapter):
    """requests' HTTPAdapter whose https connections, direct or tunnelled through a proxy, verify with
    `context` alone: the CA bundle and the verification envsolver.netconf chose. requests' own cert_verify
    would load certifi's bundle into that context (so a site's REQUESTS_CA_BUNDLE would trust certifi too)."""

    def __init__(self, context: ssl.SSLContext | None) -> None:
        self.context = context
        self.verify = context is None or context.verify_mode != ssl.CERT_NONE
        if not self.verify:  # netconf.FALSE_WARNING has said it, before any download; urllib3 would per host
            warnings.filterwarnings("ignore", category=InsecureRequestWarning)
        super().__init__(pool_connections=1, pool_maxsize=1)

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any) -> None:
        if self.context is not None:
            pool_kwargs["ssl_context"] = self.context
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        if self.context is not None:
            proxy_kwargs["ssl_context"] = self.context
        return super().proxy_manager_for(proxy, **proxy_kwargs)

    def cert_verify(self, conn: Any, url: str, verify: Any, cert: Any) -> None:
        conn.cert_reqs = "CERT_REQUIRED" if verify else "CERT_NONE"
        conn.ca_certs = conn.ca_cert_dir = None
