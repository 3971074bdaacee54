"""Tandem's speculative decoding engine on llama.cpp. No UI code lives here (no Textual)."""

from .chat_template import ChatMessage
from .compat import check_pair, compatibility_problems
from .config import DRAFT_MAX_LIMIT, DRAFTER_CHOICES, DrafterChoice, GenerationConfig, LoadOptions
from .errors import (
    ContextOverflowError,
    GenerationError,
    IncompatiblePairError,
    ModelFileError,
    ModelLoadError,
    TandemError,
)
from .events import (
    DoneEvent,
    Event,
    GenerationStats,
    Origin,
    Part,
    PartStats,
    PrefillEvent,
    RoundEvent,
    StartEvent,
    TokenEvent,
)
from .gguf_file import GGUFInfo, read_gguf
from .model import LoadedModel
from .pair import ChatPrompt, ModelPair
from .reasoning import ReasoningFormat, ReasoningSplit, Thinking
from .sampling import SamplerSettings

__all__ = [
    "DRAFTER_CHOICES",
    "DRAFT_MAX_LIMIT",
    "ChatMessage",
    "ChatPrompt",
    "ContextOverflowError",
    "DoneEvent",
    "DrafterChoice",
    "Event",
    "GGUFInfo",
    "GenerationConfig",
    "GenerationError",
    "GenerationStats",
    "IncompatiblePairError",
    "LoadOptions",
    "LoadedModel",
    "ModelFileError",
    "ModelLoadError",
    "ModelPair",
    "Origin",
    "Part",
    "PartStats",
    "PrefillEvent",
    "ReasoningFormat",
    "ReasoningSplit",
    "RoundEvent",
    "SamplerSettings",
    "StartEvent",
    "TandemError",
    "Thinking",
    "TokenEvent",
    "check_pair",
    "compatibility_problems",
    "read_gguf",
]
