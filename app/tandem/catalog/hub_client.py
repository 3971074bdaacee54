"""Talking to the Hugging Face hub (or HF_ENDPOINT's mirror) about files: what a file is now
(its commit, ETag and size, pinned for the download), whether the hub answers at all, and the
one-line errors for what it says. The transfer itself is hub.py's.

Every request goes through huggingface_hub's shared HTTP session: its proxies (HTTPS_PROXY,
NO_PROXY), its user agent and its auth headers (HF_TOKEN or `hf auth login`), at the address
HF_ENDPOINT names. The server is not trusted: its commit must be a commit hash, and an ETag
that is not a hash only names a blob through its sha256 (hub.py explains why).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from tandem import __version__
from tandem.engine.errors import TandemError

from .hub_cache import COMMIT_RE, DEFAULT_ENDPOINT, hub_endpoint, offline_mode
from .spec import ModelFile

try:  # huggingface_hub 2.x talks through httpx2, 1.x through httpx
    import httpx2 as http
except ImportError:  # pragma: no cover - huggingface_hub 1.x
    import httpx as http  # type: ignore[no-redef]

CONNECT_TIMEOUT_S = 15.0
PROBE_TIMEOUT_S = 4.0  # whether the hub answers at all: a first run without network waits this long
HEX64 = re.compile(r"[0-9a-f]{64}")
HEX40 = re.compile(r"[0-9a-f]{40}")


class DownloadError(TandemError):
    """A model could not be downloaded; the message says why and what to do."""


@dataclass(frozen=True)
class Remote:
    """One file as the hub describes it now, pinned to a commit."""

    repo_id: str
    filename: str
    commit: str  # 40 lowercase hex digits (checked): the snapshot folder's name
    etag: str  # lowercased when it is a hash (the checksum to compare), else as the server sent it
    blob: str  # the blob's file name: the ETag if it is a hash, else a sha256 of it
    size: int | None
    url: str  # resolve URL at the commit, so every retry fetches the very same bytes


def _token_present() -> bool:
    with contextlib.suppress(Exception):
        from huggingface_hub import get_token

        return get_token() is not None
    return False


def remote_file(f: ModelFile, filename: str) -> Remote:
    """Ask the hub what `filename` is now: commit, ETag (sha256) and size."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    endpoint = checked_endpoint()
    page = f"{endpoint}/{f.repo_id}"
    url = hf_hub_url(f.repo_id, filename, revision="main", endpoint=endpoint)
    try:
        meta = get_hf_file_metadata(
            url,
            timeout=CONNECT_TIMEOUT_S,
            library_name="tandem",
            library_version=__version__,
            endpoint=endpoint,
        )
    except GatedRepoError as exc:
        raise DownloadError(_gated_message(f.repo_id, page, exc.response.status_code)) from None
    except RemoteEntryNotFoundError:
        raise DownloadError(
            f"{filename} is not in {f.repo_id} on {endpoint} (404): the file may have been renamed; "
            f"check {page} and your catalog entry."
        ) from None
    except RevisionNotFoundError:
        raise DownloadError(f"{f.repo_id} has no branch 'main' on {endpoint}.") from None
    except RepositoryNotFoundError as exc:
        status = exc.response.status_code
        if status in (401, 403) and f.gated:
            raise DownloadError(_gated_message(f.repo_id, page, status)) from None
        auth = (
            " (or it is private and your HF_TOKEN cannot see it)"
            if _token_present()
            else " (or it is private or gated: set HF_TOKEN to an access token)"
        )
        raise DownloadError(f"repository {f.repo_id} was not found on {endpoint}{auth}.") from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code
        if status in (401, 403):
            raise DownloadError(_gated_message(f.repo_id, page, status)) from None
        if status == 404:
            raise DownloadError(f"{f.repo_id}/{filename} was not found on {endpoint} (404).") from None
        raise DownloadError(
            f"the hub at {endpoint} answered {status} for {f.repo_id}/{filename}; try again later."
        ) from None
    except OfflineModeIsEnabled:
        raise DownloadError(
            f"offline mode (HF_HUB_OFFLINE) is on and {f.repo_id}/{filename} is not in the Hugging Face "
            "cache. Connect and unset HF_HUB_OFFLINE to download it."
        ) from None
    except http.TooManyRedirects:
        raise DownloadError(
            f"{endpoint} redirects {f.repo_id}/{filename} in a loop; "
            "check HF_ENDPOINT and any proxy settings."
        ) from None
    except (http.TransportError, OSError) as exc:
        raise DownloadError(
            f"cannot reach {endpoint} ({reason(exc)}). Check your connection, or set HF_HUB_OFFLINE=1 "
            "to use only models already downloaded."
        ) from None
    except (http.RequestError, http.InvalidURL, ValueError) as exc:  # e.g. a malformed redirect
        raise DownloadError(
            f"{endpoint} answered for {f.repo_id}/{filename} with something Tandem cannot follow "
            f"({reason(exc)}); check HF_ENDPOINT and any proxy settings."
        ) from None
    if not meta.commit_hash or not meta.etag:
        raise DownloadError(
            f"{endpoint} did not answer like the Hugging Face hub "
            f"(no commit or ETag for {f.repo_id}/{filename}); "
            "check HF_ENDPOINT and any proxy settings."
        )
    commit = meta.commit_hash.lower()
    if not COMMIT_RE.fullmatch(commit):
        # It names the snapshot folder: anything but a commit hash could lead out of the cache.
        raise DownloadError(
            f"{endpoint} sent an invalid X-Repo-Commit header {meta.commit_hash[:80]!r} for "
            f"{f.repo_id}/{filename} (a commit is 40 hex digits); check HF_ENDPOINT and any proxy settings."
        )
    etag, blob = _etag_and_blob_name(meta.etag)
    pinned = hf_hub_url(f.repo_id, filename, revision=commit, endpoint=endpoint)
    return Remote(f.repo_id, filename, commit, etag, blob, meta.size, pinned)


