"""GET /api/openapi.json describes every route, and /api/docs shows it from the package, with no network."""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import subprocess
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest
from conftest import MAX_TEXT_CHARS
from helpers import CORPUS, Server
from openapi_schema_validator import OAS30Validator
from openapi_spec_validator import validate

from http_api import openapi
from wis_server.serve import http_app
from wyoming_wis.config import Settings

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"  # ./run.sh test installs Debian's


@pytest.fixture(scope="module")
def spec(server: Server) -> dict[str, Any]:
    response = httpx.get(server.http_url + "/api/openapi.json")
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
    return response.json()


def test_the_description_is_valid_openapi_3(spec: dict[str, Any]) -> None:
    validate(spec)  # raises on any breach of the OpenAPI 3.0 schema
    assert spec["openapi"].startswith("3.0") and "security" not in spec  # no credentials on the shared server


def test_every_registered_route_is_described_and_nothing_else() -> None:
    app = http_app(Settings.from_args([], environ={}))
    registered = openapi.registered(app)
    undescribed = {
        (method, path)
        for method, path in registered
        if (method, path) not in openapi.OPERATIONS and not (method == "head" and ("get", path) in openapi.OPERATIONS)
    }
    assert not undescribed, f"routes missing from http_api/openapi.py OPERATIONS: {sorted(undescribed)}"
    published = {(method, path) for path, item in openapi.document(app)["paths"].items() for method in item}
    assert published <= registered
    assert {(m, p) for m, p in registered if m != "head"} <= published


def test_the_served_description_is_the_running_servers(spec: dict[str, Any]) -> None:
    app = http_app(Settings.from_args(["--max-text-chars", str(MAX_TEXT_CHARS)], environ={}))  # as the server's
    assert spec == openapi.document(app)
    assert {"/v1/audio/transcriptions", "/api/willow", "/health", "/api/docs"} <= spec["paths"].keys()
    multipart = spec["paths"]["/v1/audio/transcriptions"]["post"]["requestBody"]["content"]["multipart/form-data"]
    assert multipart["schema"] == {"$ref": "#/components/schemas/TranscriptionRequest"}
    assert spec["components"]["schemas"]["TranscriptionRequest"]["properties"]["file"]["format"] == "binary"


def conforms(spec: dict[str, Any], schema: dict[str, Any], instance: object) -> None:
    """Check a real answer against a schema of the description ($refs resolved within it)."""
    OAS30Validator({**schema, "components": spec["components"]}).validate(instance)


def test_real_answers_match_their_schemas(server: Server, spec: dict[str, Any]) -> None:
    def ok_schema(method: str, path: str) -> dict[str, Any]:
        return spec["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"]

    base = server.http_url
    conforms(spec, ok_schema("get", "/health"), httpx.get(base + "/health").json())
    conforms(spec, ok_schema("get", "/v1/models"), httpx.get(base + "/v1/models").json())
    conforms(spec, ok_schema("get", "/v1/audio/voices"), httpx.get(base + "/v1/audio/voices").json())
    with (CORPUS / "LJ001-0004.flac").open("rb") as file:
        answer = httpx.post(base + "/api/asr?stats=true", files={"audio_file": file}, timeout=60).json()
    conforms(spec, ok_schema("post", "/api/asr"), answer)
    # Errors: the envelope the description promises, for each status it names.
    missing = httpx.get(base + "/v1/models/nope")
    ref = spec["paths"]["/v1/models/{model_id}"]["get"]["responses"]["404"]["$ref"]
    error_schema = spec["components"]["responses"][ref.rsplit("/", 1)[1]]["content"]["application/json"]["schema"]
    assert missing.status_code == 404
    conforms(spec, error_schema, missing.json())
    with pytest.raises(Exception, match="required"):
        conforms(spec, error_schema, {"error": {"message": "no type, param or code"}})


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]


def test_the_docs_page_loads_only_files_from_this_server(server: Server) -> None:
    page = httpx.get(server.http_url + "/api/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    links = _Links()
    links.feed(page.text)
    assert len(links.urls) >= 3
    for url in links.urls:
        assert not re.match(r"^([a-z]+:)?//", url), f"{url} is not served by this server"
        asset = httpx.get(str(page.url.join(url)))
        assert asset.status_code == 200 and len(asset.content) > 100, url
    assert '"openapi.json"' in page.text
    assert "validatorUrl: null" in page.text  # or Swagger UI asks an online validator about the description
    # Only the files the page needs, not everything in the package (its sample page points at the pet store).
    for name in ("swagger-initializer.js", "..%2F__init__.py", "nope.js"):
        response = httpx.get(server.http_url + "/api/docs/" + name)
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found", name


def test_the_docs_page_runs_only_its_own_scripts(server: Server) -> None:
    """A Content-Security-Policy: files from this server, and of inline scripts only the page's own, by its hash
    (the browser test below shows that Swagger UI still works under it)."""
    page = httpx.get(server.http_url + "/api/docs")
    policy = dict(directive.strip().split(" ", 1) for directive in page.headers["content-security-policy"].split(";"))
    assert policy["default-src"] == "'self'" and policy["object-src"] == "'none'", policy
    assert "unsafe-inline" not in page.headers["content-security-policy"]
    assert "unsafe-eval" not in page.headers["content-security-policy"]
    inline = re.findall(r"<script>(.*?)</script>", page.text, re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(inline[0].encode()).digest()).decode()
    assert len(inline) == 1 and policy["script-src"] == f"'self' 'sha256-{digest}'", policy
    assert page.headers["x-content-type-options"] == "nosniff"


@pytest.mark.browser
def test_the_docs_page_shows_every_operation_in_a_browser(server: Server, spec: dict[str, Any]) -> None:
    """Headless Chromium with every host but this one unresolvable: the page renders from the server alone."""
    assert shutil.which(CHROMIUM), "this test needs Debian's chromium, which ./run.sh test installs"
    dom = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            f"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE {server.host}",
            "--virtual-time-budget=15000",
            "--dump-dom",
            server.http_url + "/api/docs",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    ).stdout
    shown = set(re.findall(r'opblock-summary-method">(\w+)</span>.*?data-path="([^"]+)"', dom))
    described = {(method.upper(), path) for path, item in spec["paths"].items() for method in item}
    assert shown == described, dom[:2000]
