"""The tiny trained drafters the tests use (model_files.tiny_eagle3_model, tiny_dflash_model), and
the tiny targets they were made for: 32 wide, the shared embedding and head."""

from __future__ import annotations

from pathlib import Path

import model_files
from catalogs import link_or_copy


def target() -> Path:
    """A plain attention target: a tiny llama with three layers."""
    return model_files.tiny_stateful_model("llama-d", "llama", seed=31)


def hybrid_target() -> Path:
    """A hybrid target (Qwen3.5: gated delta net and attention, four layers, its own MTP block)."""
    return model_files.tiny_mtp_model("qwen35-mtp-s16", seed=7)


def hybrid_trunk() -> Path:
    """The hybrid target's trunk alone (no MTP block): its heads ship beside it (mtp_heads)."""
    return model_files.tiny_mtp_model("qwen35-mtp-s16-trunk", seed=7, part_of="trunk")


def mtp_heads() -> Path:
    """The hybrid target's MTP block alone, with its embeddings and head (`mtp-*.gguf`)."""
    return model_files.tiny_mtp_model("qwen35-mtp-s16-heads", seed=7, part_of="heads")


def eagle3() -> Path:
    return model_files.tiny_eagle3_model("eagle3-a", seed=3, noise=0.1)


def eagle3_d2t() -> Path:
    """An EAGLE-3 drafter with a reduced vocabulary of its own (half the target's) and d2t."""
    return model_files.tiny_eagle3_model("eagle3-d2t", seed=5, noise=0.1, d2t_keep=0.5)


def dflash() -> Path:
    """A DFlash drafter: blocks of 4 positions (at most 3 guesses), reads layers 1 and 2."""
    return model_files.tiny_dflash_model("dflash-a", seed=4)


def dspark() -> Path:
    """A DSpark drafter (a Markov head, anchor-first: blocks of 4 guesses)."""
    return model_files.tiny_dflash_model("dspark-a", seed=6, dspark=True)


def dflash2() -> Path:
    """A DFlash2 drafter (a selector: a path through each position's top candidates)."""
    return model_files.tiny_dflash_model("dflash2-a", seed=8, selector=True)


def folder_with(dest: Path, target_file: Path, **companions: Path) -> Path:
    """A model folder as a download leaves it: the target and its companions under the names
    given (`eagle3-tiny.gguf=...`: keyword names with '.gguf' appended). The target's path."""
    t = link_or_copy(target_file, dest / "tiny-target.gguf")
    for name, src in companions.items():
        link_or_copy(src, dest / f"{name.replace('_', '-')}.gguf")
    return t