def checked_endpoint() -> str:
    """HF_ENDPOINT, if it is an http(s) URL with a host: anything else is a setup mistake to name,
    not a network failure to retry (and some would crash the HTTP client)."""
    endpoint = hub_endpoint()
    try:
        parts = urlsplit(endpoint)
        usable = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        usable = False
    if not usable:
        raise DownloadError(
            f"HF_ENDPOINT is not a usable address ({os.environ.get('HF_ENDPOINT', '')!r}): "
            f"set it to an http(s) URL such as {DEFAULT_ENDPOINT}, or unset it."
        )
    return endpoint


def _etag_and_blob_name(etag: str) -> tuple[str, str]:
    """(the ETag to verify against, the blob's file name). The hub's ETags are a sha256 (LFS) or a
    git sha1; any other header value (a mirror's own, or a hostile path) never becomes a path
    itself: its sha256 names the blob, and the download is only checked by size."""
    low = etag.lower()
    if HEX64.fullmatch(low) or HEX40.fullmatch(low):
        return low, low
    return etag, hashlib.sha256(etag.encode()).hexdigest()


def _gated_message(repo_id: str, page: str, status: int) -> str:
    if not _token_present():
        return (
            f"{repo_id} is gated: accept its license at {page}, then set HF_TOKEN to an access token "
            "(https://huggingface.co/settings/tokens) or run `hf auth login`, and try again."
        )
    return (
        f"the hub refused your token for {repo_id} ({status}): request access at {page} (it is gated) "
        "and check that the token in HF_TOKEN can read gated repositories."
    )


def reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]


def hub_reachable(timeout_s: float = PROBE_TIMEOUT_S) -> tuple[bool, str]:
    """(True, "") when the hub answers at all (any HTTP status counts: even an error page means
    the network is there); else (False, why), in a few seconds at most."""
    if offline_mode():
        return False, "HF_HUB_OFFLINE is set"
    try:
        endpoint = checked_endpoint()
    except DownloadError as exc:
        return False, str(exc)
    from huggingface_hub import get_session

    try:
        get_session().head(endpoint, timeout=timeout_s)
    except (http.TransportError, OSError) as exc:
        return False, f"{endpoint} cannot be reached ({reason(exc)})"
    except (http.RequestError, http.InvalidURL, ValueError) as exc:  # a redirect loop, a bad address
        return False, f"{endpoint} answered with something Tandem cannot follow ({reason(exc)})"
    return True, ""
