"""Whether the hub answers (the picker's first-run probe), asked through the catalog's hub
client: the address HF_ENDPOINT names, huggingface_hub's session, one line when it cannot."""

from __future__ import annotations

import socket

import pytest

from hub_server import FakeHub
from tandem.catalog.hub_client import hub_reachable


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_hub_that_hf_endpoint_names_answers(hub: FakeHub) -> None:
    assert hub_reachable() == (True, "")  # (any status counts: an answer means the network is there)


def test_no_answer_is_one_line(hf_env: object, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("HF_ENDPOINT", url)
    online, why = hub_reachable(timeout_s=2.0)
    assert not online and why.startswith(f"{url} cannot be reached (") and "\n" not in why


def test_offline_and_unusable_addresses_are_said(hf_env: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_reachable() == (False, "HF_HUB_OFFLINE is set")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "ftp://mirror.example")
    online, why = hub_reachable()
    assert not online and why.startswith("HF_ENDPOINT is not a usable address ('ftp://mirror.example')")
