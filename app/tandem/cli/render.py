"""Terminal output for the CLI: tokens coloured by origin, the legend, the stats line.

Whether a stream takes colour, and which codes, is rich's call (`terminal`): a terminal or not,
NO_COLOR, TERM=dumb, the colour system; `--color always` / `never` override it. The codes are
rendered once and the tokens written with them directly: a token costs a string join, not a
rich render (its per-token time would show beside a GPU's decode).
"""

from __future__ import annotations

import time
from typing import Literal, TextIO

from rich.console import Console
from rich.style import Style
from rich.text import Text

from tandem.engine import AUTO_DRAFTER, GenerationStats, Origin, PartStats
from tandem.session.collect import Outcome

ColorChoice = Literal["auto", "always", "never"]

# Colours that read on dark and light terminals alike, as the app shows them.
STYLES = {
    Origin.DRAFT: Style(color="green"),  # the draft guessed it and the target agreed
    Origin.TARGET: Style(color="yellow"),  # the target's own token (correction)
    Origin.BONUS: Style(color="cyan"),  # the free extra token after a fully accepted run
}
DIM = Style(dim=True)  # a thinking model's reasoning

LABELS = {
    Origin.DRAFT: "draft accepted",
    Origin.TARGET: "target correction",
    Origin.BONUS: "bonus",
}


def terminal(out: TextIO, choice: ColorChoice = "auto") -> Console:
    """rich's console for `out`: colour where rich finds it takes colour ("auto": a terminal,
    NO_COLOR unset), always (a pipe too: the flag outranks NO_COLOR), or never."""
    force = {"auto": None, "always": True, "never": False}[choice]
    return Console(
        file=out, force_terminal=force, no_color={"auto": None, "always": False, "never": True}[choice]
    )


def codes(console: Console, style: Style) -> tuple[str, str]:
    """The escape codes `console` writes before and after text in `style` ("" where it takes
    no colour)."""
    with console.capture() as captured:
        console.print(Text("\0", style=style), end="", soft_wrap=True)
    before, _, after = captured.get().partition("\0")
    return before, after


class OriginCodes:
    """Each origin's codes on one console, plain and dimmed (the reasoning)."""

    def __init__(self, console: Console) -> None:
        self.before: dict[Origin, str] = {}
        self.dim: dict[Origin, str] = {}
        self.after = ""
        for origin, style in STYLES.items():
            self.before[origin], self.after = codes(console, style)
            self.dim[origin], _ = codes(console, DIM + style)

    def coloured(self, text: str, origin: Origin) -> str:
        return f"{self.before[origin]}{text}{self.after}" if text else text


