"""What every route of one server shares (`Served`: the pair, the settings, the queue of
requests, the prompt builders) and the steps routes have in common: the model a request names
checked, a prompt built off the event loop, an answer queued and sent."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi import Request, Response

from tandem.engine import ChatTemplateError, ContextOverflowError, ReasoningSplit, TandemError
from tandem.session.drafting import drafts_itself
from tandem.session.options import Options
from tandem.session.runner import Runner

from .chunks import Answer, Kind
from .errors import ApiError, bad_request, quoted
from .prompts import PromptBuilds, StoppedBuilding
from .replies import disconnected, shutdown_error, streamed, whole
from .schema import ChatCompletionRequest, CompletionRequest
from .settings import ServeSettings
from .slot import Slot

if TYPE_CHECKING:
    from tandem.engine import ModelPair

log = logging.getLogger("tandem.serve")
T = TypeVar("T")


def make_slot(pair: ModelPair, settings: ServeSettings) -> Slot:
    """The runner's engine (session/runner.py) for `settings.parallel`; the kinds the batched
    engine leaves out, and a fallback to one request at a time, said in the log."""
    runner = Runner.open(pair, parallel=settings.parallel, speculative=settings.speculative, warn=log.warning)
    return Slot(runner, settings.max_waiting)


@dataclass
class Served:
    """One server's pair and what its routes share."""

    pair: ModelPair
    settings: ServeSettings
    slot: Slot
    prompts: PromptBuilds = field(default_factory=PromptBuilds)
    told: set[str] = field(default_factory=set)  # notes logged once per server

    @property
    def target_name(self) -> str:
        return self.pair.target.path.name

    def check_model(self, name: str | None) -> None:
        """A request's `model`: this server's id, or its target's file name (with or without
        .gguf); anything else is a 404 that says what is served."""
        target = self.target_name
        if name is None or name in (self.settings.model_id, target, target.removesuffix(".gguf")):
            return
        raise ApiError(
            404,
            f"model '{quoted(name)}' is not served here: this server serves "
            f"'{self.settings.model_id}' (GET /v1/models)",
            param="model",
            code="model_not_found",
        )

    def model_entry(self) -> dict[str, Any]:
        pair, settings = self.pair, self.settings
        draft = pair.draft_file.name if pair.draft_file is not None and settings.speculative else None
        return {
            "id": settings.model_id,
            "object": "model",
            "created": int(pair.target.path.stat().st_mtime),
            "owned_by": "tandem",
            "tandem": {
                "target": self.target_name,
                "draft": draft,
                # Whether the target's own draft heads (multi-token prediction) are loaded: the
                # mtp drafter (and auto) draft with them.
                "draft_heads": drafts_itself(pair),
                # The kinds its engine drafts with (auto ranks them): with several sequences,
                # those that draft for several.
                "drafters": self.slot.runner.kinds,
                "drafter": settings.options.drafter if settings.speculative else "",
                "speculative": settings.speculative,
                "context": pair.context_size,
            },
        }

    def tell_once(self, key: str, note: str) -> None:
        if key not in self.told:
            self.told.add(key)
            log.warning("%s", note)

    async def prompt(self, request: Request, build: Callable[[threading.Event], T], param: str) -> T:
        """Render and tokenize off the event loop (a long history takes milliseconds), stopped if
        the client leaves (ClientGone) or the server stops."""
        try:
            return await self.prompts.build(build, disconnected(request))
        except StoppedBuilding:
            raise shutdown_error() from None
        except ContextOverflowError as exc:  # refused by its length, before tokenizing all of it
            raise ApiError(400, str(exc), param=param, code="context_length_exceeded") from None
        except ChatTemplateError as exc:  # a template that fails on these messages
            hint = "send the text as a plain prompt to /v1/completions instead"
            raise bad_request(f"{exc.problem}; {hint}" if exc.hint else str(exc), param=param) from None
        except TandemError as exc:  # text that is not Unicode...
            raise bad_request(str(exc), param=param) from None

    async def answer(
        self,
        request: Request,
        kind: Kind,
        prompt: Sequence[int],
        options: Options,
        body: ChatCompletionRequest | CompletionRequest,
        reasoning: ReasoningSplit | None = None,
    ) -> Response:
        """The engine's checks now (not after waiting for the pair), a place in the queue, then
        the answer streamed or whole."""
        settings, slot = self.settings, self.slot
        if options.max_tokens is None:  # not asked for, here or by the server: until the context is full
            options = options.updated(max_tokens=self.pair.context_size)
        config = replace(options.generation_config(settings.spec), reasoning=reasoning)
        try:
            config = slot.prepare(prompt, config, speculative=settings.speculative)
        except ContextOverflowError as exc:
            param = "messages" if kind == "chat" else "prompt"
            raise ApiError(400, str(exc), param=param, code="context_length_exceeded") from None
        except TandemError as exc:
            raise bad_request(str(exc)) from None
        slot.admit()
        group = body.cache_group(settings.private_cache)
        gen = slot.start(prompt, config, speculative=settings.speculative, cache_group=group)
        frame = Answer(kind, settings.model_id)
        if body.stream:
            return streamed(gen, frame, body.include_usage)
        return await whole(request, gen, frame)


def served(request: Request) -> Served:
    """The routes' dependency: the server their app belongs to."""
    found = request.app.state.served
    assert isinstance(found, Served)
    return found
