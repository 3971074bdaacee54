"""`tandem serve`: a pair behind an OpenAI-compatible HTTP API (app/server/)."""

from __future__ import annotations

import argparse
import os
import socket
import sys

from tandem.cli.fetch import terminal_fetch
from tandem.cli.options import (
    ServeOptions,
    add_generation_options,
    add_model_options,
    add_think_option,
    serve_options,
)
from tandem.engine import (
    MAX_SEQUENCES,
    GenerationConfig,
    LoadOptions,
    TandemError,
    read_gguf,
    rollback_of,
    state_kind,
)
from tandem.session.drafting import drafted_by
from tandem.session.pairs import open_pair
from tandem.session.refs import PairRef

DEFAULT_PORT = 8080
# The most requests answered at once when --parallel is not given (memory permitting): past it a
# CPU's batch is wide enough that drafting has stopped paying (engine/decoding/batch_costs.py).
PARALLEL_DEFAULT_MAX = 8  # llama.cpp's llama-server's, which clients offer first for a local server


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a pair over an OpenAI-compatible HTTP API",
        description="Serve speculative decoding to other tools over an OpenAI-compatible API: "
        "POST /v1/chat/completions and /v1/completions (streaming or not), GET /v1/models and "
        "/health. Each answer also says where its tokens came from (the `tandem` field). "
        "Request fields (temperature, max_tokens, stop...) override these flags per request.",
    )
    add_model_options(p)
    add_generation_options(p, max_tokens=None)
    add_think_option(p)  # the default; a request's chat_template_kwargs decide for it
    p.add_argument("--baseline", action="store_true", help="serve the target alone (no draft)")
    g = p.add_argument_group("server")
    g.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)"
    )
    g.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT}; 0 picks a free one)"
    )
    g.add_argument(
        "--api-key",
        default=os.environ.get("TANDEM_API_KEY") or None,
        metavar="KEY",
        help="require 'Authorization: Bearer KEY' on /v1/ requests (default: $TANDEM_API_KEY, else none)",
    )
    g.add_argument(
        "--queue",
        type=int,
        default=32,
        metavar="N",
        help="requests that may wait while one is answered; more get HTTP 429 (default: 32)",
    )
    g.add_argument(
        "--parallel",
        type=int,
        default=None,
        metavar="N",
        help="requests answered at once, decoded together in one batch, each with the full context "
        f"(default: as many as memory allows, at most {PARALLEL_DEFAULT_MAX}; 1: one at a time)",
    )
    g.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests addressed to this host name (a reverse proxy's; repeatable; '*' for "
        "any). Others get HTTP 403, a guard against DNS rebinding: by default the server answers to "
        "localhost and loopback addresses, and with --host beyond loopback also to this machine's "
        "names and any IP address",
    )
    g.add_argument(
        "--max-body",
        type=float,
        default=None,
        metavar="MIB",
        help="largest request body in MiB; larger get HTTP 413 (default: 64 bytes per token of context, "
        "at least 4 MiB)",
    )
    g.add_argument(
        "--private-cache",
        action="store_true",
        help="reuse no other request's cached prompt for a request without a prompt_cache_key (or "
        "user) field. By default such requests share the cache: a client can tell from the "
        "`cached_tokens` it is told (and from its speed) how the prompts and answers of other "
        "clients' recent requests began; a request with a key reuses only its key's cache",
    )
    g.add_argument(
        "--name",
        metavar="NAME",
        help="the model name clients use (default: the pair's, or the target's file name)",
    )
    p.set_defaults(func=serve, options=serve_options)


def cache_sharing(private: bool) -> str:
    """The start's line on who reuses whose cached prompts (what a shared cache reveals)."""
    if private:
        return "cache: a request reuses cached prompts only of requests with its prompt_cache_key (or user)"
    return (
        "cache: requests without a prompt_cache_key (or user) share cached prompts: each can learn how "
        "the others' recent prompts and answers began (--private-cache stops it)"
    )


def model_id(ref: PairRef) -> str:
    return ref.name or ref.target.name.removesuffix(".gguf")


