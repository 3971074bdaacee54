"""The app with a trained drafter (EAGLE-3, DFlash) shipped beside its target: the picker's On
disk tab offers it under the target with its kind (not as a model of its own), Enter loads the
pair, and the chat colours its accepted guesses and the panel counts its rounds, from the
drafter data alone."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import DataTable
from ui_helpers import in_lm_studio, picker, run_app, send, wait_for

import trained
from tandem.engine import Origin
from tandem.session.refs import PairRef
from tandem.ui.app import TandemApp
from tandem.ui.screens.picker import PickerScreen
from tandem.ui.storage import AppDirs
from tandem.ui.widgets.chat_log import AnswerView
from tandem.ui.widgets.stats import StatsPanel


def test_the_picker_offers_a_drafter_beside_its_target_and_the_chat_drafts_with_it(
    dirs: AppDirs, hf_env: Path
) -> None:
    models = in_lm_studio(
        "test/tiny",
        {"tiny-target-F32.gguf": trained.target(), "eagle3-tiny-target-F32.gguf": trained.eagle3()},
    )
    target = models / "tiny-target-F32.gguf"
    app = TandemApp(dirs=dirs)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen), 10)
        p = picker(app)
        await wait_for(pilot, lambda: p.disk, 20, "disk")
        disk = p.query_one("#disk", DataTable)
        rows = [disk.get_row_at(i) for i in range(disk.row_count)]
        # The drafter is not listed as a model: it is offered under its target.
        assert [(r[0], r[-1]) for r in rows] == [("tiny-target-F32.gguf", "EAGLE-3")]
        disk.focus()
        disk.move_cursor(row=0)
        await pilot.pause()
        drafts = p.query_one("#drafts", DataTable)
        assert drafts.row_count == 1
        assert [str(c) for c in drafts.get_row_at(0)][:3] == ["eagle3-tiny-target-F32.gguf", "–", "EAGLE-3"]
        await pilot.press("enter")  # to the drafts table
        await pilot.press("enter")  # loads the pair
        await wait_for(pilot, lambda: app.loaded is not None, 30, "load")
        assert app.loaded.ref == PairRef(target, models / "eagle3-tiny-target-F32.gguf")
        await send(pilot, "Tell me a story about the sea")
        answer = list(app.chat.query(AnswerView))[-1]
        assert {Origin.DRAFT, Origin.TARGET} <= {o for _, o in answer.tokens.pieces}
        view = app.chat.query_one(StatsPanel).view
        assert view.drafted > 0 and view.eagle3_rounds > 0

    run_app(app, scenario)


def test_tandem_chat_with_a_target_alone_skips_a_companion_that_cannot_load(
    dirs: AppDirs, tmp_path: Path
) -> None:
    """`tandem chat --target X`: the drafters found beside X are tried in order; one llama.cpp
    refuses is skipped with a note, the next drafts, and the app keeps the pair that loaded."""
    from catalogs import link_or_copy
    from gguf_edit import with_metadata
    from tandem.cli.chat_cmd import app_for
    from tandem.cli.options import ChatOptions
    from tandem.session.options import Options
    from tandem.session.refs import PairRequest

    folder = tmp_path / "models"
    target = link_or_copy(trained.target(), folder / "tiny-target.gguf")
    broken = with_metadata(
        trained.eagle3(), folder / "eagle3-broken.gguf", {"eagle3.attention.head_count": 0}
    )
    good = link_or_copy(trained.dflash(), folder / "dflash-good.gguf")
    opts = ChatOptions(PairRequest(target=target), False, Options(n_threads=1))
    app = app_for(opts, dirs=dirs)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda: app.loaded is not None, 30, "load")
        assert app.loaded.ref == PairRef(target, good) and app.loaded.pair.draft_file == good
        # (the notes the app shows above the chat when a pair loads)
        notes = app.loaded.pair.notes
        assert any(n.startswith(f"{broken.name}, found beside tiny-target.gguf, is not used") for n in notes)

    run_app(app, scenario)
