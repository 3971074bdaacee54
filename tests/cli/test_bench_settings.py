"""`tandem bench --compare` specs: drafter, fixed K and p-min options."""

from __future__ import annotations

import pytest

from tandem.bench.settings import parse_settings
from tandem.engine import GenerationConfig, TandemError

pytestmark = pytest.mark.fast  # pure logic: the fast lane (pytest -m fast)

BASE = GenerationConfig(max_tokens=16, draft_max=12, adaptive=True, drafter="auto", p_min=0.0)


def test_options_combine_in_any_order() -> None:
    settings = parse_settings("model,model:k=8,model:p=0.2,auto:k=5:p=0.3,lookup:p=0.25:k=3", BASE)
    by_name = {s.name: s.config for s in settings}
    assert by_name["model"].adaptive and by_name["model"].p_min == 0.0
    assert not by_name["model:k=8"].adaptive and by_name["model:k=8"].draft_max == 8
    assert by_name["model:p=0.2"].adaptive and by_name["model:p=0.2"].p_min == 0.2
    assert by_name["model:p=0.2"].draft_max == 12  # adaptive keeps the run's --draft-max
    auto = by_name["auto:k=5:p=0.3"]
    assert (auto.drafter, auto.adaptive, auto.draft_max, auto.p_min) == ("auto", False, 5, 0.3)
    lookup = by_name["lookup:p=0.25:k=3"]
    assert (lookup.drafter, lookup.draft_max, lookup.p_min) == ("lookup", 3, 0.25)


@pytest.mark.parametrize(
    "spec", ["model:p=1", "model:p=-0.1", "model:p=x", "model:k=99", "model:q=3", "draft"]
)
def test_bad_options_are_refused_with_the_way_to_write_them(spec: str) -> None:
    with pytest.raises(TandemError, match="--compare"):
        parse_settings(spec, BASE)
