"""Who may use the HTTP API, and HTTPS.

With `--api-key`, a request passes with `Authorization: Bearer KEY` (what the OpenAI SDK
sends) or `X-API-Key: KEY` (what WIS accepted); with `--api-user/--api-password`, with
HTTP Basic (what a Willow device sends from `user:password@` in its URL). With both,
either passes. `/health` stays open for load balancers, and so do the API docs and the pages
(`/`, `/rtc`, `/realtime` and their files): a browser opening a page cannot send a key, and they hold no
data; the pages ask the user for the key and send it themselves.

A browser's WebSocket cannot send an Authorization header: the only header a page sets on one is
`Sec-WebSocket-Protocol`, its subprotocols. So a WebSocket handshake (`Upgrade: websocket`; today only
`/v1/realtime`) also passes with the key as the subprotocol `openai-insecure-api-key.KEY`, OpenAI's own
convention for browsers, which its Realtime clients send beside `realtime`. Only on a handshake: no other request
needs it, and a key in that header on a plain request is more likely a mistake than a client. It is no weaker than
Bearer: it is the same key, compared in constant time; a page cannot put that header on a fetch() (a forbidden
header name), so only the WebSocket constructor sends it, and the server answers with `realtime` alone, never
echoing the key. ("Insecure" is OpenAI's warning against shipping a key in a public web app; here the user types
the key into their own browser.)
"""

from __future__ import annotations

import hmac
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import BasicAuth, web
from multidict import CIMultiDict, CIMultiDictProxy

from wyoming_wis.config import HttpSettings
from wyoming_wis.errors import StartupError

from .errors import ApiError

REALM = "wyoming-wis"
OPEN_RESOURCES = frozenset(
    {"/health", "/api/docs", "/api/docs/{asset}", "/api/openapi.json", "/", "/rtc", "/realtime", "/static/{asset}"}
)
KEY_SUBPROTOCOL = "openai-insecure-api-key."  # + the key: a browser's WebSocket shows its key this way


@dataclass(frozen=True)
class Credentials:
    """What a request must show; nothing when neither a key nor a user is configured."""

    api_key: str | None = None
    user: str | None = None
    password: str | None = None

    @property
    def bearer(self) -> bool:
        return bool(self.api_key)

    @property
    def basic(self) -> bool:
        return bool(self.user)

    @property
    def required(self) -> bool:
        return self.bearer or self.basic

    def accepts(self, headers: CIMultiDictProxy[str]) -> bool:
        authorization = headers.get("Authorization", "")
        if self.api_key:
            scheme, _, token = authorization.partition(" ")
            if "X-API-Key" in headers and _same(headers["X-API-Key"], self.api_key):
                return True
            if scheme.lower() == "bearer" and _same(token.strip(), self.api_key):
                return True
            if any(_same(key, self.api_key) for key in subprotocol_keys(headers)):
                return True
        if self.user and self.password and authorization[:6].lower() == "basic ":
            try:
                shown = BasicAuth.decode(authorization, encoding="utf-8")
            except ValueError:
                return False
            return _same(shown.login, self.user) & _same(shown.password, self.password)
        return False

    def challenge(self, shown: bool) -> ApiError:
        """401 in OpenAI's envelope, with a WWW-Authenticate header for each scheme that would pass."""
        headers: CIMultiDict[str] = CIMultiDict()
        ways = []
        if self.bearer:
            headers.add("WWW-Authenticate", f'Bearer realm="{REALM}"')
            ways.append("an API key (Authorization: Bearer KEY or X-API-Key: KEY)")
        if self.basic:
            headers.add("WWW-Authenticate", f'Basic realm="{REALM}", charset="UTF-8"')
            ways.append("HTTP Basic auth (user:password@ in a Willow device's URL)")
        if shown:
            return ApiError(401, "Incorrect API key or credentials", None, "invalid_api_key", headers=headers)
        return ApiError(401, f"This server needs {' or '.join(ways)}", None, "missing_api_key", headers=headers)


def subprotocols(headers: CIMultiDictProxy[str]) -> list[str]:
    """The subprotocols a WebSocket handshake offers (`Sec-WebSocket-Protocol`, comma-separated, on one or more
    lines); none for any other request."""
    if headers.get("Upgrade", "").strip().lower() != "websocket":
        return []
    return [name.strip() for line in headers.getall("Sec-WebSocket-Protocol", ()) for name in line.split(",")]


def subprotocol_keys(headers: CIMultiDictProxy[str]) -> list[str]:
    """The keys a WebSocket handshake shows as `openai-insecure-api-key.KEY` subprotocols."""
    return [name[len(KEY_SUBPROTOCOL) :] for name in subprotocols(headers) if name.startswith(KEY_SUBPROTOCOL)]


def _same(given: str, expected: str) -> bool:
    """Compare in constant time, so the answer's timing tells nothing about the secret.

    A header's bytes that are not UTF-8 arrive as surrogate escapes (`\\xff` as `\\udcff`), which strict UTF-8 cannot
    encode: "surrogatepass" encodes them to bytes no configured secret holds, so such a value is a wrong one (401).
    """
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode())


def credentials(settings: HttpSettings) -> Credentials:
    return Credentials(settings.api_key or None, settings.api_user or None, settings.api_password or None)


def require(creds: Credentials) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Middleware: 401 for a request without valid credentials, unless its route is open.

    Openness is decided by the route the router matched, never by the raw path, so no
    spelling of a URL reaches a protected handler through an open prefix.
    """

    @web.middleware
    async def require_credentials(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        resource = request.match_info.route.resource
        if (resource is not None and resource.canonical in OPEN_RESOURCES) or creds.accepts(request.headers):
            return await handler(request)
        headers = request.headers
        raise creds.challenge("Authorization" in headers or "X-API-Key" in headers or bool(subprotocol_keys(headers)))

    return require_credentials


def server_ssl(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    """The TLS context for `--ssl-cert/--ssl-key`, or None for plain HTTP; a StartupError says what is wrong."""
    if cert is None:
        return None
    for flag, path in (("--ssl-cert", cert), ("--ssl-key", key)):
        if path is not None and not path.is_file():
            raise StartupError(f"{flag} {path}: no such file")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as err:
        files = f"--ssl-cert {cert}" + (f" and --ssl-key {key}" if key else "")
        reason = getattr(err, "reason", None) or err.strerror or str(err)
        raise StartupError(f"{files}: not a PEM certificate with its matching private key ({reason})") from err
    return context


CREDENTIALS = web.AppKey("credentials", Credentials)
SSL_CONTEXT = web.AppKey("ssl_context", ssl.SSLContext)


def setup(app: web.Application, settings: HttpSettings) -> None:
    """Require credentials if any are configured, and keep the TLS context for `start`."""
    context = server_ssl(settings.ssl_cert, settings.ssl_key)
    if context is not None:
        app[SSL_CONTEXT] = context
    app[CREDENTIALS] = creds = credentials(settings)
    if creds.required:
        app.middlewares.append(require(creds))
