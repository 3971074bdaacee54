"""Terminal output for the CLI: tokens coloured by origin, the legend, the stats line."""

from __future__ import annotations

from app.engine import GenerationStats, Origin

RESET = "\x1b[0m"
# Foreground colours that read on dark and light terminals alike.
COLOURS = {
    Origin.DRAFT: "\x1b[32m",  # green: the draft guessed it and the target agreed
    Origin.TARGET: "\x1b[33m",  # yellow: the target's own token (correction)
    Origin.BONUS: "\x1b[36m",  # cyan: the free extra token after a fully accepted run
}
DIM = "\x1b[2m"

LABELS = {
    Origin.DRAFT: "draft accepted",
    Origin.TARGET: "target correction",
    Origin.BONUS: "bonus",
}


def coloured(text: str, origin: Origin, enabled: bool) -> str:
    if not enabled or not text:
        return text
    return f"{COLOURS[origin]}{text}{RESET}"


def legend(enabled: bool, speculative: bool) -> str:
    if not speculative:
        return "target only (no draft): every token is the target's"
    parts = [coloured(f"■ {LABELS[o]}", o, enabled) for o in Origin]
    return "  ".join(parts)


def stats_line(s: GenerationStats, baseline_tps: float | None = None) -> str:
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
    if baseline_tps:
        parts.append(f"speedup {s.decode_tokens_per_s / baseline_tps:.2f}x")
    parts.append(f"stop: {s.stop_reason.replace('_', ' ')}")
    return " · ".join(parts)
