"""The browser pages: GET / (the console), GET /rtc (press to talk over WebRTC), GET /realtime (hands-free over
OpenAI's Realtime API) and their files, GET /static/{asset}.

The pages live here, in `http_api/static/`, rather than the console here and the demo in
`rtc/`: all are plain files served by this aiohttp application, they share a stylesheet and
the script that keeps the API key and shows the server's errors, and `/rtc` is only a page
that calls `POST /api/rtc/asr` and the OpenAI routes, as any other web client would (and `/realtime` one that
opens the WebSocket `/v1/realtime?intent=transcription`). The `rtc` package stays the WebRTC backend alone.

The pages share one header (`static/header.html`: the name, the links between pages, the API key
form), put in place of their `<!-- header -->` line when the module loads, with the page's own link
marked; each page is then served from memory, with an ETag so that a browser revalidates it cheaply.

The pages hold no data, so they are open without credentials like /api/docs (see
`security.OPEN_RESOURCES`): a browser cannot send a key when it opens a page; the page
asks the user for the key and sends it on every request it makes. Every file comes from
the package (no CDN, no web fonts), and a Content-Security-Policy tells the browser to
load nothing from anywhere else.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from aiohttp import web

from wyoming_wis.values import quote

from .errors import ApiError

routes = web.RouteTableDef()
STATIC = Path(__file__).with_name("static")
PAGES = {"/": "index.html", "/rtc": "rtc.html", "/realtime": "realtime.html"}
HEADER = "header.html"  # a part of every page, not a file of its own
ASSETS = frozenset(
    path.name for path in STATIC.iterdir() if path.is_file() and path.name not in {*PAGES.values(), HEADER}
)
# The pages' own origin only. media-src blob: plays synthesised speech fetched by the page;
# WebRTC's media is not governed by CSP, and its signalling is a fetch to this server. connect-src 'self' covers
# the WebSocket to this server too (ws: from an http: page, wss: from an https: one: CSP Level 3's rule for 'self',
# in Chrome since 71, Firefox, and Safari since 16); /realtime's AudioWorklet module is a script from 'self'.
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


def _page(path: str) -> tuple[bytes, str]:
    """The page at `path` with the shared header in place, its own link marked; and its ETag."""
    header, page = (STATIC / HEADER).read_text(), (STATIC / PAGES[path]).read_text()
    own = f'<a href="{"./" if path == "/" else path.lstrip("/")}">'
    if own not in header or "  <!-- header -->\n" not in page:
        raise RuntimeError(f"{PAGES[path]} or {HEADER} lacks its part: the package is damaged")
    header = header.replace(own, own[:-1] + ' aria-current="page">', 1)
    body = page.replace("  <!-- header -->\n", header, 1).encode()
    return body, hashlib.sha256(body).hexdigest()[:32]


_PAGES = {path: _page(path) for path in PAGES}


def _serve_page(request: web.Request, path: str) -> web.Response:
    body, etag = _PAGES[path]
    headers = {**HEADERS, "Content-Type": MEDIA_TYPES[".html"]}
    if any(tag.value == etag for tag in request.if_none_match or ()):
        response = web.Response(status=304, headers=headers)
    else:
        response = web.Response(body=body, headers=headers)
    response.etag = etag
    return response


def _file(name: str) -> web.FileResponse:
    path = STATIC / name
    media_type = MEDIA_TYPES.get(path.suffix, "application/octet-stream")
    return web.FileResponse(path, headers={**HEADERS, "Content-Type": media_type})


@routes.get("/")
async def console(request: web.Request) -> web.Response:
    return _serve_page(request, "/")


@routes.get("/rtc")
async def rtc(request: web.Request) -> web.Response:
    return _serve_page(request, "/rtc")


@routes.get("/realtime")
async def realtime(request: web.Request) -> web.Response:
    return _serve_page(request, "/realtime")


@routes.get("/static/{asset}")
async def asset(request: web.Request) -> web.FileResponse:
    name = request.match_info["asset"]
    if name not in ASSETS:
        raise ApiError(404, f"No page file {quote(name)}", None, "not_found")
    return _file(name)
