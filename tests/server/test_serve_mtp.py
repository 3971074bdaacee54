"""`tandem serve --drafter mtp`: a target that drafts with its own heads (multi-token
prediction) answers exactly as `tandem run --json` does, and says who drafted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from catalogs import mtp_target, no_heads_target
from serve_helpers import serving
from tandem.cli.main import main
from tandem.engine import LoadOptions, ModelPair
from tandem.session.options import Options

FIXED = ("--no-adaptive", "--draft-max", "3", "-n", "32")  # fixed K: the same rounds, the same origins
MESSAGES = [{"role": "user", "content": "Write a story about the ocean and a lighthouse keeper."}]


@pytest.fixture(scope="module")
def mtp_pair() -> Iterator[ModelPair]:
    with ModelPair.load(mtp_target(), None, LoadOptions(n_ctx=1024, n_threads=1)) as pair:
        yield pair


def test_a_chat_completion_drafted_by_the_heads_is_tandem_run_s(
    mtp_pair: ModelPair, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["run", "--target", str(mtp_target()), "--ctx", "1024", "--threads", "1", "--json"]
    assert main([*args, "--drafter", "mtp", *FIXED, MESSAGES[0]["content"]]) == 0
    run: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert run["stats"]["drafter"] == "mtp" and run["stats"]["drafted"] > 0

    options = Options(n_threads=1, drafter="mtp", adaptive=False, draft_max=3)
    with serving(mtp_pair, options=options) as served:
        c = openai.OpenAI(base_url=served.v1, api_key="unused", max_retries=0)
        answer = c.chat.completions.create(model="test-pair", messages=MESSAGES, max_tokens=32)  # type: ignore[arg-type]
        assert answer.choices[0].message.content == run["text"]
        extra = answer.model_extra or {}
        origins = [t["origin"] for t in extra["tandem"]["tokens"]]
        assert origins == [t["origin"] for t in run["tokens"]] and "draft" in origins
        assert answer.usage is not None
        usage = answer.usage.model_extra or {}
        assert usage["tandem"]["drafter"] == "mtp" and usage["tandem"]["drafted"] == run["stats"]["drafted"]
        (model,) = c.models.list().data
        entry = (model.model_extra or {})["tandem"]
        assert entry["draft"] is None and entry["draft_heads"] is True and entry["drafter"] == "mtp"


def test_serve_mtp_without_heads_is_refused_before_loading(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--target", str(no_heads_target()), "--drafter", "mtp", "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"tandem: error: {Path(no_heads_target()).name} has no built-in draft heads (multi-token "
        "prediction layers): use a draft model (--draft) or prompt lookup (--drafter lookup)"
    ]
