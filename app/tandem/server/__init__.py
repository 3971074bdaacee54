"""`tandem serve`: the speculative engine behind an OpenAI-compatible HTTP API."""

from .api import ServeSettings, create_app

__all__ = ["ServeSettings", "create_app"]
