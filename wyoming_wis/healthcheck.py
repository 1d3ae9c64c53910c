"""`python -m wyoming_wis.healthcheck`: exit 0 only when the Wyoming server answers `describe` with `info`.

An open port is not enough: Home Assistant needs `info` within a second, and the Wyoming port opens only
once the models are loaded, so this is the check that says the server is usable. The Docker image, the
Home Assistant add-on (health check and discovery) and docker-compose all run this one check.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from urllib.parse import urlparse

from wyoming.client import AsyncClient
from wyoming.info import Describe, Info

DEFAULT_URI = "tcp://127.0.0.1:10500"


def default_uri(environ: Mapping[str, str] = os.environ) -> str:
    """The first tcp:// URI of WIS_URI (as the server reads it), with a wildcard host made local."""
    for uri in environ.get("WIS_URI", "").split(","):
        parsed = urlparse(uri.strip())
        if parsed.scheme == "tcp" and parsed.port:
            host = parsed.hostname or ""
            host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
            return f"tcp://{host}:{parsed.port}"
    return DEFAULT_URI


async def check(uri: str, timeout: float) -> str | None:
    """None when `uri` answers `describe` with `info` within `timeout` seconds, else why not."""

    async def ask() -> str | None:
        async with AsyncClient.from_uri(uri) as client:
            await client.write_event(Describe().event())
            while (event := await client.read_event()) is not None:
                if Info.is_type(event.type):
                    return None
            return "connection closed without info"

    try:
        return await asyncio.wait_for(ask(), timeout)
    except TimeoutError:
        return f"no info within {timeout:g} s"
    except OSError as err:
        return str(err) or type(err).__name__


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m wyoming_wis.healthcheck", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--uri", default=None, help=f"Wyoming server to ask (default: from WIS_URI, else {DEFAULT_URI})"
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="Seconds to wait for info (default: 5)")
    args = parser.parse_args(argv)
    uri = args.uri or default_uri()
    problem = asyncio.run(check(uri, args.timeout))
    if problem is not None:
        sys.exit(f"unhealthy: {uri}: {problem}")
    print(f"healthy: {uri}")


if __name__ == "__main__":
    main()
