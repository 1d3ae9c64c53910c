"""The browser pages: GET / (the console), GET /rtc (press to talk over WebRTC), GET /realtime (hands-free over
OpenAI's Realtime API) and their files, GET /static/{asset}.

The pages live here, in `http_api/static/`, rather than the console here and the demo in
`rtc/`: all are plain files served by this aiohttp application, they share a stylesheet and
the script that keeps the API key and shows the server's errors, and `/rtc` is only a page
that calls `POST /api/rtc/asr` and the OpenAI routes, as any other web client would (and `/realtime` one that
opens the WebSocket `/v1/realtime?intent=transcription`). The `rtc` package stays the WebRTC backend alone.

A page is its content (the sections of its <main>, `static/index.html` for /) and a row of `PAGES`: its title,
its script, the state its script keeps on <body> and whether it shows the connection log (`static/log.html`).
`static/layout.html` frames every page alike (the <head>, the header with the links between pages and the API key
form, the footer); it and the content are put together when the module loads, with the page's own link marked,
and each page is then served from memory with an ETag, so that a browser revalidates it cheaply.

The pages hold no data, so they are open without credentials like /api/docs (see
`security.OPEN_RESOURCES`): a browser cannot send a key when it opens a page; the page
asks the user for the key and sends it on every request it makes. Every file comes from
the package (no CDN, no web fonts), and a Content-Security-Policy tells the browser to
load nothing from anywhere else.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from wyoming_wis.values import quote

from .errors import ApiError

routes = web.RouteTableDef()
STATIC = Path(__file__).with_name("static")
LAYOUT = "layout.html"  # every page's frame: a part, not a file of its own
LOG = "log.html"  # the connection log of the pages that connect (/rtc, /realtime)


@dataclass(frozen=True)
class Page:
    """What the layout needs to frame a page's content."""

    content: str  # the file in static/ with the sections of its <main>
    title: str
    script: str  # its module in static/
    state: str = ""  # the <body> attribute its script keeps, with its first value: tests and styles wait on it
    log: bool = False  # the connection log after its sections


PAGES = {
    "/": Page("index.html", "wyoming-wis console", "console.js"),
    "/rtc": Page("rtc.html", "wyoming-wis: press to talk", "rtc.js", 'data-rtc="idle"', log=True),
    "/realtime": Page(
        "realtime.html", "wyoming-wis: realtime transcription", "realtime.js", 'data-realtime="idle"', log=True
    ),
}
ASSETS = frozenset(
    path.name
    for path in STATIC.iterdir()
    if path.is_file() and path.name not in {LAYOUT, LOG, *(page.content for page in PAGES.values())}
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
    """The page at `path` in the layout, its own link marked; and its ETag."""
    page, layout = PAGES[path], (STATIC / LAYOUT).read_text()
    own = f'<a href="{"./" if path == "/" else path.lstrip("/")}">'
    content = (STATIC / page.content).read_text() + ((STATIC / LOG).read_text() if page.log else "")
    parts = {
        own: own[:-1] + ' aria-current="page">',
        "<!-- title -->": page.title,
        "<!-- script -->": page.script,
        "<!-- state -->": f" {page.state}" if page.state else "",
        "<!-- main -->\n": content,
    }
    for mark, part in parts.items():
        if layout.count(mark) != 1:
            raise RuntimeError(f"{LAYOUT} lacks {mark!r} or has it twice: the package is damaged")
        layout = layout.replace(mark, part)
    body = layout.encode()
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
