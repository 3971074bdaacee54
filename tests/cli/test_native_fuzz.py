"""Fuzzing what llama.cpp trusts in a file: no value of a checked key can abort or hang Tandem.

For each kind of file Tandem loads (a target, a hybrid target, a recurrent hybrid, a draft model,
an EAGLE-3 and a DFlash drafter found beside their target, one given as the draft, MTP heads in a
file of their own) each hyperparameter llama.cpp asserts on, divides by or loops on is written at
its edges (0, -1, odd, huge, mismatched, NaN, infinite; a repeated token text; a BOS that is not
there), and `tandem run` runs on the file in a child process (tests/native_child.py). Without
the checks of engine/files/native_checks.py, the EAGLE-3 companion's and the hybrid target's cases
alone end in SIGABRT 30 times, SIGFPE twice and a loop inside ggml_graph_compute three times
(issue 38). Now each either runs (a companion that cannot be used is skipped, with a note) or
ends in one line on standard error: never a signal, a hang or a traceback.

The files are tiny (32-wide random-weight models, tests/trained.py) and written by editing one
key of a good header (tests/gguf_edit.py); the cases run one after another in as few child
processes as the crashes allow (one when all behave), `--threads 1`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import model_files
import trained
from catalogs import link_or_copy
from gguf_edit import I32, STR, Typed, tokens_of
from native_child import Case, Outcome, run_cases

# A case may take this long before it counts as a hang (a load and four tokens take < 1 s).
CASE_TIMEOUT_S = 60.0

INT_EDGES: list[Any] = [0, Typed(I32, -1), 3, 2**32 - 1]
FLOAT_EDGES = [-1.0, float("nan"), float("inf")]
# Keys every architecture's loader reads (llama-model.cpp load_hparams) or that the graphs it
# builds use: what each kind below is fuzzed over.
COMMON_INTS = (
    "context_length",
    "embedding_length",
    "block_count",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "rope.dimension_count",
    "attention.key_length",
    "attention.value_length",
    "expert_count",
    "expert_used_count",
    "nextn_predict_layers",
)
COMMON_FLOATS = ("attention.layer_norm_rms_epsilon", "rope.freq_base")


@dataclass(frozen=True)
class Kind:
    """A kind of file: the good file it is made from, its architecture, how `tandem run` gets
    it (`role`), and the keys of its own beyond the common ones."""

    source: Callable[[], Path]
    arch: str
    role: str  # "target", "draft", "companion" (found beside the target), "sidecar" (--draft)
    ints: tuple[str, ...] = ()
    arrays: tuple[tuple[str, list[int]], ...] = ()
    name: str = "x.gguf"  # the file's name (a companion's says its kind)
    target: Callable[[], Path] = trained.target  # the target of a draft, companion or sidecar


_SSM = (
    "ssm.inner_size",
    "ssm.state_size",
    "ssm.time_step_rank",
    "ssm.group_count",
    "full_attention_interval",
)
_SECTIONS = (("rope.dimension_sections", [0, 0, 0, 0]), ("rope.dimension_sections", [-1, 1, 0, 0]))


def _lfm2() -> Path:
    """A recurrent hybrid (short convolutions, one attention layer)."""
    return model_files.tiny_stateful_model("lfm2-t", "lfm2", seed=1)


KINDS = {
    "target": Kind(trained.target, "llama", "target"),
    "hybrid-target": Kind(trained.hybrid_target, "qwen35", "target", _SSM, _SECTIONS),
    "recurrent-target": Kind(
        lambda: model_files.tiny_stateful_model("lfm2-t", "lfm2", seed=1),
        "lfm2",
        "target",
        ("shortconv.l_cache",),
    ),
    "draft": Kind(trained.target, "llama", "draft", target=trained.target),
    "eagle3-companion": Kind(
        trained.eagle3, "eagle3", "companion", ("target_hidden_size",), name="eagle3-x.gguf"
    ),
    "dflash-companion": Kind(trained.dflash, "dflash", "companion", ("block_size",), name="dflash-.gguf"),
    "eagle3-draft": Kind(trained.eagle3, "eagle3", "sidecar", ("target_hidden_size",)),
    "mtp-companion": Kind(
        trained.mtp_heads,
        "qwen35",
        "companion",
        _SSM,
        _SECTIONS,
        name="mtp-x.gguf",
        target=trained.hybrid_trunk,
    ),
}


def _changes(kind: Kind) -> list[tuple[str, dict[str, Any]]]:
    """(an id, the keys to change) for every case of `kind`."""
    arch = kind.arch
    out: list[tuple[str, dict[str, Any]]] = []
    for key in (*COMMON_INTS, *kind.ints):
        for value in INT_EDGES:
            shown = value.value if isinstance(value, Typed) else value
            out.append((f"{key}={shown}", {f"{arch}.{key}": value}))
    for key in COMMON_FLOATS:
        for f in FLOAT_EDGES:
            out.append((f"{key}={f}", {f"{arch}.{key}": f}))
    for key, array in kind.arrays:
        out.append((f"{key}={array}", {f"{arch}.{key}": Typed(I32, array, array=True)}))
    out.append(("rope.scaling.type=bogus", {f"{arch}.rope.scaling.type": "bogus"}))
    # A tokenizer told to add a BOS it does not have (llama.cpp asserts when it tokenizes; UGM
    # has no BOS of its own to fall back on).
    no_bos = {"tokenizer.ggml.model": "t5", "tokenizer.ggml.add_bos_token": True}
    out.append(("add_bos-without-bos", {**no_bos, "tokenizer.ggml.bos_token_id": 9**9}))
    return out


def _repeated_tokens(source: Path) -> dict[str, Any]:
    """The vocabulary with token 300's text given to token 301 too (llama.cpp asserts on it)."""
    tokens = tokens_of(source)
    tokens[301] = tokens[300]
    return {"tokenizer.ggml.tokens": Typed(STR, tokens, array=True)}


