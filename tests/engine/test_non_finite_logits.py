"""NaN or infinite logits (an fp16 overflow on a GPU backend, damaged weights) are a clear
GenerationError naming the model and the position, never a crash or an arbitrary token; and
numeric options that are not numbers in range are refused before anything runs."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest

import model_files
from cli_child import tandem
from run_helpers import run
from tandem.engine import GenerationError, LoadOptions, ModelPair, TandemError
from tandem.session.options import Options

# In the GPU lane too (gpu_lane.py): where non-finite logits really happen.
pytestmark = pytest.mark.gpu

# The checked greedy path (the one a GPU takes) is forced with greedy_in_graph=False.
CHECKED = LoadOptions(n_ctx=512, n_threads=1, greedy_in_graph=False)


@pytest.fixture(scope="module", params=["nan", "inf"])
def poisoned(request: pytest.FixtureRequest) -> Path:
    return model_files.tiny_model(f"poison-{request.param}", seed=9, poison=float(request.param))


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_target_s_non_finite_logits_are_a_generation_error(poisoned: Path, temperature: float) -> None:
    with ModelPair.load(poisoned, None, CHECKED) as pair:
        prompt = pair.raw_prompt("Hello there")
        with pytest.raises(GenerationError) as err:
            run(pair, prompt, speculative=False, temperature=temperature, max_tokens=4)
    message = str(err.value)
    assert poisoned.name in message and "the target" in message
    assert f"position {len(prompt) - 1}" in message and "NaN or infinite logits" in message


@pytest.mark.parametrize(("temperature", "p_min"), [(0.8, 0.0), (0.0, 0.3)])
def test_a_draft_s_non_finite_logits_are_a_generation_error(
    poisoned: Path, tiny_target: Path, temperature: float, p_min: float
) -> None:
    # Sampling reads the draft's distribution; greedy drafting with p-min reads its confidence.
    with ModelPair.load(tiny_target, poisoned, CHECKED) as pair:
        prompt = pair.raw_prompt("Hello there")
        with pytest.raises(GenerationError, match="the draft"):
            run(pair, prompt, temperature=temperature, p_min=p_min, max_tokens=8)
        # The pair stays usable: the target alone still answers.
        assert run(pair, prompt, speculative=False, max_tokens=4).stats.generated == 4


# llama.cpp's greedy sampler in the graph (a model on the CPU): the winner's logit is checked in
# the row llama.cpp hands over with it (before, this path had no check at all).
IN_GRAPH = LoadOptions(n_ctx=512, n_threads=1, greedy_in_graph=True)


def test_greedy_in_the_graph_checks_the_winning_logit(poisoned: Path, tiny_target: Path) -> None:
    with ModelPair.load(poisoned, None, IN_GRAPH) as pair:
        prompt = pair.raw_prompt("Hello there")
        with pytest.raises(GenerationError) as err:
            run(pair, prompt, speculative=False, max_tokens=4)
        # On the CPU the in-graph path ran (no logits read); on a GPU the rows are read instead.
        assert (pair.target._greedy_chain is not None) == (not pair.target.devices)
    message = str(err.value)
    assert f"position {len(prompt) - 1}" in message and "NaN or infinite logits" in message
    # A poisoned draft drafting greedily in the graph: its first guess is refused the same way.
    with ModelPair.load(tiny_target, poisoned, IN_GRAPH) as pair:
        prompt = pair.raw_prompt("Hello there")
        with pytest.raises(GenerationError, match="the draft"):
            run(pair, prompt, max_tokens=8)


def tandem_run(*args: str) -> subprocess.CompletedProcess[str]:
    return tandem("run", *args, "hi")


def test_the_cli_reports_non_finite_logits_in_one_line(poisoned: Path) -> None:
    res = tandem_run("--target", str(poisoned), "--baseline", "--temp", "0.7")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("tandem: error: ")
    assert "NaN or infinite logits" in res.stderr


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", math.nan),
        ("temperature", math.inf),
        ("top_p", math.nan),
        ("min_p", math.nan),
        ("min_p", math.inf),
        ("p_min", math.nan),
        ("n_threads", -3),
        ("n_ctx", -5),
        ("n_gpu_layers", -2),
        ("max_tokens", 0),
        ("draft_max", 99),
    ],
)
def test_every_numeric_option_is_checked(field: str, value: float) -> None:
    with pytest.raises(TandemError):
        Options.parse({field: value}).validate_all()


@pytest.mark.parametrize(
    "flags",
    [
        ["--temp", "nan"],
        ["--top-p", "nan"],
        ["--min-p", "inf"],
        ["--threads", "-3"],
        ["--ctx", "10"],
        ["-n", "0"],
    ],
)
def test_the_cli_refuses_bad_numbers_in_one_line(tiny_target: Path, flags: list[str]) -> None:
    res = tandem_run("--target", str(tiny_target), "--baseline", *flags)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tandem: error: "), res.stderr
