"""What the screens ask of the app, as a type: the screens name `AppHost`, not app.py's
TandemApp, so that the app can import its screens and no import runs back up to it."""

from __future__ import annotations

from typing import Protocol

from tandem.engine import GenerationConfig
from tandem.session.refs import PairRef
from tandem.ui.conversations import Conversation, ConversationStore
from tandem.ui.jobs import LoadedPair
from tandem.ui.settings import Settings


class AppHost(Protocol):
    """The app as the screens use it: its settings, the pair loaded (or loading), the saved
    chats; loading a pair, saving a chat, the config a generation runs with."""

    settings: Settings
    loaded: LoadedPair | None
    loading: PairRef | None
    conversations: ConversationStore

    def load_pair(self, ref: PairRef) -> bool:
        """Start loading `ref`; False if a load is already under way."""

    def save_conversation(self, conv: Conversation) -> None: ...

    def generation_config(self) -> GenerationConfig:
        """The settings as the engine will run them with the loaded pair."""

    def chat_busy(self) -> bool:
        """Whether the chat screen is generating."""
