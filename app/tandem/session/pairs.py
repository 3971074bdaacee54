"""Which models a session uses: a catalog pair (downloaded first, with the user's consent) or
two files on disk, resolved the same way for every front-end; and opening them.

A front-end describes what the user asked for as a `PairRequest` and passes in how to fetch
missing files (`Fetch`: the CLI asks on the terminal and draws progress bars; the app has its
own download panel). The result is a `PairRef` (refs.py): the files, and the catalog entry they
came from, whose settings then apply (options.py). `open_pair` is the whole setup the command
line's run, serve and bench share: options checked, the pair resolved, its config, the models
loaded, the notes to show.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING

from tandem.engine.config import DrafterChoice, GenerationConfig, LoadOptions
from tandem.engine.drafters import registry
from tandem.engine.drafters.spec import Needs
from tandem.engine.errors import TandemError
from tandem.session import learnt
from tandem.session.options import Options
from tandem.session.preflight import preflight
from tandem.session.prompts import pair_notes
from tandem.session.refs import DraftNeeds, Fetch, PairRef, PairRequest, file_kind

if TYPE_CHECKING:
    from tandem.engine.config import LoadOptions
    from tandem.engine.pair import ModelPair


def resolve_pair(request: PairRequest, needs: DraftNeeds, *, fetch: Fetch, check: bool = True) -> PairRef:
    """The files to load for `request`, refused with one line (before anything is loaded)
    when they cannot draft as `needs` says (the model drafter without a draft model), or when
    the preflight refuses them (preflight.py: unreadable files, tokenizers that differ, the
    mtp drafter with a target that has no draft heads). `check=False` leaves the preflight to
    the caller (the app runs it before its own load, and reports in its window)."""
    if request.pair:
        if request.target or request.draft:
            raise TandemError("use either --pair NAME or --target/--draft, not both")
        ref = _catalog_pair(request, needs, fetch)
    else:
        ref = _file_pair(request, needs)
    if check:
        preflight(ref, needs)
    return ref


def _file_pair(request: PairRequest, needs: DraftNeeds) -> PairRef:
    if request.target is None:
        raise TandemError(
            "say which models to use: --pair NAME (see `tandem pairs`) or --target PATH --draft PATH"
        )
    if needs.need_draft and request.draft is None:
        text = next(s.name for s in registry.KINDS if s.needs is Needs.NOTHING)  # (prompt lookup)
        raise TandemError(
            "the drafter asked for needs a draft model: add --draft PATH, or draft from the "
            f"context with --drafter {text} (or run the target alone with --baseline)"
        )
    target = request.target.expanduser()
    draft = request.draft.expanduser() if request.draft is not None else None
    kind = file_kind(draft) if draft is not None else ""
    if draft is not None and not needs.use_draft and not (needs.use_sidecar and kind != ""):
        draft = None  # (a draft model the chosen drafter does not use)
    if draft is None and (needs.use_draft or needs.need_heads) and not needs.need_draft:
        # No draft named: a drafter shipped beside the target drafts (auto, or the kind asked
        # for), as llama.cpp's downloader pairs `eagle3-*` and `mtp-*` files with their model.
        from tandem.catalog import companions_of

        kinds = needs.companion_kinds()
        found = [c for c in companions_of(target) if kinds is None or c.kind in kinds]
        usable = [c for c in found if c.usable]
        beside = f"found beside {target.name}"
        unused = tuple(f"{c.path.name}, {beside}, is not used: {c.problem}" for c in found if not c.usable)
        if usable:
            first = usable[0]
            note = f"drafting with {first.path.name}, the {first.label} found beside {target.name}"
            paths = tuple(c.path for c in usable)
            return PairRef(
                target, first.path, found=note, companions=paths, unused=unused, known_kind=first.kind
            )
        return PairRef(target, None, unused=unused)
    return PairRef(target, draft, known_kind=kind if draft is not None else "")


def load_pair(ref: PairRef, options: LoadOptions) -> ModelPair:
    """Load `ref`'s models. A draft the user named must load; companions found beside the
    target are tried in order and skipped, each with a note, when llama.cpp refuses them (the
    target then runs without them): a bad file beside a good target never stops it. The pair
    starts from what drafting learnt about it here before (learnt.py; `learnt.keep` when the
    front-end closes it)."""
    from tandem.engine.pair import ModelPair

    if ref.companions:
        pair = ModelPair.load(ref.target, None, options, companions=ref.companions)
    else:
        pair = ModelPair.load(ref.target, ref.draft, options)
    learnt.restore(pair)
    return pair


@dataclass
class OpenPair:
    """A pair opened for a front-end: its files, the models, the generation config the user's
    options make over the pair's settings, and what to tell the user before it runs."""

    ref: PairRef
    pair: ModelPair
    config: GenerationConfig
    notes: list[str]  # how the pair loaded, a missing chat template, the drafters found beside it

    def close(self) -> None:
        try:
            learnt.keep(self.pair)  # (for the next process that opens this pair: learnt.py)
        finally:
            self.pair.close()

    def __enter__(self) -> OpenPair:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def open_pair(
    request: PairRequest,
    options: Options,
    *,
    fetch: Fetch,
    drafters: Sequence[DrafterChoice] = (),
    speculative: bool = True,
    raw: bool = False,
    raw_hint: bool = True,
    before_load: Callable[[PairRef, GenerationConfig], None] | None = None,
    sequences: Callable[[PairRef, LoadOptions], int] | None = None,
) -> OpenPair:
    """The setup every command-line front-end shares: the options checked, the pair resolved
    (downloaded through `fetch`, checked by the preflight) for drafting with `drafters` (one
    or several; default: the options' own), its generation config, exact output refused where
    asked for and not possible, the models loaded, and the notes to show. `before_load` runs
    just before loading, with the pair and its config (the server binds its socket there, the
    bench reads its settings). `raw`: the text goes in as written, so a missing chat template
    is no news; `raw_hint`: the front-end has --raw to suggest. `sequences`: how many sequences
    the models' contexts hold (the server's --parallel), decided from the pair and its options."""
    options.validate_all()
    ref = resolve_pair(
        request, DraftNeeds.of(drafters or [options.drafter], speculative=speculative), fetch=fetch
    )
    config = options.generation_config(ref.spec)
    if before_load is not None:
        before_load(ref, config)
    loading = options.load_options(ref.spec)
    if sequences is not None:
        loading = replace(loading, n_seq=sequences(ref, loading))
    pair = load_pair(ref, loading)
    try:
        pair.exact_config(config)  # (--exact where the target cannot give it: refused now, once)
        notes = [*pair_notes(pair, raw=raw, raw_hint=raw_hint), *found_notes(ref, pair)]
    except BaseException:
        pair.close()
        raise
    return OpenPair(ref, pair, config, notes)


