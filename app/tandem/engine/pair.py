"""A target model and (optionally) its draft, loaded together and used as one.

Loading checks everything it can before touching weights: both files are read as GGUF
(missing, not GGUF, truncated), and the tokenizers are compared: a draft of another tokenizer
drafts across tokenizers (drafters/cross.py), with a note, unless it cannot even do that. A
drafter in a file of its own loads beside the target. Prompts are built by the pair's other
part (prompting.py); generations run in generation.py.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from .config import DRAFT_MAX_LIMIT, GenerationConfig, LoadOptions
from .decoding.batch_costs import BatchCosts
from .decoding.generation import check_request, generate
from .drafters import registry
from .drafters.policy import CostModel
from .errors import TandemError
from .events import Event
from .files.compat import PairTokenizers, check_pair
from .files.gguf_file import GGUFInfo, read_gguf
from .files.recurrence import rollback_note
from .llama import exact
from .llama.model import LoadedModel
from .text.prompting import ChatPrompt, Prompting

__all__ = ["ChatPrompt", "ModelPair"]


class ModelPair(Prompting):
    def __init__(self, target: LoadedModel, draft: LoadedModel | None) -> None:
        self.target = target
        self.draft = draft
        # The trained drafter (EAGLE-3, DFlash) given as the draft file, loaded beside the target
        # in place of a draft model (None: none).
        self.sidecar: Path | None = None
        # Measured draft/verify costs on this machine, kept across generations so adaptive
        # drafting starts informed (they describe the hardware, not the text).
        self.costs = CostModel()
        # What the batched engine measured of this pair's batches (BatchEngine's costs; None
        # until one ran or session/learnt.py restored them), for the next engine over it.
        self.batch_costs: BatchCosts | None = None
        self._lock = threading.Lock()  # one generation at a time
        self._init_prompting()

    @classmethod
    def load(
        cls,
        target_path: str | os.PathLike[str],
        draft_path: str | os.PathLike[str] | None,
        options: LoadOptions | None = None,
        *,
        companions: Sequence[str | os.PathLike[str]] = (),
    ) -> ModelPair:
        """Load the target and its draft (a draft model, or a trained drafter loaded beside it),
        both checked first; any failure is a TandemError with one line.

        `companions`: trained drafters found beside the target rather than named (draft_path is
        None), tried in order. The first that loads drafts; one that fails (its header, or
        llama.cpp refusing it) is skipped with a note (`notes`), and with none the target runs
        alone: a bad file beside a good target never stops the target from being used."""
        if companions and draft_path is not None:
            raise ValueError("companions are tried only when no draft is named")
        opts = options or LoadOptions()
        t_info = read_gguf(target_path)
        registry.refuse_as_target(t_info)
        d_info = read_gguf(draft_path) if draft_path is not None else None
        # A drafter in a file of its own (EAGLE-3, DFlash, MTP heads) given as the draft is no
        # draft model: it loads beside the target, once checked against it (registry.check_file).
        # A draft model may have another tokenizer (check_pair says which, or why it cannot
        # draft: compat.py).
        sidecar = d_info if d_info is not None and registry.classify(d_info) is not None else None
        tokenizers: PairTokenizers | None = None
        if sidecar is not None:
            registry.check_file(t_info, sidecar)
        elif d_info is not None:
            tokenizers = check_pair(t_info, d_info)
            d_info = d_info.without_vocab()
        t_full, t_info = t_info, t_info.without_vocab()  # (companions are checked against the vocabulary)
        # The target verifies up to K+1 tokens at once; the draft only ever needs its last row.
        # The draft also gets a smaller micro-batch: measured on CPU, its quantized prefill is no
        # faster at 256 than at 128 tokens, and 128 halves the compute buffer llama.cpp reserves.
        target = LoadedModel(
            target_path, replace(opts, max_outputs=DRAFT_MAX_LIMIT + 1), role="target", info=t_info
        )
        draft: LoadedModel | None = None
        try:
            registry.attach(target)  # what follows the target's decodes (its own draft heads)
            if sidecar is not None:
                registry.attach_file(target, Path(sidecar.path), sidecar)
            elif draft_path is not None:
                # A recurrent draft decodes one token at a time, which llama.cpp's snapshots
                # cannot roll back: it is checkpointed (drafters/model.py), snapshots would
                # only take memory.
                draft = LoadedModel(
                    draft_path,
                    replace(
                        opts, max_outputs=1, n_batch=min(opts.n_batch, 128), rs_snapshots=0, rpc_servers=()
                    ),
                    role="draft",
                    info=d_info,
                )
            found = _attach_companion(target, t_full, [Path(c) for c in companions])
        except BaseException:
            if draft is not None:
                draft.close()
            target.close()
            raise
        if found.used is not None:
            sidecar = found.used
        target.notes.extend(found.notes)
        if draft is not None and tokenizers is not None and not tokenizers.same:
            draft.foreign_tokenizer = True
            draft.notes.append("draft: " + tokenizers.note(target.path.name, draft.path.name))
        for m in (target, draft):
            if m is not None and m.recurrent:
                sequences = m.options.n_seq if m is target else 1  # (a recurrent draft serves one)
                m.notes.append(rollback_note(m.role, m.info.architecture, m.snapshots, sequences))
        pair = cls(target, draft)
        pair.sidecar = Path(sidecar.path) if sidecar is not None else None
        return pair

    def close(self) -> None:
        if self.draft is not None:
            self.draft.close()
        self.target.close()

    def __enter__(self) -> ModelPair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def draft_file(self) -> Path | None:
        """The file given as the draft: a draft model's, or a trained drafter's (None: none)."""
        return self.draft.path if self.draft is not None else self.sidecar

    @property
    def notes(self) -> list[str]:
        """Things the user should know about how the models were loaded (CPU fallback...)."""
        return self.target.notes + (self.draft.notes if self.draft else [])

    @property
    def context_size(self) -> int:
        """Tokens that fit in both models' contexts."""
        return min(m.n_ctx for m in (self.target, self.draft) if m is not None)

    # ------------------------------------------------------------------ generation
    def check_request(
        self, prompt: Sequence[int], config: GenerationConfig, *, speculative: bool = True
    ) -> None:
        """Raise what `generate` would refuse for this prompt and config (TandemError;
        ContextOverflowError when the prompt does not fit), without generating: for a caller
        that must answer before the pair is free (the server, while another answer runs)."""
        check_request(self.target, self.draft, prompt, self.exact_config(config), speculative=speculative)

    def exact_config(self, config: GenerationConfig) -> GenerationConfig:
        """`config` as it runs on this pair: `exact` resolved (None: wherever the target allows
        it), and K capped to the verify batch exactness allows (exact.py). Exact output asked
        for (True) where it is not possible is refused with the reason (TandemError)."""
        return exact.resolve(config, self.target.exact_plan)

    def generate(
        self,
        prompt: Sequence[int],
        config: GenerationConfig,
        *,
        speculative: bool = True,
        cancel: threading.Event | None = None,
        costs: CostModel | None = None,
    ) -> Iterator[Event]:
        """Stream events for one answer. speculative=False runs the target alone; otherwise
        config.drafter says who drafts (the draft model, prompt lookup, or auto).

        `costs`: what adaptive drafting learns (timings, long-run acceptance) goes here instead
        of into the pair's own record; the benchmark keeps one per setting it compares.

        The pair runs one generation at a time: the returned generator takes the pair's lock
        when it starts and gives it back when it ends (or is closed)."""
        return generate(
            self.target,
            self.draft,
            prompt,
            self.exact_config(config),
            speculative=speculative,
            cancel=cancel,
            costs=self.costs if costs is None else costs,
            lock=self._lock,
        )


@dataclass
class _Companions:
    """What trying the companions gave: the header of the one attached (None: none), and a
    note for each one skipped."""

    used: GGUFInfo | None = None
    notes: list[str] = field(default_factory=list)


def _attach_companion(target: LoadedModel, t_info: GGUFInfo, paths: Sequence[Path]) -> _Companions:
    """Attach the first of `paths` (drafters found beside the target) that passes its checks
    and loads; a note for each one that does not."""
    out = _Companions()
    for i, path in enumerate(paths):
        try:
            info = read_gguf(path)
            registry.check_file(t_info, info)
            registry.attach_file(target, path, info)
        except TandemError as exc:
            rest = paths[i + 1 :]
            then = f"trying {rest[0].name}" if rest else f"{target.path.name} runs without it"
            out.notes.append(f"{path.name}, found beside {target.path.name}, is not used ({exc}): {then}")
            continue
        out.used = info
        break
    return out
