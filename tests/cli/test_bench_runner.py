"""The benchmark runner: settings do not steer each other through what adaptive drafting learns."""

from __future__ import annotations

import copy

from tandem.bench.prompts import BenchPrompt
from tandem.bench.runner import BASELINE, run_bench
from tandem.bench.settings import parse_settings
from tandem.engine import GenerationConfig, ModelPair, SamplerSettings
from tandem.engine.drafters.policy import CostModel
from tandem.session.runner import Runner


def test_each_setting_learns_alone_and_the_pair_s_record_is_untouched(smollm2_pair: ModelPair) -> None:
    pair = smollm2_pair
    base = GenerationConfig(
        max_tokens=24, draft_max=6, adaptive=True, drafter="auto", sampler=SamplerSettings(temperature=0.0)
    )
    settings = parse_settings("model,auto,model:k=3", base)
    prompts = [
        BenchPrompt("chat", "The three primary colours are red, yellow and"),
        BenchPrompt("code", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'),
    ]
    encoded = [pair.raw_prompt(p.text) for p in prompts]
    before = copy.deepcopy(pair.costs)
    learnt: dict[str, CostModel] = {}

    with Runner.open(pair) as runner:
        records = run_bench(runner, prompts, encoded, settings, base, runs=2, learnt=learnt)

    assert {r.setting for r in records} == {BASELINE, "model", "auto", "model:k=3"}
    assert pair.costs == before  # a user's session record is not the bench's scratch pad
    assert set(learnt) == {"model", "auto", "model:k=3"}
    model, auto, fixed = learnt["model"], learnt["auto"], learnt["model:k=3"]
    assert model is not auto
    # Each adaptive setting measured its own rounds: timings and acceptance of its own drafts
    # (at least its warm-up's first round drafts; afterwards adaptive K may stop drafting
    # where, as on the AMD CPU, the draft model does not pay).
    assert model.verify and model.of("model").trials != 5.0
    assert auto.verify
    # A fixed K learns timings but keeps no acceptance record (it has nothing to plan).
    assert fixed.verify and fixed.of("model").trials == 5.0
