"""What a request must be before any route runs: refused (403) when a web page on another site
could have sent it (``Guard``: DNS rebinding through Host, cross-site requests through Origin),
and read only as JSON within a size limit and a deadline (``read_json``, ``read_body``: 415,
413, 408). The answers are in OpenAI's error shape (``error_response``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .api import ApiError

log = logging.getLogger(__name__)

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


class ClientGone(Exception):
    """The client disconnected before its reply was ready."""


def error_response(e: ApiError, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(e.body, e.status, headers=headers)


async def read_json(request: Request, limit: int, timeout_s: float) -> Any:
    """The body as JSON. Only sent as JSON: any other type is one a web page may POST from
    another site without asking first (a CORS "simple request"), so it is refused (415)."""
    kind = request.headers.get("content-type", "")
    if kind.partition(";")[0].strip().lower() != "application/json":
        raise ApiError(
            415,
            f"the request body must be JSON, sent with 'Content-Type: application/json' (got {kind[:100]!r})",
            code="unsupported_media_type",
        )
    body = await read_body(request, limit, timeout_s)
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise ApiError(400, f"the request body is not valid JSON: {e}", code="invalid_json") from None


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The body, refused past ``limit`` bytes whether or not Content-Length says so, and past
    ``timeout_s`` seconds in all (a client sending a byte a second would pass any per-read
    timeout); ClientGone if the client leaves before its end."""
    too_big = ApiError(413, f"the request body is larger than {limit} bytes", code="request_too_large")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_big
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async for part in request.stream():
                body += part
                if len(body) > limit:
                    raise too_big
    except TimeoutError:
        raise ApiError(408, f"the request body did not arrive within {timeout_s:g} s", code="request_timeout") from None
    except ClientDisconnect:
        raise ClientGone("before its request had arrived") from None
    return bytes(body)


def host_name(value: str) -> str:
    """The name in a Host header, an origin or a --host: lower case, no port, no IPv6
    brackets ('Example.com:8080' -> 'example.com', '[::1]:8080' -> '::1'); '' if malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        name, bracket, _ = value[1:].partition("]")
        return name if bracket else ""
    if value.count(":") > 1:  # a bare IPv6 address (--host ::1)
        return value
    return value.partition(":")[0]


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Names:
    """The names clients may reach this server by. Any port is allowed with them: a port
    forward (ssh -L 9000:localhost:8080) changes it, and DNS rebinding works through the name."""

    names: frozenset[str]
    any_ip: bool  # bound to every address (0.0.0.0, ::): any of the machine's, so any IP

    @classmethod
    def of(cls, host: str, allowed: tuple[str, ...] = ()) -> Names:
        bound = host_name(host)
        wildcard = bound in ("", "0.0.0.0", "::")
        return cls(LOOPBACK_NAMES | {bound} | {host_name(n) for n in allowed}, wildcard)

    def allows(self, name: str) -> bool:
        """With ``any_ip``, any IP address too: an address cannot be rebound (that takes a name
        whose DNS the attacker answers for)."""
        return bool(name) and (name in self.names or (self.any_ip and is_ip(name)))


class Guard:
    """Refuses, before any route runs (403 in OpenAI's error shape), what a web page on another
    site could send:

    - DNS rebinding: a page whose own name now resolves to 127.0.0.1 calls this server as its
      own origin, so CORS never applies; its name is in Host, and only ``Names`` pass.
    - cross-site requests: a page anywhere can POST without asking first (a CORS "simple
      request") and start a generation; the browser names the page in Origin, and only this
      server's own names and the --cors origins pass (``read_json`` also refuses non-JSON).

    Clients that are not browsers (editors, curl, the openai library) send the name they
    dialled and no Origin, so they pass.
    """

    def __init__(self, app: ASGIApp, names: Names, origins: frozenset[str]) -> None:
        self.app = app
        self.names = names
        self.origins = origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self.refusal(Headers(scope=scope)) if scope["type"] == "http" else None
        if refusal is None:
            await self.app(scope, receive, send)
            return
        log.warning("refused %s %s: %s", scope["method"], scope["path"], refusal.message)
        await error_response(refusal)(scope, receive, send)

    def refusal(self, headers: Headers) -> ApiError | None:
        host = headers.get("host", "")
        if not self.names.allows(host_name(host)):
            return ApiError(
                403,
                f"the Host header {host[:100]!r} is not a name of this server (a web page may be "
                f"trying DNS rebinding); if clients reach it by that name, restart it with "
                f"--allow-host {host_name(host) or 'NAME'}",
                code="host_not_allowed",
            )
        origin = headers.get("origin")
        if origin is not None and not self.origin_allowed(origin):
            return ApiError(
                403,
                f"requests from web pages on {origin[:100]!r} are refused; to let that page call the "
                f"API, restart the server with --cors {origin[:100]}",
                code="origin_not_allowed",
            )
        return None

    def origin_allowed(self, origin: str) -> bool:
        """This server's own site (any port: it serves no pages), or one --cors allows."""
        scheme, sep, authority = origin.partition("://")
        same_site = bool(sep) and scheme in ("http", "https") and self.names.allows(host_name(authority))
        return same_site or origin in self.origins or "*" in self.origins
