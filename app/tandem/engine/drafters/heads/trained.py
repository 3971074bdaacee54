"""What the trained drafters in files of their own share (EAGLE-3, DFlash): the calls this
llama.cpp build must have, their head (what it knows of its file), and their spec, one function
for both kinds: a file beside the target, read and checked by its header, attached as one of
the target's listeners, drafting with a head per sequence beside other sequences (batched.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ...errors import ModelLoadError
from ...files.gguf_info import GGUFInfo
from ..spec import BuildContext, Drafter, DrafterSpec, Files, Needs, Traits, Words
from .base import H, Head, attached
from .batched import batching
from .files import DrafterFacts, described, layer_problems

if TYPE_CHECKING:
    from typing_extensions import Self

    from ...llama.model import LoadedModel


def trained_supported() -> bool:
    """Whether this llama.cpp build has the calls a trained drafter's file needs."""
    from .context import files_supported  # (llama.cpp's bindings: only when asked)

    return files_supported()


def trained_unsupported(name: str) -> str:
    """Why this build cannot run the trained drafter `name`, in one line."""
    return (
        f"this llama.cpp build cannot run {name} (a trained drafter): update it "
        "(python3 scripts/install.py --rebuild)"
    )


def refuse_unsupported(path: Path) -> None:
    """Before a trained drafter's file loads: ModelLoadError when this build cannot run it."""
    if not trained_supported():
        raise ModelLoadError(trained_unsupported(path.name))


def attach_trained(target: LoadedModel, path: Path, info: GGUFInfo, make: Callable[..., H]) -> H:
    """Load a checked trained drafter's file beside the target, as one of its listeners."""
    refuse_unsupported(path)
    head = make(target, path, info)
    target.listeners.append(head)
    return head


class TrainedHead(Head):
    """A trained drafter's head: what it knows of its file (EAGLE-3, DFlash)."""

    path: Path
    info: GGUFInfo
    facts: DrafterFacts

    def beside(self) -> Self:
        # (Each kind's constructor: (target, path, info, weights=...).)
        make: Any = type(self)
        return cast("Self", make(self.target, self.path, self.info, weights=self.context))

    @property
    def max_draft(self) -> int:
        return self.facts.max_draft

    @property
    def label(self) -> str:
        return self.facts.label

    @property
    def subject(self) -> str:
        return f"{self.path.name} ({described(self.label)})"


T = TypeVar("T", bound=TrainedHead)


def trained_spec(
    kind: str,
    words: Words,
    *,
    head: type[T],
    drafter: Callable[[T, BuildContext], Drafter],
    read: Callable[[GGUFInfo], DrafterFacts],
    arch: str,
    prefixes: tuple[str, ...],
    rank: int,
) -> DrafterSpec:
    """The spec of a trained drafter in a file of its own (EAGLE-3, DFlash): it needs that file
    beside the target, as a `head` among the target's listeners, and drafts with `drafter`; it
    reads the target's layer rows, is checked by the layers it reads, and runs where this
    build has the calls it needs. Its words name the file when one is attached."""

    def build(ctx: BuildContext) -> Drafter | None:
        found = attached(ctx.target, head)
        return None if found is None else drafter(found, ctx)

    def missing(target: LoadedModel, draft: LoadedModel | None) -> str | None:
        if attached(target, head) is not None:
            return None
        first, *others = (f"{p}*.gguf" if i == 0 else f"{p}*" for i, p in enumerate(prefixes))
        also = f" (or {', '.join(others)})" if others else ""
        return (
            f"no {words.label} is loaded for {target.path.name}: give the {first}{also} trained for it "
            "as the draft (--draft), or draft another way (--drafter auto)"
        )

    def phrase(target: LoadedModel, draft: LoadedModel | None) -> str:
        found = attached(target, head)
        return f"{found.path.name} ({found.label})" if found is not None else described(words.label)

    def load(target: LoadedModel, path: Path, info: GGUFInfo) -> T:
        return attach_trained(target, path, info, head)

    return DrafterSpec(
        name=kind,
        words=replace(words, phrase=phrase),
        needs=Needs.SIDECAR,
        build=build,
        missing=missing,
        traits=Traits(untimed_rank=1),
        batching=batching(kind, lambda target: attached(target, head), drafter),
        listens=("layer rows",),
        files=Files(
            label=words.label,
            what=described(words.label),
            read=read,
            check=lambda target, facts, info: layer_problems(target, facts),
            load=load,
            supported=trained_supported,
            unsupported=trained_unsupported,
            archs=(arch,),
            prefixes=prefixes,
            rank=rank,
        ),
    )
