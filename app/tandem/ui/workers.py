"""Thread workers that can never close the app.

Textual ends the app when a worker raises (unless told otherwise), and a worker's failure is
reported only to the widget that started it. Every engine or I/O job of the app starts here:
its exceptions become a `WorkerFailed` message, which bubbles up to the app and is shown
there. Jobs still report the failures they expect (a pair that cannot load, a download that
fails) where the user is looking; this is the net under them."""

from __future__ import annotations

from collections.abc import Callable

from textual.dom import DOMNode
from textual.worker import Worker

from tandem.ui.messages import WorkerFailed


def run_in_thread(node: DOMNode, work: Callable[[], None], *, group: str, name: str = "") -> Worker[None]:
    """Run `work` in a thread worker of `node`; whatever it raises is posted as WorkerFailed."""
    label = name or group

    def guarded() -> None:
        try:
            work()
        except Exception as exc:
            node.post_message(WorkerFailed(label, exc))

    return node.run_worker(guarded, thread=True, group=group, name=label, exit_on_error=False)
