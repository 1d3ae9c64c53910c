"""Cross-origin access (`--cors-origin`), so web apps in a browser may call the API.

A short middleware answers preflights, and a response-prepare hook adds the headers to
every answer, including errors and answers streamed as they are made. aiohttp-cors would
want each route registered with it and adds OPTIONS routes to the router; here one rule
holds for every route, so this is shorter than configuring it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

from aiohttp import web

# What our clients read beyond the CORS-safelisted headers.
EXPOSED = "X-Cache, Retry-After, WWW-Authenticate"
METHODS = "GET, HEAD, POST, OPTIONS"
PREFLIGHT_MAX_AGE = 600  # seconds a browser may reuse a preflight's answer


@dataclass(frozen=True)
class Cors:
    origins: frozenset[str]

    @property
    def anyone(self) -> bool:
        return "*" in self.origins

    def allows(self, origin: str | None) -> bool:
        return bool(origin) and (self.anyone or origin in self.origins)


def setup(app: web.Application, origins: Collection[str]) -> None:
    """Answer preflights and label answers for the allowed origins; without any, the API sends no CORS headers.

    Install before authentication: a browser's preflight never carries the key.
    """
    if not origins:
        return
    cors = Cors(frozenset(origins))
    app.middlewares.append(_preflight(cors))

    async def label(request: web.Request, response: web.StreamResponse) -> None:
        origin = request.headers.get("Origin")
        if not cors.anyone:
            response.headers.add("Vary", "Origin")  # caches must not hand one origin's answer to another
        if cors.allows(origin):
            response.headers["Access-Control-Allow-Origin"] = "*" if cors.anyone else str(origin)
            response.headers["Access-Control-Expose-Headers"] = EXPOSED

    app.on_response_prepare.append(label)


def _preflight(cors: Cors) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def preflight(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """204 with what may be sent, for an allowed origin; anything else goes on as usual."""
        asking = request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers
        if not asking or not cors.allows(request.headers.get("Origin")):
            return await handler(request)
        headers = {"Access-Control-Allow-Methods": METHODS, "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE)}
        if asked := request.headers.get("Access-Control-Request-Headers"):
            headers["Access-Control-Allow-Headers"] = asked  # any header: the key is checked on the real request
        return web.Response(status=204, headers=headers)

    return preflight
