"""What drafting learnt about a pair, kept for the next process (session/learnt.py), on real
llama.cpp: a pair loaded again starts from what the last one learnt, `tandem run` keeps it for
the next `tandem run`, a server started again does not time its batches again, and a damaged,
hostile or foreign file, another thread count or a directory that cannot be written costs only
the learning, never an error."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from cli_child import tandem
from tandem.engine import (
    BatchCosts,
    GenerationConfig,
    LoadOptions,
    ModelPair,
    SamplerSettings,
    TokenEvent,
    batch_costs_from_json,
    batch_costs_to_json,
)
from tandem.engine.drafters.policy import CostModel, costs_to_json
from tandem.engine.llama.sequences import SeqContext
from tandem.session import learnt
from tandem.session.collect import collect

GREEDY = GenerationConfig(max_tokens=24, sampler=SamplerSettings(temperature=0.0))


def _answered(target: Path, draft: Path, threads: int = 1) -> ModelPair:
    pair = ModelPair.load(target, draft, LoadOptions(n_ctx=256, n_threads=threads))
    collect(pair.generate(pair.raw_prompt("The river runs"), GREEDY))
    return pair


def test_a_pair_loaded_again_starts_from_what_it_learnt(
    tiny_target: Path, tiny_draft: Path, tmp_path: Path
) -> None:
    file = tmp_path / "learnt.json"
    with _answered(tiny_target, tiny_draft) as first:
        assert first.costs != CostModel() and first.costs.plain_step_known  # (it did learn)
        learnt.keep(first, file)
        kept = costs_to_json(first.costs)
    with ModelPair.load(tiny_target, tiny_draft, LoadOptions(n_ctx=256, n_threads=1)) as again:
        assert again.costs == CostModel()
        assert learnt.restore(again, file)
        assert costs_to_json(again.costs) == kept
    # Another thread count times other steps: it learns anew.
    if (os.cpu_count() or 1) >= 2:
        with ModelPair.load(tiny_target, tiny_draft, LoadOptions(n_ctx=256, n_threads=2)) as other:
            assert not learnt.restore(other, file) and other.costs == CostModel()


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xff not json",
        b"[1, 2, 3]",
        b'{"%KEY%": {"when": 1e300, "costs": {}}}',
        b'{"%KEY%": {"when": %NOW%, "costs": {"drafters": {"model": {"accepted": NaN}}}}}',
        b'{"%KEY%": {"when": %NOW%, "costs": {"verify": {"1": [0.9, -1.0, 1.0]}, "drafters": {}}}}',
        b'{"%KEY%": {"when": %NOW%, "costs": {"verify": {"99999999": [0.9, 0.1, 1.0]}, "drafters": {}}}}',
        b'{"%KEY%": {"when": 0, "costs": %GOOD%}}',  # (learnt too long ago)
        b"[" * 100_000,
    ],
)
def test_a_damaged_or_hostile_file_costs_only_the_learning(
    tiny_target: Path, tiny_draft: Path, tmp_path: Path, content: bytes
) -> None:
    file = tmp_path / "learnt.json"
    with _answered(tiny_target, tiny_draft) as pair:
        good = json.dumps(costs_to_json(pair.costs)).encode()
        key = json.dumps(learnt.key(pair))[1:-1].encode()
        now = str(int(time.time())).encode()
        file.write_bytes(content.replace(b"%KEY%", key).replace(b"%NOW%", now).replace(b"%GOOD%", good))
        learned = pair.costs
        assert not learnt.restore(pair, file)
        assert pair.costs is learned  # (untouched)
        learnt.keep(pair, file)  # replaces what it could not use
        assert learnt.restore(pair, file)


def test_a_file_that_cannot_be_written_is_no_error(
    tiny_target: Path, tiny_draft: Path, tmp_path: Path
) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the directory should be")
    with _answered(tiny_target, tiny_draft) as pair:
        learnt.keep(pair, blocked / "learnt.json")  # (no exception: the next process learns anew)
        assert not learnt.restore(pair, blocked / "learnt.json")


def test_tandem_run_keeps_what_it_learnt_for_the_next_run(tiny_target: Path, tiny_draft: Path) -> None:
    args = ["run", "--target", str(tiny_target), "--draft", str(tiny_draft), "--raw", "-n", "16"]
    first = tandem(*args, "The river runs")
    assert first.returncode == 0, first.stderr
    file = learnt.learnt_file()
    ((key, entry),) = json.loads(file.read_text()).items()
    assert entry["costs"]["drafters"] and entry["costs"]["verify"]  # (timings and acceptance)
    # Mark what the next run starts from: a long-run acceptance resting on a million trials,
    # which its own rounds (a few dozen) cannot have produced.
    for d in entry["costs"]["drafters"].values():
        d["trials"], d["accepted"] = 1e6, 5e5
    file.write_text(json.dumps({key: entry}))
    second = tandem(*args, "The river runs")
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout  # (only how much is drafted may change, never the text)
    again = json.loads(file.read_text())[key]
    assert all(d["trials"] > 1e5 for d in again["costs"]["drafters"].values())


# ------------------------------------------------------------------ the batched engine's costs
def _served(target: Path, draft: Path, file: Path) -> list[int]:
    """A pair of two sequences as `tandem serve --parallel 2` opens it (restored from `file`),
    its engine ready and one greedy answer; kept into `file` at the end. Its answer."""
    from tandem.session.runner import Runner

    with ModelPair.load(target, draft, LoadOptions(n_ctx=256, n_threads=1, n_seq=2)) as pair:
        learnt.restore(pair, file)
        with Runner.open(pair, parallel=2) as runner:
            assert runner.ready.wait(60)
            events = list(runner.stream(pair.raw_prompt("The river runs"), GREEDY))
        learnt.keep(pair, file)
    return [e.id for e in events if isinstance(e, TokenEvent)]


def test_a_server_started_again_does_not_time_what_it_measured(
    tiny_target: Path, tiny_draft: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "learnt.json"
    timed: list[int] = []
    real = SeqContext.time_decodes

    def counted(self: SeqContext, *args: Any, **kwargs: Any) -> None:
        timed.append(1)
        real(self, *args, **kwargs)

    monkeypatch.setattr(SeqContext, "time_decodes", counted)
    first = _served(tiny_target, tiny_draft, file)
    assert len(timed) == 2  # the verify's sizes and the draft model's steps
    ((key, entry),) = json.loads(file.read_text()).items()
    assert sorted(entry["batch"]["2"]["calibrated"]) == ["draft", "verify"]
    second = _served(tiny_target, tiny_draft, file)
    assert len(timed) == 2  # nothing timed again
    assert second == first  # (only how much is drafted may change, never the text)
    served = json.loads(file.read_text())[key]["batch"]["2"]  # (its rounds went on updating it)
    # What single answers learnt is kept beside it, and a server's keeping does not erase it.
    with _answered(tiny_target, tiny_draft) as single:
        assert learnt.key(single) == key  # (one entry: the pair on this machine)
        learnt.keep(single, file)
        kept = costs_to_json(single.costs)
    assert json.loads(file.read_text())[key]["batch"]["2"] == served
    _served(tiny_target, tiny_draft, file)
    assert json.loads(file.read_text())[key]["costs"] == kept
    assert len(timed) == 2


def test_batch_costs_read_back_as_written_and_nothing_else() -> None:
    costs = BatchCosts()
    costs.verify.add(1, 0.01)
    costs.verify.add(5, 0.02)
    costs.table(None).add(1, 0.004)
    costs.table("mtp").add(2, 0.003)
    costs.calibrated = {"verify", "draft", "mtp"}
    back = batch_costs_from_json(json.loads(json.dumps(batch_costs_to_json(costs))))
    assert back is not None and batch_costs_to_json(back) == batch_costs_to_json(costs)
    assert back.verify.at(3) == costs.verify.at(3) and back.calibrated == costs.calibrated
    good = batch_costs_to_json(costs)
    hostile: list[object] = [
        None,
        [1, 2],
        {"tables": [], "calibrated": []},
        {"tables": {"verify": {"1": -0.01}}, "calibrated": []},
        {"tables": {"verify": {"1": float("nan")}}, "calibrated": []},
        {"tables": {"verify": {"1": True}}, "calibrated": []},
        {"tables": {"verify": {"0": 0.01}}, "calibrated": []},
        {"tables": {"verify": {"9" * 5000: 0.01}}, "calibrated": []},
        {"tables": {"verify": {"one": 0.01}}, "calibrated": []},
        {"tables": {"verify": {"1": 0.01}}, "calibrated": ["draft"]},  # (claims a table it lacks)
        {"tables": {"verify": {"1": 0.01}}, "calibrated": [{"a": 1}]},
        {**good, "tables": {f"k{i}": {"1": 0.01} for i in range(100)}},
    ]
    for x in hostile:
        assert batch_costs_from_json(x) is None, x
