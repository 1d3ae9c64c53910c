"""The aiohttp application: one per process, on the same Core as the Wyoming server.

Routes come in tables, one per area (`openai_*`, `willow`, `wake`, `operations`). Decoding and
encoding audio run in a bounded pool of worker threads, never on the event loop. Other
frontends served over HTTP (`rtc`) are mounted on this application by the composition root
(wis_server/serve.py); this package knows nothing of them.
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from wyoming_wis.config import HttpSettings
from wyoming_wis.core import Core
from wyoming_wis.memory import cap_receive_buffers

from . import (
    bodies,
    connections,
    cors,
    docs,
    limits,
    openai_models,
    openai_realtime,
    openai_speech,
    openai_transcriptions,
    openapi,
    operations,
    origin,
    pages,
    security,
    wake,
    willow,
)
from .errors import openai_errors
from .state import CODEC_THREADS, LOADED, Loaded

_LOGGER = logging.getLogger(__name__)
SHUTDOWN_SECONDS = 10.0


def make_app(
    settings: HttpSettings,
    core: Core | None = None,
    *,
    send_timeout: float,
    max_text_chars: int,
    data_dir: Path,
) -> web.Application:
    """The HTTP frontend; it answers 503 until it has a `core` (see `loaded`).

    Besides its own settings it takes what it shares with other groups: --send-timeout (Wyoming's too),
    --max-text-chars (the core's, for the API's description) and the first --data-dir (where Willow's recording
    is kept). Uploads larger than --max-upload-mb are refused with 413. A bad --ssl-cert/--ssl-key is a
    StartupError here, before any model loads.
    """
    app = web.Application(client_max_size=int(settings.max_upload_mb * 1024 * 1024), middlewares=[openai_errors])
    app[LOADED] = Loaded(core)
    app[CODEC_THREADS] = ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="http-codec")
    operations.count_requests(app)  # the outermost middleware, whatever others are added later
    # inside openai_errors, before anything reads the body or asks for a key: a web page's requests by a name that
    # is not this server's, or from another origin, are refused
    origin.setup(app, settings)
    connections.setup(app, settings)
    # inside openai_errors: a stalled body is a 408, a long wait a 429, in the envelope
    limits.setup(app, settings, send_timeout)
    bodies.setup(app)  # a request's temporary files are closed when it ends
    openapi.setup(app, max_text_chars)
    app.add_routes(openai_transcriptions.routes)
    app.add_routes(openai_speech.routes)
    app.add_routes(openai_models.routes)
    openai_realtime.setup(app, settings.realtime_max_sessions, settings.realtime_idle_timeout)
    app.add_routes(openai_realtime.routes)
    app.add_routes(operations.routes)
    app[willow.RECORDING] = data_dir / willow.SAVED_AUDIO
    app.add_routes(willow.routes)
    app.add_routes(wake.routes)
    app.add_routes(docs.routes)
    app.add_routes(pages.routes)
    cors.setup(app, settings.cors_origin)  # before authentication: a browser's preflight carries no key
    security.setup(app, settings)
    app[willow.KEEPS_RECORDING] = app[security.CREDENTIALS].required  # what a household said is kept behind a key
    app.on_cleanup.append(_stop_threads)
    return app


async def _stop_threads(app: web.Application) -> None:
    """Drop queued codec work and wait for the running piece, so no codec thread outlives the app."""
    await asyncio.to_thread(app[CODEC_THREADS].shutdown, wait=True, cancel_futures=True)


def loaded(app: web.Application, core: Core) -> None:
    """The models are loaded: from now on requests are served."""
    app[LOADED].core = core


class _ClientFaults(logging.Filter):
    """aiohttp logs each malformed HTTP request (a NUL in a header, a broken request line: the client's fault,
    answered 400) as an ERROR with a traceback. Any client could fill the log that way: those go to DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        err = record.exc_info[1] if record.exc_info else None
        if not (isinstance(err, HttpProcessingError) and 400 <= (err.code or 0) < 500):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        record.msg, record.args = "%s (%s)", (record.getMessage(), str(err).replace("\n", " "))
        record.exc_info = record.exc_text = None
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


_CLIENT_FAULTS = _ClientFaults()


async def start(app: web.Application, host: str, port: int) -> web.AppRunner:
    """Serve `app` until the returned runner is cleaned up."""
    logging.getLogger("aiohttp.server").addFilter(_CLIENT_FAULTS)
    # On SIGTERM, requests in progress (a speech stream) get SHUTDOWN_SECONDS to finish.
    runner = connections.Runner(app, access_log=None, shutdown_timeout=SHUTDOWN_SECONDS, **limits.server_options(app))
    await runner.setup()
    tls = app.get(security.SSL_CONTEXT)
    site = web.TCPSite(runner, host, port, ssl_context=tls)
    await site.start()
    cap_receive_buffers(site._server.sockets if site._server else ())  # aiohttp names no accessor for them
    _LOGGER.info("HTTP API listening on %s://%s:%s", "https" if tls else "http", host, port)
    return runner
