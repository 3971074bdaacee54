"""Model pairs: the curated catalog, downloads from the Hugging Face hub, GGUFs already on
disk, and whether a pair fits in memory. No UI code here (the CLI and the TUI build on it).

    spec.py        the catalog: models.toml + user catalogs, with line-precise errors
    schema.py      a catalog file's tables as pydantic models; an error as one sentence
    names.py       what a GGUF's file name says: split parts, quantization
    hub_cache.py   the Hugging Face cache layout: where, what is complete, adding entries
    hub_client.py  what the hub says about a file (commit, ETag, size), its errors; is it there
    hub.py         resumable, cancellable, checksum-verified downloads with progress
    discovery.py   GGUFs in the HF cache, LM Studio, Ollama and given paths; draft matching
    companions.py  a target's trained drafters shipped beside it (EAGLE-3, DFlash)
    fit.py         memory needed (weights + KV caches) vs GPU / unified / system memory
    heads.py       whether a GGUF has its own draft heads (multi-token prediction)
"""

from .companions import Companion, companions_of, usable_companion, usable_companions
from .discovery import LocalGGUF, companions_for, cross_tokenizer, discover_ggufs, drafts_for
from .fit import FitVerdict, device_memory, files_fit, pair_fit
from .heads import BUILTIN_DRAFTER_LABEL, has_heads
from .hub import DownloadCancelled, DownloadProgress, download_file, pull_pair
from .hub_cache import local_file
from .hub_client import DownloadError
from .spec import Catalog, CatalogError, ModelFile, PairSpec, load_catalog, unconfirmed_note

__all__ = [
    "BUILTIN_DRAFTER_LABEL",
    "Catalog",
    "CatalogError",
    "Companion",
    "DownloadCancelled",
    "DownloadError",
    "DownloadProgress",
    "FitVerdict",
    "LocalGGUF",
    "ModelFile",
    "PairSpec",
    "companions_for",
    "companions_of",
    "cross_tokenizer",
    "device_memory",
    "discover_ggufs",
    "download_file",
    "drafts_for",
    "files_fit",
    "has_heads",
    "load_catalog",
    "local_file",
    "pair_fit",
    "pull_pair",
    "unconfirmed_note",
    "usable_companion",
    "usable_companions",
]
