"""Running the API with uvicorn until Ctrl+C (or SIGTERM).

Stopping is quick by design: the signal cancels the running generation (it ends within a
round) and the prompts being built, refuses what waits in the queue (and requests whose body is
still arriving) with a 503, and gives open connections two seconds to close before they are
dropped. A second Ctrl+C stops at once. The models are closed only after the generation's
thread and every prompt build's have ended: nothing can use them once they are freed.

Connections are bounded (_Protocol): a request must arrive, headers and body, within
`read_timeout_s` of its first byte (408 otherwise: a client sending a byte a second cannot hold
a connection), and past `max_connections` open at once a new one gets a 503 and is closed.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import signal
import socket
import sys
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from tandem.engine import TandemError

from .api import ServeSettings, create_app
from .errors import ApiError
from .prompts import PromptBuilds
from .slot import Slot

if TYPE_CHECKING:
    from tandem.engine import ModelPair

# Open connections get this long to finish after a stop signal (the generation is cancelled
# first, so a streaming answer ends within a round): well inside the 3 s a user waits.
GRACE_S = 2.0


# Connections open at once, beyond the queue's requests (and the one being answered): room for
# health checks and clients that keep a connection between requests.
SPARE_CONNECTIONS = 64


def connection_limit(max_waiting: int) -> int:
    return max_waiting + 1 + SPARE_CONNECTIONS


def _raw_error(status: int, error: ApiError) -> bytes:
    """A whole HTTP response, for a connection that h11 has not parsed a request on."""
    body = json.dumps(error.body()).encode()
    reason = {408: "Request Timeout", 503: "Service Unavailable"}[status]
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class _Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 connection with the two bounds the module's docstring describes.

    A subclass, because uvicorn's supported options (0.54: `limit_concurrency`,
    `timeout_keep_alive`, `h11_max_incomplete_event_size`...) bound idle connections and header
    sizes but not how long a request may take to arrive: a client trickling a byte a second
    would hold its connection forever. tests/server/test_serve_hostile.py fails the day
    uvicorn's internals used here change."""

    read_timeout_s = 30.0
    max_connections = 64

    _read_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            error = ApiError(
                503,
                f"the server has {self.max_connections} connections open, the most it keeps; retry shortly",
                type="server_error",
                code="too_many_connections",
            )
            transport.write(_raw_error(503, error))
            transport.close()
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._read_timer is None and self.conn.their_state is h11.IDLE:
            self._arm()  # the first bytes of a request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):  # all of the request is here
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._read_timer = self.loop.call_later(self.read_timeout_s, self._timed_out)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _timed_out(self) -> None:
        self._read_timer = None
        if self.transport.is_closing() or self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
            return
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):  # nothing answered yet
            error = ApiError(
                408,
                f"the request did not arrive within {self.read_timeout_s:g} s; send it at once",
                code="request_timeout",
            )
            self.transport.write(_raw_error(408, error))
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True  # what the app still sends is dropped
            self.cycle.message_event.set()
        self.transport.close()


class _Server(uvicorn.Server):
    def __init__(
        self, config: uvicorn.Config, slot: Slot, prompts: PromptBuilds, on_ready: Callable[[], None]
    ) -> None:
        super().__init__(config)
        self._slot = slot
        self._prompts = prompts
        self._on_ready = on_ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # Ready means ready: the batched engine times its decodes before it answers (seconds),
        # and /health says ok only after; a stop signal meanwhile ends that at once.
        await asyncio.to_thread(self._slot.runner.ready.wait)
        if self.should_exit:  # (stopped meanwhile: it never listened, nothing to shut down)
            return
        await super().startup(sockets)
        if self.started:
            self._on_ready()

    def _stop_work(self) -> None:
        self._slot.shutdown()
        self._prompts.stop()

    def stop(self) -> None:
        """Stop as a signal would (callable from any thread)."""
        self._stop_work()
        self.should_exit = True

    def stop_generating(self) -> None:
        """After serving: make sure no generation and no prompt build still runs, since the
        caller closes the models next (cancelled, each ends within a round or a prompt piece)."""
        self._stop_work()
        self._slot.join()
        self._prompts.join()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # uvicorn's own handler also re-raises the signal once it has stopped, which would end
        # the process before the models are closed and print a traceback; stopping is enough.
        self._stop_work()
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, opened here so that a port in use is one clear line."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise TandemError(f"cannot listen on host {host!r}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise TandemError(
                f"port {port} on {host} is already in use: stop what listens there, or pick another "
                "with --port"
            ) from None
        if exc.errno == errno.EACCES:
            raise TandemError(f"no permission to listen on port {port}: use a port above 1023") from None
        raise TandemError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


def make_server(
    pair: ModelPair, settings: ServeSettings, on_ready: Callable[[], None] = lambda: None
) -> _Server:
    """The server for `pair`; `run(sockets=[sock])` serves until a stop signal, or until
    `stop()` from another thread (the tests serve from a thread)."""
    app = create_app(pair, settings)
    protocol = type(
        "_Protocol",
        (_Protocol,),
        {
            "read_timeout_s": settings.read_timeout_s,
            "max_connections": settings.max_connections or connection_limit(settings.max_waiting),
        },
    )
    config = uvicorn.Config(
        app,
        http=protocol,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=int(GRACE_S),
    )
    served = app.state.served
    return _Server(config, served.slot, served.prompts, on_ready)


def serve(
    pair: ModelPair, settings: ServeSettings, sock: socket.socket, on_ready: Callable[[], None]
) -> None:
    """Serve on `sock` until Ctrl+C or SIGTERM; returns once nothing uses the models."""
    _configure_log()
    server = make_server(pair, settings, on_ready)
    try:
        server.run(sockets=[sock])
    finally:
        server.stop_generating()


def _configure_log() -> None:
    """One line per answer on standard error (see api.py's log)."""
    log = logging.getLogger("tandem.serve")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
