"""What `tandem serve` checks before a route runs (ASGI middleware around the whole app).

* The Host header (HostCheck): after a DNS rebinding, a web page in the user's browser can send
  requests to a server on this machine under the page's own host name, and read the answers.
  The server answers only to names that mean this machine: bound to loopback (the default),
  localhost and loopback addresses; bound to another address, also any address literal (a
  browser sends one only when it connected to that address itself), this machine's host name,
  and the names given with --allow-host (a reverse proxy's, or `*` for any).
* The body (BodyGuard): refused with a 413 beyond a limit, by its Content-Length before
  anything of it is kept, or as it arrives for a body sent without one (chunked); never kept
  past the limit. Many clients read the answer only once they have sent the whole body (Python's
  http.client): a connection closed on unread data is reset by the kernel, and such a client
  would never see the 413. So the refusal is sent at once, then up to DRAIN_BYTES more of the
  body (for at most DRAIN_SECONDS) are read and dropped before the connection closes. A body
  still arriving when the server stops is answered with a 503 at once, rather than left to the
  shutdown's grace period and then cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import socket
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import ApiError, quoted
from .stopping import Stopping


def loopback_host(host: str) -> bool:
    """Whether `host` (a name or an address, as given to --host) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _name_of(header: str) -> str:
    """The host part of a Host header ("name", "name:port", "[v6]:port"), lowercased."""
    host = header.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name.split("%", 1)[0])  # (an IPv6 zone: fe80::1%eth0)
    except ValueError:
        return False
    return True


def _machine_names() -> set[str]:
    names = {socket.gethostname().lower()}
    with contextlib.suppress(OSError):  # (getfqdn asks the resolver; nothing to add if it cannot)
        names.add(socket.getfqdn().lower())
    names |= {f"{name.split('.')[0]}.local" for name in list(names)}  # the mDNS name
    return {name.rstrip(".") for name in names if name}


class HostCheck:
    """Which Host headers the server answers to, from the address it listens on."""

    def __init__(self, bind_host: str, allowed: Iterable[str] = ()) -> None:
        extra = {_name_of(a) for a in allowed if a.strip()}
        self.any = "*" in extra
        self.loopback = loopback_host(bind_host)
        self.bind_host = bind_host
        self.names = {"localhost"} | extra
        if not self.loopback:
            self.names |= _machine_names()

    def allows(self, header: str | None) -> bool:
        if header is None or self.any:
            return True  # (an HTTP/1.0 client may send none; browsers always send one)
        name = _name_of(header)
        if name in self.names or name.endswith(".localhost"):
            return True
        if not _is_address(name):
            return False
        # An address literal: a rebinding page's requests carry its host name, never one.
        return not self.loopback or ipaddress.ip_address(name.split("%", 1)[0]).is_loopback

    def refusal(self, header: str) -> ApiError:
        name = quoted(_name_of(header))
        where = (
            "localhost and loopback addresses, as it listens on this machine only"
            if self.loopback
            else "this machine's names and addresses"
        )
        return ApiError(
            403,
            f"tandem serve does not answer to the host name '{name}' (a guard against DNS rebinding "
            f"attacks from web pages): it answers to {where}; to reach it under this name, start it "
            f"with --allow-host {name}",
            type="permission_error",
            code="host_not_allowed",
        )


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


class HostGuard:
    def __init__(self, app: ASGIApp, check: HostCheck) -> None:
        self.app = app
        self.check = check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = _header(scope, b"host")
            if not self.check.allows(host):
                assert host is not None
                await self.check.refusal(host).response()(scope, receive, send)
                return
        await self.app(scope, receive, send)


class KeyGuard:
    """The API key, when the server has one: every `/v1/` request must carry it as
    `Authorization: Bearer KEY`. A plain ASGI wrapper (not Starlette's BaseHTTPMiddleware, which
    relays every streamed chunk through a memory stream and a task of its own: a cost per token)."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self.expected = f"Bearer {key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and str(scope.get("path", "")).startswith("/v1/"):
            given = (_header(scope, b"authorization") or "").encode("latin-1")
            if not hmac.compare_digest(given, self.expected):
                refusal = ApiError(
                    401,
                    "missing or wrong API key: send the key tandem serve was started with "
                    "(--api-key) as 'Authorization: Bearer KEY'",
                    code="invalid_api_key",
                )
                await refusal.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)


def too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        f"the request body is larger than this server's limit of {limit / 2**20:.1f} MiB, far more "
        "than a prompt that fits its context needs; send less (the limit is tandem serve --max-body)",
        code="request_too_large",
    )


def _stopping_error() -> ApiError:
    return ApiError(
        503,
        "the server is shutting down; the request was not read",
        type="server_error",
        code="shutting_down",
    )


# What a refused body may still cost before its connection closes: a client sending 120 MB
# over a local link takes a fraction of a second; a gigabit link moves 256 MiB in about 2 s.
DRAIN_BYTES = 256 << 20
DRAIN_SECONDS = 5.0


class BodyGuard:
    def __init__(self, app: ASGIApp, limit: int, stopping: Stopping) -> None:
        self.app = app
        self.limit = limit
        self.stopping = stopping

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = _header(scope, b"content-length")
        if length is not None and length.strip().isdigit() and int(length) > self.limit:
            await _refuse(too_large(self.limit), receive, send, self.stopping)
            return
        received = 0
        reading = True  # until the body has all arrived
        answered = False  # with our own error: what the app sends then is dropped
        started = False

        async def answer(error: ApiError, *, drain: bool = True) -> Message:
            nonlocal answered
            answered = True
            if not started:
                await _refuse(error, receive, send, self.stopping, drain=drain and reading)
            return {"type": "http.disconnect"}  # what the app sees: the client went away

        async def guarded_receive() -> Message:
            nonlocal received, reading
            if answered:
                return {"type": "http.disconnect"}
            if not reading:
                return await receive()
            message = await _unless_stopping(receive, self.stopping)
            if message is None:
                return await answer(_stopping_error(), drain=False)
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                reading = bool(message.get("more_body", False))
                if received > self.limit:
                    return await answer(too_large(self.limit))
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if answered:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, guarded_receive, guarded_send)


async def _refuse(
    error: ApiError, receive: Receive, send: Send, stopping: Stopping, *, drain: bool = True
) -> None:
    """Send the error's response, closing the connection; with `drain`, first read and drop
    what the client still sends of its body (a bounded amount), so that the close does not
    reset the connection before the client has read the answer."""
    response = error.response()
    response.headers["connection"] = "close"
    await send(
        {"type": "http.response.start", "status": response.status_code, "headers": response.raw_headers}
    )
    await send({"type": "http.response.body", "body": response.body, "more_body": drain})
    if not drain:
        return
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(_discard(receive, DRAIN_BYTES, stopping), DRAIN_SECONDS)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _discard(receive: Receive, most: int, stopping: Stopping) -> None:
    """Read and drop the request's body until it ends, `most` bytes have come, the client
    leaves or the server stops."""
    read = 0
    while read < most:
        message = await _unless_stopping(receive, stopping)
        if message is None or message["type"] != "http.request":
            return
        read += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


async def _unless_stopping(receive: Receive, stopping: Stopping) -> Message | None:
    """The next message, or None if the server starts stopping first."""
    if stopping.is_set():
        return None
    read = asyncio.ensure_future(receive())
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({read, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not read.done():
            read.cancel()
    if read.done() and not read.cancelled():
        return read.result()
    return None
