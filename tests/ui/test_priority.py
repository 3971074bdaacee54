"""The UI thread yields the CPU to the engine: it runs at a lowered priority, and the threads
that run the engine (and every thread they start) keep the normal one.

A lowered priority cannot be raised again by an unprivileged process, so these run in child
processes (pytest's own thread must keep its priority for the tests after them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")


def run_child(script: str, *args: str) -> dict[str, object]:
    # ui_helpers imports from tests/ too
    path = os.pathsep.join(str(p) for p in (ROOT, ROOT / "tests", ROOT / "tests" / "ui"))
    env = {**os.environ, "PYTHONPATH": path, "TANDEM_UI_NICE": "19"}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_pool_threads_keep_normal_priority_under_a_lowered_thread() -> None:
    got = run_child(
        """
        import asyncio, json, threading, time
        from tandem.ui.priority import WorkerPool, lower_this_thread, thread_nice

        def nice_of_new_thread():
            seen = []
            t = threading.Thread(target=lambda: seen.append(thread_nice()))
            t.start(); t.join()
            return seen[0]

        async def main():
            loop = asyncio.get_running_loop()
            loop.set_default_executor(WorkerPool())
            before = thread_nice()
            lowered = lower_this_thread(19)
            def work():
                return thread_nice(), nice_of_new_thread()

            def slow_work():
                time.sleep(0.2)
                return work()

            first = await loop.run_in_executor(None, work)
            # Two at once: the second needs a new pool thread, started after the lowering.
            both = await asyncio.gather(
                loop.run_in_executor(None, slow_work), loop.run_in_executor(None, work)
            )
            return dict(
                before=before, lowered=lowered, ui=thread_nice(), first=first, both=both,
                direct=nice_of_new_thread(),
            )

        print(json.dumps(asyncio.run(main())))
        """
    )
    assert got["before"] == 0 and got["lowered"] is True and got["ui"] == 19
    # A pool thread and the threads it starts (llama.cpp's) have the normal priority...
    assert got["first"] == [0, 0]
    assert got["both"] == [[0, 0], [0, 0]]
    # ...while a thread the lowered thread starts itself would inherit its priority: why the
    # pool starts its threads from a launcher.
    assert got["direct"] == 19


def test_the_app_lowers_its_ui_thread_and_not_the_engine(
    tiny_target: Path, tiny_draft: Path, tmp_path: Path
) -> None:
    got = run_child(
        """
        import asyncio, json, os, sys, threading
        from pathlib import Path
        from tandem.ui.app import TandemApp
        from tandem.ui.priority import thread_nice
        from tandem.session.refs import PairRef
        from tandem.ui.settings import save_settings
        from tandem.ui.storage import AppDirs
        from ui_helpers import FIXED, start_sending, wait_for, wait_ready

        target, draft, tmp = sys.argv[1:4]
        dirs = AppDirs.under(Path(tmp))
        save_settings(dirs.settings_file, FIXED)
        app = TandemApp(dirs=dirs, pair=PairRef(Path(target), Path(draft)))
        seen = {}

        async def main():
            async with app.run_test(size=(100, 30)) as pilot:
                await wait_ready(pilot)
                await start_sending(pilot, "Hi")
                await wait_for(pilot, lambda: app.chat.job is None, 120, "answer")
                workers = [t for t in threading.enumerate() if t.name.startswith("tandem-worker")]
                seen.update(
                    ui=thread_nice(),
                    lowered=app.ui_lowered,
                    workers=[os.getpriority(os.PRIO_PROCESS, t.native_id) for t in workers],
                    answered=len(app.chat.conv.turns),
                )

        asyncio.run(main())
        print(json.dumps(seen))
        """,
        str(tiny_target),
        str(tiny_draft),
        str(tmp_path),
    )
    assert got["lowered"] is True and got["ui"] == 19
    assert got["answered"] == 2  # the question and its answer: the engine ran
    # Loading and generating ran on pool threads, all at the normal priority.
    assert got["workers"] and got["workers"] == [0] * len(got["workers"])  # type: ignore[arg-type]
