"""What `tandem bench` keeps per pair of files (session/measured.py): pure file logic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tandem.session import measured
from tandem.session.measured import Measurement, SettingResult

pytestmark = pytest.mark.fast


def _files(tmp_path: Path) -> tuple[Path, Path]:
    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    target.write_bytes(b"t" * 100)
    draft.write_bytes(b"d" * 10)
    return target, draft


_GOOD = {"speedup": 1.2, "acceptance": 0.5, "tokens_per_pass": 1.5}


def _m(**speedups: float) -> Measurement:
    return Measurement(
        {n: SettingResult(s, 0.5, 1.5) for n, s in speedups.items()}, 1795262400.0, "CPU", 30, 2
    )


def test_a_measurement_is_kept_per_pair_of_files(tmp_path: Path) -> None:
    target, draft = _files(tmp_path)
    store = tmp_path / "measured.json"
    assert measured.lookup(target, draft, store) is None
    measured.record(target, draft, _m(model=0.9, auto=1.12), store)
    got = measured.lookup(target, draft, store)
    assert got == _m(model=0.9, auto=1.12)
    assert got.headline == ("auto", SettingResult(1.12, 0.5, 1.5))  # auto is what Tandem runs
    assert got.summary().startswith("1.12x (auto, bench 20")
    assert measured.lookup(target, None, store) is None  # the target alone is another pair
    measured.record(target, None, _m(lookup=1.3), store)
    assert measured.lookup(target, None, store).headline[0] == "lookup"  # no auto: the best
    assert measured.lookup(target, draft, store) == _m(model=0.9, auto=1.12)


def test_a_replaced_file_is_not_credited_with_the_old_figure(tmp_path: Path) -> None:
    target, draft = _files(tmp_path)
    store = tmp_path / "measured.json"
    measured.record(target, draft, _m(auto=1.12), store)
    draft.write_bytes(b"another quantization")
    assert measured.lookup(target, draft, store) is None
    draft.unlink()
    assert measured.lookup(target, draft, store) is None  # gone: nothing, and no error


@pytest.mark.parametrize(
    "entry",
    [
        "nonsense",
        {"settings": {"auto": {"speedup": "fast", "acceptance": 0.5, "tokens_per_pass": 1}}},
        {"settings": {"auto": {"speedup": float("inf"), "acceptance": 0.5, "tokens_per_pass": 1}}},
        {"settings": {}, "when": 1, "device": "CPU", "prompts": 1, "runs": 1},
        {"settings": {"auto": {"speedup": -1, "acceptance": 0.5, "tokens_per_pass": 1}}},
        # Dates no bench wrote: time.localtime raised OverflowError on 1e300, in `tandem pairs`
        # and in the app's picker (which opens at the first start: the app could not start).
        *({"settings": {"auto": _GOOD}, "when": w} for w in (1e300, 2e11, -1.0, "1", True)),
    ],
)
def test_an_entry_it_did_not_write_is_ignored(tmp_path: Path, entry: object) -> None:
    target, draft = _files(tmp_path)
    store = tmp_path / "measured.json"
    key = measured.pair_key(target, draft)
    assert key is not None
    base = {"when": 1.0, "device": "CPU", "prompts": 1, "runs": 1}
    value = {**base, **entry} if isinstance(entry, dict) else entry
    store.write_text(json.dumps({key: value}))
    assert measured.lookup(target, draft, store) is None
    measured.record(target, draft, _m(auto=1.0), store)  # and it is replaced by a good one
    assert measured.lookup(target, draft, store) == _m(auto=1.0)


def test_a_date_a_bench_could_have_written_is_kept_and_shown(tmp_path: Path) -> None:
    target, draft = _files(tmp_path)
    store = tmp_path / "measured.json"
    key = measured.pair_key(target, draft)
    assert key is not None
    for when in (0, 1795262400, 9.9e10):  # the epoch, 2026, the year 5107
        entry = {"settings": {"auto": _GOOD}, "when": when, "device": "CPU", "prompts": 1, "runs": 1}
        store.write_text(json.dumps({key: entry}))
        got = measured.lookup(target, draft, store)
        assert got is not None and got.summary().startswith("1.20x (auto, bench ")


def test_from_a_bench_report_the_headline_setting_s_categories() -> None:
    group = {"speedup": 1.2, "acceptance_rate": 0.6, "tokens_per_round": 2.0}
    report = {
        "run": {"runs": 3},
        "prompts": [{}, {}],
        "overall": {"model": {**group, "speedup": 0.9}, "auto": group},
        "categories": {"code": {"model": {"speedup": 0.8}, "auto": {"speedup": 1.4}}},
    }
    m = measured.from_report(report, "CPU", exact=True)
    assert m is not None and m.runs == 3 and m.prompts == 2 and m.exact
    assert m.categories == {"code": 1.4} and m.headline[1].speedup == 1.2
    assert measured.from_report({"overall": {}}, "CPU", exact=False) is None
