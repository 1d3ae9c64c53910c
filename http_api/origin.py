"""What a web page may make this server do: the Host and Origin checks, against DNS rebinding and cross-site requests.

Any page the user opens elsewhere can send requests to this server from the user's browser, which is on the home
network: a plain HTML form posts across sites with no preflight, and DNS rebinding (the page's own name pointed
again, at this server's address) even reads the answers, as the page's own origin. Two rules stop both, before
authentication and before any body is read:

- Host: a request from a browser must name this server as it may be named (`Names`): an IP address, this machine's
  own names, a name nobody can register on the internet (a rebinding page's name is one its author registered), or
  one given with --allowed-host. Clients that are not browsers (Willow devices, the OpenAI SDK, curl, Open WebUI's
  backend) reach the server by whatever name the LAN gives it and rebind nothing, so they are not checked. A
  browser is known by what every browser sends and no page can take away (`from_browser`).
- Origin: a request that may change something (any method but GET, HEAD and OPTIONS, and a WebSocket's opening
  GET: a page of any origin may open one, with no preflight, and the session then works for it) sent by a page of
  another origin is refused, unless --cors-origin allows that origin. Preflights are OPTIONS: cors.py answers them.

/health stays open: a load balancer's check must not depend on the name it uses.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web

from wyoming_wis.config import HttpSettings
from wyoming_wis.values import quote

from .cors import Cors
from .errors import ApiError, answer

ANYWHERE = "*"  # --allowed-host *: no Host check
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})  # what a page may send from another origin
OPEN_RESOURCES = frozenset({"/health"})
# Names under these suffixes can be registered by nobody on the internet, so no rebinding page is served from one:
# mDNS (RFC 6762), loopback (RFC 6761), home networks (RFC 8375), ICANN's private-use .internal, and what home
# routers name their hosts (OpenWrt's .lan; .home, which ICANN will not delegate). One-word names are never public.
PRIVATE_SUFFIXES = (".local", ".localhost", ".home.arpa", ".internal", ".lan", ".home")
CROSS_SITE = frozenset({"cross-site", "same-site"})  # Sec-Fetch-Site of a page of another origin


@dataclass(frozen=True)
class Names:
    """The names a browser may reach this server by: besides those below, `allowed` (--allowed-host)."""

    allowed: frozenset[str]

    @classmethod
    def of(cls, allowed: Collection[str]) -> Names:
        """--allowed-host's names and this machine's host name (not its fully qualified one: looking that up may ask
        DNS, and the server makes no query of its own)."""
        return cls(frozenset(name.lower().rstrip(".") for name in (*allowed, socket.gethostname())))

    def allow(self, host: str) -> bool:
        """Whether a Host header (`name`, `name:port`, `[v6]:port`) names this server as a browser may."""
        if ANYWHERE in self.allowed:
            return True
        name = host_name(host)
        if not name:
            return False
        try:
            ipaddress.ip_address(name.partition("%")[0])
            return True
        except ValueError:
            pass
        return "." not in name or name.endswith(PRIVATE_SUFFIXES) or name in self.allowed


def host_name(host: str) -> str:
    """The name or address of a Host header, without its port or an IPv6 address's brackets, in lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        address, bracket, _ = host[1:].partition("]")
        return address if bracket else ""
    return host.partition(":")[0].rstrip(".")


def from_browser(headers: Mapping[str, str]) -> bool:
    """Whether a request comes from a browser, by what every browser sends and no page can take away: Origin (on
    every request but a same-origin GET or HEAD), Sec-Fetch-* (over HTTPS and to localhost) and a User-Agent that
    starts with Mozilla/ (Chromium and Safari let no page change it)."""
    return (
        "Origin" in headers
        or "Sec-Fetch-Site" in headers
        or "Sec-Fetch-Mode" in headers
        or headers.get("User-Agent", "").startswith("Mozilla/")
    )


def setup(app: web.Application, settings: HttpSettings) -> None:
    """Install the checks; place them before authentication (a refused request needs no key to be refused) and
    before anything reads the body."""
    app.middlewares.append(_guard(Names.of(settings.allowed_host), Cors(frozenset(settings.cors_origin))))


def _guard(names: Names, cors: Cors) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def same_origin(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        resource = request.match_info.route.resource
        if (resource is not None and resource.canonical in OPEN_RESOURCES) or not from_browser(request.headers):
            return await handler(request)
        host = request.headers.get("Host", "")
        if not names.allow(host):
            return _refuse(request, _wrong_host(host))
        if not _safe(request) and (other := _other_origin(request)) and not cors.allows(other):
            return _refuse(request, _cross_origin(other))
        return await handler(request)

    return same_origin


def _safe(request: web.Request) -> bool:
    """Whether a page of any origin may send `request`: a GET, HEAD or OPTIONS that opens no WebSocket."""
    return request.method in SAFE_METHODS and request.headers.get("Upgrade", "").lower() != "websocket"


def _other_origin(request: web.Request) -> str | None:
    """The origin of the page that sent `request` if it is another than this server's, as the browser says it."""
    origin = request.headers.get("Origin")
    if origin is None:
        return "another site" if request.headers.get("Sec-Fetch-Site") in CROSS_SITE else None
    try:
        # The scheme is left out: behind a proxy that ends TLS, a page of https://NAME posts over http to NAME.
        authority = urlsplit(origin).netloc.lower()
    except ValueError:  # no URL at all ("http://[")
        return origin
    return None if authority == request.headers.get("Host", "").lower() else origin


def _wrong_host(host: str) -> ApiError:
    return ApiError(
        403,
        f"A browser reached this server by the name {quote(host_name(host) or host)}, which it does not answer to "
        "from web pages (against DNS rebinding). If that is a name of this server, start it with --allowed-host NAME",
        None,
        "host_not_allowed",
    )


def _cross_origin(origin: str) -> ApiError:
    return ApiError(
        403,
        f"A page of {quote(origin)} may send this server no request but GET and HEAD; to let a web app of that "
        "origin call it, start the server with --cors-origin ORIGIN",
        None,
        "origin_not_allowed",
    )


def _refuse(request: web.Request, err: ApiError) -> web.Response:
    """The refusal, with nothing of the body parsed: the connection closes after it, once aiohttp has read and dropped
    what is still coming (for at most its lingering time, 10 s), so that the client reads the answer, not a reset."""
    response = answer(request, err)
    if request.body_exists:
        response.force_close()
    return response