def _argv(kind: Kind, path: Path, folder: Path) -> list[str]:
    """`tandem run` on the edited file, as `kind.role` says."""
    base = ["run", "--threads", "1", "-n", "4", "--ctx", "256"]
    target = str(kind.target())
    if kind.role == "target":
        return [*base, "--target", str(path), "hi"]
    if kind.role == "companion":
        beside = link_or_copy(kind.target(), folder / "tiny-target.gguf")
        return [*base, "--target", str(beside), "hi"]
    return [*base, "--target", target, "--draft", str(path), "hi"]


def _check(outcome: Outcome, case: str) -> str | None:
    """What is wrong with how a case ended (None: nothing)."""
    if outcome.signal is not None:
        return f"{case}: killed by signal {outcome.signal}: {outcome.assertion}"
    if outcome.hung:
        return f"{case}: still running after {CASE_TIMEOUT_S:g} s"
    if outcome.rc == 0:
        return None
    errors = [line for line in outcome.lines if line.startswith("tandem: error: ")]
    if outcome.rc != 1 or len(errors) != 1 or "Traceback" in outcome.err:
        return f"{case}: rc {outcome.rc}, not one error line: {outcome.err.strip()[-400:]}"
    return None


@pytest.mark.parametrize("name", list(KINDS))
def test_no_value_of_a_checked_key_aborts_or_hangs(name: str, tmp_path: Path) -> None:
    kind = KINDS[name]
    source = kind.source()
    cases = [*_changes(kind), ("repeated-token-text", _repeated_tokens(source))]
    runs = []
    for i, (_, change) in enumerate(cases):
        folder = tmp_path / f"c{i}"
        folder.mkdir()
        path = folder / kind.name  # (written by the child just before the case runs)
        runs.append(Case(tuple(_argv(kind, path, folder)), ((source, path, change),)))
    outcomes = run_cases(runs, timeout=CASE_TIMEOUT_S)
    problems = [p for (case, _), o in zip(cases, outcomes, strict=True) if (p := _check(o, case))]
    assert not problems, "\n".join(problems)
    # Refused in the header, or by llama.cpp's own checks: most edges are not a usable file.
    refused = sum(o.rc == 1 for o in outcomes)
    used_anyway = sum(o.rc == 0 for o in outcomes)
    assert refused + used_anyway == len(cases)
    if kind.role in ("target", "draft", "sidecar"):
        assert refused > len(cases) // 2, f"{refused} of {len(cases)} refused"
