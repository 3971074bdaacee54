"""Running the API with uvicorn until Ctrl+C (or SIGTERM).

Stopping is quick by design: the signal cancels the running generation (it ends within a
round), refuses what waits in the queue with a 503, and gives open connections two seconds
to close before they are dropped. A second Ctrl+C stops at once.
"""

from __future__ import annotations

import errno
import logging
import signal
import socket
import sys
from collections.abc import Callable
from types import FrameType

import uvicorn

from app.engine import ModelPair, TandemError

from .api import ServeSettings, create_app
from .slot import Slot

# Open connections get this long to finish after a stop signal (the generation is cancelled
# first, so a streaming answer ends within a round): well inside the 3 s a user waits.
GRACE_S = 2.0


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, slot: Slot, on_ready: Callable[[], None]) -> None:
        super().__init__(config)
        self._slot = slot
        self._on_ready = on_ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._on_ready()

    def stop(self) -> None:
        """Stop as a signal would (callable from any thread)."""
        self._slot.shutdown()
        self.should_exit = True

    def stop_generating(self) -> None:
        """After serving: make sure no generation still runs, since the caller closes the
        models next (a cancelled one ends within a round)."""
        self._slot.shutdown()
        self._slot.join()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # uvicorn's own handler also re-raises the signal once it has stopped, which would end
        # the process before the models are closed and print a traceback; stopping is enough.
        self._slot.shutdown()
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
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=int(GRACE_S),
    )
    return _Server(config, app.state.slot, on_ready)


def serve(
    pair: ModelPair, settings: ServeSettings, sock: socket.socket, on_ready: Callable[[], None]
) -> None:
    """Serve on `sock` until Ctrl+C or SIGTERM."""
    _configure_log()
    make_server(pair, settings, on_ready).run(sockets=[sock])


def _configure_log() -> None:
    """One line per answer on standard error (see api.py's log)."""
    log = logging.getLogger("tandem.serve")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
