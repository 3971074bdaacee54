"""A small stand-in for the Hugging Face hub's file API, for the download tests.

It speaks what huggingface_hub's `get_hf_file_metadata` and a resolve GET need:
HEAD/GET `/{owner}/{repo}/resolve/{revision}/{path}` with X-Repo-Commit, ETag and
X-Linked-Etag (the sha256 of LFS files), X-Linked-Size and Content-Length, Range requests
(206 + Content-Range), and the hub's error shapes (X-Error-Code: RepoNotFound,
EntryNotFound, RevisionNotFound, GatedRepo with 401 without a token and 403 with a refused one).

Test knobs: drop the connection after N body bytes (a number of times), serve corrupted
bytes under the right checksum, slow down the body, or claim a huge size. Hostile knobs (what a
malicious or broken HF_ENDPOINT could answer): any X-Repo-Commit or ETag header, bytes past the
announced size, a redirect loop, a redirect to an unusable address. Loopback only
(127.0.0.1, a free port), and a watchdog stops the server by itself if a test forgets.
Every request is logged (method, path, Range, Authorization) for assertions.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

CHUNK = 64 * 1024


@dataclass
class HubFile:
    path: Path  # served bytes come from here
    sha256: str
    size: int
    lfs: bool = True
    drop_after: int | None = None  # close the connection after this many body bytes...
    drops_left: int = 0  # ...this many times
    corrupt: bool = False  # flip a byte in the middle (the ETag still announces the original)
    chunk_delay_s: float = 0.0  # sleep between 64 KB chunks
    # Set: the body stops once `gate_after` bytes are sent until the event is set (at most 60 s),
    # so a test sees a download running however slow the machine (a delay alone races the UI).
    gate: threading.Event | None = None
    gate_after: int = CHUNK
    claimed_size: int | None = None  # announce this size in HEAD (disk-space tests)
    errors_left: int = 0  # answer this many GETs of the body with `error_status`...
    error_status: int = 500  # ...a server error, as the hub's CDN sometimes does
    errors_on_resume_only: bool = False  # only GETs with a Range header fail
    # Hostile answers (all off by default):
    commit_header: str | None = None  # sent as X-Repo-Commit instead of the real commit
    etag_header: str | None = None  # sent as ETag (and X-Linked-Etag) instead of the file's hash
    overrun_bytes: int = 0  # a GET sends this many zero bytes after the file's last byte...
    overrun_announced: bool = False  # ...in a body its Content-Length covers, else one ended by closing
    redirect_loop: tuple[str, ...] = ()  # these methods ("HEAD", "GET") redirect to the same URL
    redirect_get_to: str | None = None  # a GET redirects here (e.g. an address no client can fetch)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    range: str | None
    authorization: str | None


@dataclass
class FakeHub:
    files: dict[tuple[str, str], HubFile] = field(default_factory=dict)
    gated: set[str] = field(default_factory=set)
    tokens: set[str] = field(default_factory=lambda: {"hf_good_token"})
    requests: list[Request] = field(default_factory=list)
    lifetime_s: float = 300.0

    def __post_init__(self) -> None:
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()

    # ----------------------------------------------------------------- setup
    def add(self, repo_id: str, filename: str, source: Path, **knobs: object) -> HubFile:
        digest = hashlib.sha256()
        with source.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        f = HubFile(source, digest.hexdigest(), source.stat().st_size, **knobs)  # type: ignore[arg-type]
        self.files[(repo_id, filename)] = f
        return f

    @staticmethod
    def commit(repo_id: str) -> str:
        return hashlib.sha1(repo_id.encode()).hexdigest()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeHub:
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        watchdog = threading.Timer(self.lifetime_s, self.stop)
        watchdog.daemon = True
        watchdog.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def gets(self, filename: str) -> list[Request]:
        return [r for r in self.requests if r.method == "GET" and r.path.endswith("/" + filename)]

    def log(self, r: Request) -> None:
        with self._lock:
            self.requests.append(r)


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # keep test output clean
        pass

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _error(self, status: int, code: str | None, message: str, commit: str | None = None) -> None:
        body = f'{{"error": "{message}"}}'.encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)

    def _serve(self, body: bool) -> None:
        hub = self.hub
        hub.log(
            Request(
                self.command, unquote(self.path), self.headers.get("Range"), self.headers.get("Authorization")
            )
        )
        # Split before unquoting, so a revision with an encoded "/" stays one part.
        parts = [unquote(p) for p in self.path.split("?", 1)[0].lstrip("/").split("/")]
        if len(parts) < 5 or parts[2] != "resolve":
            self._error(404, None, "Not found")
            return
        repo_id, revision, filename = f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:])
        known_repos = {r for r, _ in hub.files}
        if repo_id not in known_repos:
            self._error(404, "RepoNotFound", "Repository not found")
            return
        commit = hub.commit(repo_id)
        if repo_id in hub.gated:
            auth = self.headers.get("Authorization") or ""
            token = auth.removeprefix("Bearer ").strip()
            if not token:
                self._error(
                    401, "GatedRepo", f"Access to model {repo_id} is restricted. Please log in.", commit
                )
                return
            if token not in hub.tokens:
                self._error(
                    403,
                    "GatedRepo",
                    f"Access to model {repo_id} is restricted and you are not in the authorized list.",
                    commit,
                )
                return
        f = hub.files.get((repo_id, filename))
        if revision not in ("main", commit) and (f is None or revision != f.commit_header):
            self._error(404, "RevisionNotFound", "Invalid rev id", commit)
            return
        if f is None:
            self._error(404, "EntryNotFound", f"{filename} does not exist", commit)
            return
        if self.command in f.redirect_loop or (body and f.redirect_get_to):
            self._redirect(f.redirect_get_to if body and f.redirect_get_to else self.path)
            return
        if f.commit_header is not None:
            commit = f.commit_header

        if body:
            with hub._lock:
                failing = f.errors_left > 0 and (self.headers.get("Range") or not f.errors_on_resume_only)
                if failing:
                    f.errors_left -= 1
            if failing:
                self._error(f.error_status, None, "Internal Error")
                return

        start, status = 0, 200
        rng = self.headers.get("Range")
        if rng and body:
            first = rng.removeprefix("bytes=").split("-", 1)[0]
            start = int(first) if first else 0
            if start >= f.size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{f.size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        size = f.claimed_size if (f.claimed_size and not body) else f.size
        etag = f.sha256 if f.lfs else hashlib.sha1(b"blob %d\0" % f.size + f.path.read_bytes()).hexdigest()
        if f.etag_header is not None:
            etag = f.etag_header
        overrun = f.overrun_bytes if body else 0
        self.send_response(status)
        self.send_header("X-Repo-Commit", commit)
        self.send_header("ETag", f'"{etag}"')
        if f.lfs:
            self.send_header("X-Linked-Etag", f'"{etag}"')
            self.send_header("X-Linked-Size", str(size))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        if overrun and not f.overrun_announced:
            self.send_header("Connection", "close")  # no length: the body ends when the server closes
            self.close_connection = True
        else:
            self.send_header("Content-Length", str(size - start + overrun))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{f.size - 1}/{f.size}")
        self.end_headers()
        if not body:
            return

        limit = None
        with hub._lock:
            if f.drop_after is not None and f.drops_left > 0:
                f.drops_left -= 1
                limit = f.drop_after
        sent = 0
        middle = f.size // 2
        with f.path.open("rb") as src:
            src.seek(start)
            pos = start
            while pos < f.size:
                n = CHUNK if limit is None else min(CHUNK, limit - sent)
                if n <= 0:
                    self.close_connection = True  # drop it mid-body: the client sees a short read
                    self.wfile.flush()
                    return
                chunk = src.read(n)
                if not chunk:
                    break
                if f.corrupt and pos <= middle < pos + len(chunk):
                    b = bytearray(chunk)
                    b[middle - pos] ^= 0xFF
                    chunk = bytes(b)
                try:
                    self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    return
                pos += len(chunk)
                sent += len(chunk)
                if f.gate is not None and sent - len(chunk) < f.gate_after <= sent:
                    self.wfile.flush()
                    f.gate.wait(60)
                if f.chunk_delay_s:
                    time.sleep(f.chunk_delay_s)
        self._send_zeros(overrun)

    def _send_zeros(self, n: int) -> None:
        """The bytes a hostile server keeps sending after the end of the file."""
        zeros = bytes(CHUNK)
        while n > 0:
            try:
                self.wfile.write(zeros[: min(n, CHUNK)])
            except (BrokenPipeError, ConnectionResetError):
                return  # the client stopped reading, as it should
            n -= CHUNK

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()
