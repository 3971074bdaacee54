"""What `tandem serve` was started with, and the body-size limit it derives from the context."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tandem.session.options import Options


@dataclass(frozen=True)
class ServeSettings:
    """What `tandem serve` was started with."""

    model_id: str  # the name clients use (`model`), listed by /v1/models
    options: Options  # the server's options (its flags), which a request's fields override
    speculative: bool = True  # False: the target alone (--baseline)
    api_key: str | None = None
    max_waiting: int = 32
    spec: Any = None  # the catalog pair (its settings apply), when serving one
    host: str = "127.0.0.1"  # the address it listens on: which Host headers it answers to
    allowed_hosts: tuple[str, ...] = ()  # more names it answers to (--allow-host; "*": any)
    max_body: int | None = None  # bytes; None: body_limit(context)
    read_timeout_s: float = 30.0  # for a request to arrive, headers and body (run.py)
    max_connections: int | None = None  # None: connection_limit(max_waiting) (run.py)
    parallel: int = 1  # requests answered at once (--parallel; the models hold as many sequences)
    # Requests without a prompt_cache_key (or user) reuse no other request's cache (--private-cache).
    private_cache: bool = False


# A request body is refused past this many bytes per token of context, and never below the
# floor: a prompt that fills the context is a few characters a token (at most 6 bytes each as
# JSON escapes), so this leaves room for any real one while a hostile body is refused early.
BODY_BYTES_PER_TOKEN = 64
MIN_BODY_LIMIT = 4 * 2**20


def body_limit(context: int) -> int:
    return max(MIN_BODY_LIMIT, BODY_BYTES_PER_TOKEN * context)
