"""Tandem's terminal app (Textual). It consumes the engine's typed events only; the engine
never imports Textual. See docs/tui.md for how the pieces fit together."""
