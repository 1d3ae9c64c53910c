"""Errors in OpenAI's envelope, `{"error": {"message", "type", "param", "code"}}`, with the right status.

Every error an HTTP client sees goes through here: the core's WisError codes,
aiohttp's own (unknown route, body too large) and the fields this frontend checks.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import LooseHeaders
from multidict import CIMultiDict

from openai_audio import errors as openai_errors_module
from wyoming_wis.errors import Busy, WisError
from wyoming_wis.values import quote

_LOGGER = logging.getLogger(__name__)
RETRY_AFTER_SECONDS = 1
CLIENT_GONE = 499  # nginx's status for a request the client abandoned; logged and counted, never received


class ApiError(Exception):
    """An answer other than success, in OpenAI's shape."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        *,
        headers: LooseHeaders | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = CIMultiDict(headers or {})

    @property
    def type(self) -> str:
        return openai_errors_module.error_type(self.status)

    def body(self) -> dict[str, object]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> web.Response:
        headers = CIMultiDict(self.headers)
        if self.status in (429, 503):
            headers.setdefault("Retry-After", str(RETRY_AFTER_SECONDS))
        return web.json_response(self.body(), status=self.status, headers=headers)

    @classmethod
    def from_wis(cls, err: WisError) -> ApiError:
        headers = {"Retry-After": str(max(1, math.ceil(err.retry_after)))} if isinstance(err, Busy) else None
        return cls(
            openai_errors_module.status(err.code),
            err.message,
            openai_errors_module.param(err.code),
            err.code,
            headers=headers,
        )


def bad_field(param: str, message: str) -> ApiError:
    """400 naming the field that is wrong."""
    return ApiError(400, message, param, "invalid_value")


@web.middleware
async def openai_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Turn every failure before the answer starts into the envelope; log the client's mistakes and what
    nobody expected."""
    try:
        return await handler(request)
    except ApiError as err:
        return answer(request, err)
    except WisError as err:
        return answer(request, ApiError.from_wis(err))
    except ConnectionResetError:  # the client left mid-request (a device that lost Wi-Fi): nobody to answer
        _LOGGER.debug("The client left during %s", described(request))
        return ApiError(CLIENT_GONE, "The client closed the connection", None, "client_gone").response()
    except web.HTTPException as err:
        if err.status < 400:
            raise
        param, code = "file" if err.status == 413 else None, err.reason.lower().replace(" ", "_")
        return answer(request, ApiError(err.status, err.text or err.reason, param, code))
    except Exception:
        _LOGGER.exception("Unexpected error in %s", described(request))
        return ApiError(500, "Internal error; see the server log", None, "internal_error").response()


def answer(request: web.Request, err: ApiError) -> web.Response:
    """The error's response; one the client caused is logged as a warning with its address."""
    if err.status < 500:
        _LOGGER.warning("%s from %s: %s %s", described(request), request.remote, err.status, err.message)
    return err.response()


def described(request: web.Request) -> str:
    """The request as a log line names it: its method and its path as sent (percent escapes kept: a `%0a` cannot
    start a line of its own), quoted and cut short."""
    return f"{request.method} {quote(request.rel_url.raw_path)}"
