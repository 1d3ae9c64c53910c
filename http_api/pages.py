"""The browser pages: GET / (the console), GET /rtc (press to talk over WebRTC) and their files, GET /static/{asset}.

Both pages live here, in `http_api/static/`, rather than the console here and the demo in
`rtc/`: both are plain files served by this aiohttp application, they share a stylesheet and
the script that keeps the API key and shows the server's errors, and `/rtc` is only a page
that calls `POST /api/rtc/asr` and the OpenAI routes, as any other web client would. The
`rtc` package stays the WebRTC backend alone.

The pages hold no data, so they are open without credentials like /api/docs (see
`security.OPEN_RESOURCES`): a browser cannot send a key when it opens a page; the page
asks the user for the key and sends it on every request it makes. Every file comes from
the package (no CDN, no web fonts), and a Content-Security-Policy tells the browser to
load nothing from anywhere else.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from .errors import ApiError

routes = web.RouteTableDef()
STATIC = Path(__file__).with_name("static")
PAGES = {"/": "index.html", "/rtc": "rtc.html"}
ASSETS = frozenset(path.name for path in STATIC.iterdir() if path.is_file() and path.name not in PAGES.values())
# The pages' own origin only. media-src blob: plays synthesised speech fetched by the page;
# WebRTC's media is not governed by CSP, and its signalling is a fetch to this server.
POLICY = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self'",
    "media-src": "'self' blob:",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}


def page_headers(**directives: str) -> dict[str, str]:
    """What every page is sent with; `directives` (script_src=...) change those of POLICY."""
    policy = POLICY | {name.replace("_", "-"): value for name, value in directives.items()}
    return {
        "Content-Security-Policy": "; ".join(f"{name} {value}" for name, value in policy.items()),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-cache",  # revalidated (ETag) on each load, so an upgrade shows at once
    }


HEADERS = page_headers()


# Set here, not guessed from the system's mime.types: a module script must come as JavaScript.
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}


def _file(name: str) -> web.FileResponse:
    path = STATIC / name
    media_type = MEDIA_TYPES.get(path.suffix, "application/octet-stream")
    return web.FileResponse(path, headers={**HEADERS, "Content-Type": media_type})


@routes.get("/")
async def console(_: web.Request) -> web.FileResponse:
    return _file(PAGES["/"])


@routes.get("/rtc")
async def rtc(_: web.Request) -> web.FileResponse:
    return _file(PAGES["/rtc"])


@routes.get("/static/{asset}")
async def asset(request: web.Request) -> web.FileResponse:
    name = request.match_info["asset"]
    if name not in ASSETS:
        raise ApiError(404, f"No page file {name!r}", None, "not_found")
    return _file(name)