def parallel_sequences(ref: PairRef, options: LoadOptions, asked: int | None) -> tuple[int, str]:
    """How many requests to answer at once, and the sentence that says so: as asked when memory
    holds them (else a TandemError saying how many it holds); by default as many as it holds up
    to PARALLEL_DEFAULT_MAX, or one where the pair's drafting or state serves one sequence at a
    time (its own heads or a trained drafter found beside it: they draft for parallel sequences
    one after another, each in a context of its own; a recurrent or hybrid target serves several
    when asked, with --parallel N: one llama.cpp rolls back itself within its snapshots, one
    Tandem checkpoints with a copy of each drafting sequence's state a round)."""
    from tandem.catalog.fit import sequences_fit

    fit, where = sequences_fit(ref.target, ref.draft, options.n_ctx)
    each = f"{options.n_ctx:,} tokens of context each"
    if asked is not None:
        if asked > max(1, fit):
            raise TandemError(
                f"{where} holds {fit} sequences of {options.n_ctx:,} tokens beside the models, not "
                f"{asked}: use --parallel {max(1, fit)} or a smaller --ctx"
            )
        n = asked
        why = f"up to {n} requests at once ({each}; --parallel)"
    else:
        info = read_gguf(ref.target)
        single = (
            "its recurrent state is copied before each round that drafts (Tandem's checkpoints)"
            if rollback_of(info.architecture) == "checkpoint"
            else "its state is recurrent"
            if state_kind(info.architecture) != "attention"
            else "its own heads draft for one sequence after another"
            if info.mtp_layers
            else f"its {ref.draft_kind} drafter drafts for one sequence after another"
            if ref.draft_kind
            else "the drafter found beside it drafts for one sequence after another"
            if ref.companions
            else None
        )
        if single is not None:
            return 1, f"one request at a time: {single} (--parallel N for several)"
        n = max(1, min(PARALLEL_DEFAULT_MAX, fit))
        why = f"up to {n} requests at once ({each}; memory holds {fit}; --parallel N to choose)"
    return n, why if n > 1 else "one request at a time (--parallel 1)"


def serve(opts: ServeOptions) -> int:
    from tandem.server import ServeSettings, loopback_host
    from tandem.server.run import bind
    from tandem.server.run import serve as run_server

    if not 0 <= opts.port <= 65535:
        raise TandemError("the port must be between 0 and 65535")
    if opts.queue < 0:
        raise TandemError("the queue length must be 0 or more")
    if opts.max_body is not None and not 0 < opts.max_body < 2**20:
        raise TandemError("the body limit (--max-body) must be a positive number of MiB")
    if opts.parallel is not None and not 1 <= opts.parallel <= MAX_SEQUENCES:
        raise TandemError(f"--parallel must be between 1 and {MAX_SEQUENCES}")
    options = opts.options
    speculative = not opts.baseline
    sockets: list[socket.socket] = []
    said: list[str] = []

    def sequences(ref: PairRef, options: LoadOptions) -> int:
        n, why = parallel_sequences(ref, options, opts.parallel)
        said.append(why)
        return n

    def bind_first(ref: PairRef, config: GenerationConfig) -> None:
        sockets.append(bind(opts.host, opts.port))  # before loading: a port in use is found at once

    try:
        with open_pair(
            opts.models,
            options,
            fetch=terminal_fetch(yes=opts.yes),
            speculative=speculative,
            raw_hint=False,
            before_load=bind_first,
            sequences=sequences,
        ) as opened:
            pair, ref, sock = opened.pair, opened.ref, sockets[0]
            for note in opened.notes:
                print(f"note: {note}", file=sys.stderr)
            name = opts.name or model_id(ref)
            settings = ServeSettings(
                model_id=name,
                options=options,
                speculative=speculative,
                api_key=opts.api_key,
                max_waiting=opts.queue,
                spec=ref.spec,
                host=opts.host,
                allowed_hosts=tuple(opts.allow_host),
                max_body=None if opts.max_body is None else int(opts.max_body * 2**20),
                parallel=pair.target.options.n_seq,
                private_cache=opts.private_cache,
            )
            host, port = sock.getsockname()[:2]
            shown = f"[{host}]" if ":" in host else host

            def ready() -> None:
                how = drafted_by(pair, options.drafter, speculative=speculative)
                print(f"tandem serve: {name} ({how}) at http://{shown}:{port}/v1", file=sys.stderr)
                for line in said:
                    print(f"tandem serve: {line}", file=sys.stderr)
                if not loopback_host(opts.host) and not opts.api_key:
                    print(
                        "tandem serve: warning: listening beyond this machine without --api-key: anyone "
                        "who can reach the port can use the model",
                        file=sys.stderr,
                    )
                print(f"tandem serve: {cache_sharing(opts.private_cache)}", file=sys.stderr)
                print("tandem serve: Ctrl+C stops", file=sys.stderr, flush=True)

            # (BatchEngine.calibrate: seconds before the server says ready, unless an earlier
            # server measured this pair here: session/learnt.py)
            if settings.parallel > 1 and pair.batch_costs is None:
                print("tandem serve: timing this machine's batches first...", file=sys.stderr, flush=True)
            run_server(pair, settings, sock, ready)
    finally:
        for sock in sockets:
            sock.close()
    print("tandem serve: stopped", file=sys.stderr)
    return 0
