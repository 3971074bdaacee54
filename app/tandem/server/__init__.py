"""`tandem serve`: the speculative engine behind an OpenAI-compatible HTTP API."""

from .api import ServeSettings, create_app
from .guards import loopback_host

__all__ = ["ServeSettings", "create_app", "loopback_host"]
