"""Who may use the HTTP API, and HTTPS.

With `--api-key`, a request passes with `Authorization: Bearer KEY` (what the OpenAI SDK
sends) or `X-API-Key: KEY` (what WIS accepted); with `--api-user/--api-password`, with
HTTP Basic (what a Willow device sends from `user:password@` in its URL). With both,
either passes. `/health` stays open for load balancers, and so do the API docs and the pages
(`/`, `/rtc` and their files): a browser opening a page cannot send a key, and they hold no
data; the pages ask the user for the key and send it themselves.
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
    {"/health", "/api/docs", "/api/docs/{asset}", "/api/openapi.json", "/", "/rtc", "/static/{asset}"}
)


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
            return ApiError(401, "Incorrect API key or credentials", None, "invalid_api_key", headers)
        return ApiError(401, f"This server needs {' or '.join(ways)}", None, "missing_api_key", headers)


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
        raise creds.challenge("Authorization" in request.headers or "X-API-Key" in request.headers)

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
