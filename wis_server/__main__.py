"""`wyoming-wis`: read the settings, keep everything local, then serve (serve.py)."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence
from urllib.parse import urlparse

from wyoming_wis import memory, offline
from wyoming_wis.config import Settings
from wyoming_wis.errors import StartupError


def main(argv: Sequence[str] | None = None) -> None:
    memory.limit_heaps()  # before any worker thread takes a heap of its own
    settings = Settings.from_args(argv)
    offline.keep_local(settings.core.allow_download)  # before the libraries that read its switches are imported
    logging.basicConfig(
        level=logging.DEBUG if settings.debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,  # stdout may be the Wyoming stream (stdio://)
    )
    if not settings.debug:
        logging.getLogger("faster_whisper").setLevel(logging.WARNING)  # it logs every request
    for uri in settings.wyoming.uri:
        if urlparse(uri).scheme not in ("tcp", "unix", "stdio"):
            sys.exit(f"wyoming-wis: --uri {uri!r}: use tcp://HOST:PORT, unix://PATH or stdio://")
    from .serve import serve  # only now, after keep_local: it imports the models' libraries

    try:
        asyncio.run(serve(settings))
    except StartupError as err:
        sys.exit(f"wyoming-wis: {err}")
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
