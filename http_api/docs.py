"""GET /api/openapi.json and GET /api/docs: the API's description and Swagger UI on it, served from the package.

Swagger UI's files come from the `swagger-ui-bundle` package, so the page works with no
network beyond this server: no CDN, and no call to Swagger's online validator.
"""

from __future__ import annotations

import base64
import hashlib

from aiohttp import web
from swagger_ui_bundle import swagger_ui_path

from wyoming_wis.values import quote

from . import openapi, pages
from .errors import ApiError

routes = web.RouteTableDef()
ASSETS = frozenset({"swagger-ui.css", "swagger-ui-bundle.js", "favicon-32x32.png", "favicon-16x16.png"})
ASSET_MAX_AGE = 86400  # seconds; the files change only with the package

# Swagger UI's start, inline in the page, and allowed by its hash alone: the Content-Security-Policy runs no other
# inline script. Relative URLs: /api/openapi.json and /api/docs/swagger-ui.css, also behind a proxy that adds a
# path prefix.
START = """
    window.ui = SwaggerUIBundle({
      url: "openapi.json",
      dom_id: "#swagger-ui",
      deepLinking: true,
      validatorUrl: null,
      presets: [SwaggerUIBundle.presets.apis],
      layout: "BaseLayout",
    });
  """
PAGE = (
    """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>wyoming-wis API</title>
  <link rel="stylesheet" href="docs/swagger-ui.css">
  <link rel="icon" type="image/png" href="docs/favicon-32x32.png" sizes="32x32">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="docs/swagger-ui-bundle.js"></script>
  <script>"""
    + START
    + """</script>
</body>
</html>
"""
)
# The pages' policy, and: Swagger UI's stylesheet draws its icons from data: URLs.
HEADERS = pages.page_headers(
    script_src=f"'self' 'sha256-{base64.b64encode(hashlib.sha256(START.encode()).digest()).decode()}'",
    img_src="'self' data:",
)


@routes.get("/api/openapi.json")
async def openapi_json(request: web.Request) -> web.Response:
    return web.json_response(openapi.document(request.app))


@routes.get("/api/docs")
async def page(_: web.Request) -> web.Response:
    return web.Response(text=PAGE, content_type="text/html", headers=HEADERS)


@routes.get("/api/docs/{asset}")
async def asset(request: web.Request) -> web.FileResponse:
    name = request.match_info["asset"]
    if name not in ASSETS:
        raise ApiError(404, f"No documentation file {quote(name)}", None, "not_found")
    return web.FileResponse(swagger_ui_path / name, headers={"Cache-Control": f"public, max-age={ASSET_MAX_AGE}"})
