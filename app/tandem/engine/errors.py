"""Errors the engine raises for things a user can fix.

Each carries one sentence that says what is wrong and what to do; the CLI prints it as a
single line and the TUI shows it in a notification. Anything that is not a TandemError is a
bug in Tandem and keeps its traceback.
"""

from __future__ import annotations


class TandemError(Exception):
    """Base class: the message is meant for the user, as is."""


class ModelFileError(TandemError):
    """A GGUF file is missing, unreadable, not GGUF, truncated or of an unknown kind."""


class IncompatiblePairError(TandemError):
    """The draft cannot draft for the target (different tokenizers)."""


class ModelLoadError(TandemError):
    """llama.cpp could not load a model or create its context (memory, architecture...)."""


class ContextOverflowError(TandemError):
    """The prompt does not fit in the context window."""


class GenerationError(TandemError):
    """llama.cpp failed while decoding."""


class PromptCancelled(TandemError):
    """Building a prompt (rendering, tokenizing) was stopped by its caller's cancel event."""

    def __init__(self) -> None:
        super().__init__("building the prompt was cancelled")