class TokenWriter:
    """Streams an answer's text, coloured by origin, as a generation's outcome grows (see
    tandem.session.collect).

    A thinking model's reasoning goes to `reasoning_out` (standard error: standard output holds
    the answer alone, for a pipe or a file), dimmed, and the answer starts on a line of its own
    after it; `reasoning_out` None: the reasoning is not shown.

    Text is written after a round's tokens, but at most every FLUSH_S: a target-alone run makes
    a round per token, and a write to the terminal per token would cost the engine more than a
    token costs to compute on a GPU; text 30 ms late looks the same to a reader."""

    FLUSH_S = 0.03

    def __init__(self, out: TextIO, colours: OriginCodes, reasoning_out: TextIO | None = None) -> None:
        self.out = out
        self.reasoning_out = reasoning_out
        self._before = colours.before
        self._dim = colours.dim
        self._after = colours.after
        self._shown = 0  # tokens of the outcome written so far
        self._written = 0.0
        self._outcome: Outcome | None = None
        self._reasoned = False  # some reasoning was written (the answer then starts a new line)
        self._answered = False

    def __call__(self, outcome: Outcome) -> None:
        self._outcome = outcome
        now = time.perf_counter()
        if now - self._written >= self.FLUSH_S or outcome.done is not None:
            self.flush()
            self._written = now

    def flush(self) -> None:
        """Write out what is pending (also when a generation ends early: Ctrl+C, an error)."""
        if self._outcome is not None:
            tokens = self._outcome.tokens[self._shown :]
            before, after = self._before, self._after
            if self._answered or not any(t.reasoning for t in tokens):  # (the usual case)
                self._answer("".join(f"{before[t.origin]}{t.text}{after}" for t in tokens if t.text))
            else:
                for t in tokens:
                    if t.reasoning and self.reasoning_out is not None:
                        self.reasoning_out.write(f"{self._dim[t.origin]}{t.reasoning}{after}")
                        self._reasoned = True
                    if t.text:
                        self._answer(f"{before[t.origin]}{t.text}{after}")
            self._shown = len(self._outcome.tokens)
        self.out.flush()

    def _answer(self, text: str) -> None:
        if not text:
            return
        if not self._answered and self._reasoned and self.reasoning_out is not None:
            self.reasoning_out.write("\n\n")  # the answer starts below the reasoning
            self.reasoning_out.flush()
        self._answered = True
        self.out.write(text)

    @property
    def reasoning_open(self) -> bool:
        """Reasoning was written and no answer followed (the run ends inside the reasoning)."""
        return self._reasoned and not self._answered


def _part_line(name: str, p: PartStats, mode: str) -> str:
    line = f"{name} {p.tokens} tok, {p.tokens_per_s:.1f} tok/s"
    if mode == "speculative":
        line += f", acceptance {100 * p.acceptance_rate:.0f}%"
    return line


def legend(colours: OriginCodes, speculative: bool) -> str:
    if not speculative:
        return "target only (no draft): every token is the target's"
    return "  ".join(colours.coloured(f"■ {LABELS[o]}", o) for o in Origin)


def speedup_text(s: GenerationStats) -> str:
    """ "speedup 1.42x (1.31-1.50; target alone timed in 6 target steps during this answer)"."""
    assert s.speedup is not None and s.speedup_low is not None and s.speedup_high is not None
    return f"speedup {s.speedup:.2f}x ({s.speedup_low:.2f}-{s.speedup_high:.2f}; {s.speedup_how})"


def stats_line(s: GenerationStats) -> str:
    parts = [
        f"{s.generated} tokens",
        f"{s.decode_tokens_per_s:.1f} tok/s",
        f"prefill {s.prefill_tokens} tok in {s.prefill_s:.2f}s",
    ]
    if s.mode == "speculative":
        parts += [
            f"acceptance {100 * s.acceptance_rate:.0f}% ({s.accepted}/{s.drafted})",
            f"{s.tokens_per_round:.2f} tok/pass",
            f"K adaptive ≤{s.draft_max}, mean {s.drafted / max(1, s.rounds):.1f}"
            if s.adaptive
            else f"K={s.draft_max}",
        ]
        if s.decode_s > 0:
            parts.append(
                f"draft {100 * s.draft_s / s.decode_s:.0f}% / verify {100 * s.verify_s / s.decode_s:.0f}%"
            )
        drafted_by = [f"{d.rounds} {kind}" for kind, d in s.drafters.items() if d.rounds]
        if s.drafter == AUTO_DRAFTER and drafted_by:
            parts.append("rounds drafted: " + ", ".join(drafted_by))  # who auto chose
    if s.reasoning_tokens:
        parts += [_part_line("reasoning", s.reasoning, s.mode), _part_line("answer", s.answer, s.mode)]
    if s.speedup is not None:
        parts.append(speedup_text(s))
    if s.device:
        parts.append(f"on {s.device}")  # where the target ran: the CPU, or which GPU
    if s.exact:
        parts.append("exact")  # every verified row computed as the target alone computes it
    parts.append(f"stop: {s.stop_reason.replace('_', ' ')}")
    return " · ".join(parts)