def as_loaded(ref: PairRef, pair: ModelPair) -> PairRef:
    """`ref` as it loaded: with the companion that drafts as its draft (None: none of those
    found could load), for what a front-end keeps (the app's last pair)."""
    if not ref.companions:
        return ref
    return PairRef(ref.target, pair.draft_file, ref.name, ref.spec)


def found_notes(ref: PairRef, pair: ModelPair) -> list[str]:
    """Notes on the companions found beside the target: those whose headers were refused, and
    the one that drafts (those llama.cpp refused are in the pair's own notes)."""
    notes = list(ref.unused)
    used = pair.draft_file
    if ref.companions and used is not None:
        other = f"drafting with {used.name}, found beside {ref.target.name}"
        notes.append(ref.found if used == ref.draft else other)
    return notes


# What a target can draft with alone: its own heads, or the text.
_ALONE = (Needs.HEADS, Needs.NOTHING)


def _catalog_pair(request: PairRequest, needs: DraftNeeds, fetch: Fetch) -> PairRef:
    from tandem.catalog import load_catalog, local_file

    assert request.pair is not None
    spec = load_catalog(request.catalog).get(request.pair)
    if needs.need_draft and spec.draft is None:
        alone = [*(s.name for s in registry.KINDS if s.choosable and s.needs in _ALONE), registry.AUTO]
        raise TandemError(
            f"pair {spec.name} has no draft model (its target drafts with its own heads): use "
            f"--drafter {', '.join(alone[:-1])} or {alone[-1]}"
        )
    with_draft = spec.draft is not None and (needs.use_draft or needs.need_draft)
    files = list(spec.files) if with_draft else [spec.target]
    missing = [f for f in files if local_file(f) is None]
    if missing:
        fetch(spec, missing)
    target = local_file(spec.target)
    draft = local_file(spec.draft) if with_draft and spec.draft is not None else None
    if target is None or (with_draft and draft is None):
        raise TandemError(f"pair {spec.name} is still incomplete in the Hugging Face cache")
    return PairRef.from_catalog(spec, target, draft)
