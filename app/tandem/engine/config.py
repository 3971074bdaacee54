"""What a generation is asked to do and how models are loaded: the defaults every front-end
shares.

The CLI, the app, the benchmark and the catalog all start from these defaults; a catalog pair
or a user's own choice overrides them (app/session/options.py layers them, once). No llama.cpp
here: the catalog imports this module without loading the bindings.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .errors import TandemError
from .sampling import SamplerSettings

if TYPE_CHECKING:  # (only a type: the events' modules and reasoning.py need no config)
    from .reasoning import ReasoningSplit

# The largest verification batch (K + 1 rows of logits): contexts are created for it.
DRAFT_MAX_LIMIT = 32

# Most tokens drafted per round when adaptive drafting picks K (0..this) each round: measured on
# the SmolLM2 pair (docs/results/history.md), adaptive drafting did best with room to go up to 12.
ADAPTIVE_K_MAX = 12

# Draft length when K is fixed (--no-adaptive, or seeded sampling): the best fixed K measured
# on the reference pair. Seeded sampling drafts a fixed K because adaptive K follows measured
# timings, and a different schedule consumes the random stream differently: the sample would
# be equally valid but not the same from run to run, and a seed asks for repeatable output.
FIXED_K = 5

# The most stop strings one generation watches for (a server request's list included).
MAX_STOPS = 16


def check_stops(stops: Sequence[object]) -> None:
    """The one rule for stop strings, wherever they come from (`--stop`, a server request):
    at most MAX_STOPS, each a non-empty string. ValueError says what is wrong, in one sentence
    (the server answers it with a 400, the CLI prints it): an empty one would match before the
    first token and could only be a mistake."""
    if len(stops) > MAX_STOPS:  # counted first: a long list is refused at once
        raise ValueError(f"at most {MAX_STOPS} stop strings")
    if not all(isinstance(s, str) for s in stops):
        raise ValueError("a stop string must be a string")
    if any(not s for s in stops):
        raise ValueError("a stop string must not be empty")


# Who drafts: one drafter kind by name, or auto (each round, whichever kind the pair has promises
# more tokens per second). The kinds are the registry's (drafters/registry.py: choices(), which
# also checks a choice); this module names none.
DrafterChoice = str


@dataclass(frozen=True)
class GenerationConfig:
    max_tokens: int = 256
    # K: most tokens drafted per round. None: ADAPTIVE_K_MAX when K is chosen each round,
    # FIXED_K when it is fixed (see `k_max`).
    draft_max: int | None = None
    # Choose K per round (0..draft_max) from measured acceptance and costs; off: always K.
    adaptive: bool = True
    # Stop a draft run early when the draft's own top probability falls below this: such
    # guesses are usually rejected, and each costs a draft step. Depends on the draft alone,
    # so it never changes the output.
    p_min: float = 0.0
    drafter: DrafterChoice = "auto"  # (drafters.registry.AUTO)
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    stop: tuple[str, ...] = ()
    # Exact output (exact.py): the target computes each verified row as it computes it alone,
    # so the output is bit-identical to the target alone's (on the CPU, with quantized weights;
    # K is capped at 2 where its weights are repacked). None: wherever the target allows it
    # (measured to cost nothing here: docs/results/history.md); True: required (refused, saying
    # why, where it is not possible); False: off.
    exact: bool | None = None
    # How the output splits into a thinking model's reasoning and its answer: the prompt's
    # (ChatPrompt.reasoning). None: all of it is the answer (a model that does not think, a
    # raw prompt).
    reasoning: ReasoningSplit | None = None

    @property
    def drafts_adaptively(self) -> bool:
        """Whether K is chosen each round: asked for, and not a seeded sampling run (whose
        output must repeat, see FIXED_K)."""
        seeded_sampling = self.sampler.seed is not None and not self.sampler.greedy
        return self.adaptive and not seeded_sampling

    @property
    def k_max(self) -> int:
        """The K this generation drafts with: the most per round (adaptive), or every round."""
        if self.draft_max is not None:
            return self.draft_max
        return ADAPTIVE_K_MAX if self.drafts_adaptively else FIXED_K

    def validate(self) -> None:
        if self.max_tokens < 1:
            raise TandemError("max tokens must be at least 1")
        if self.draft_max is not None and not 0 <= self.draft_max <= DRAFT_MAX_LIMIT:
            raise TandemError(f"K (draft max) must be between 0 and {DRAFT_MAX_LIMIT}")
        if not 0.0 <= self.p_min < 1.0:  # also refuses NaN
            raise TandemError("p-min must be in [0, 1)")
        try:
            self.sampler.validate()
            check_stops(self.stop)
        except ValueError as exc:
            raise TandemError(str(exc)) from exc


FLASH_ATTN_ENV = "TANDEM_FLASH_ATTN"
_FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}


def flash_attn_default() -> int:
    """llama.cpp's flash attention: auto unless $TANDEM_FLASH_ATTN says off or on (anything
    else is auto too: a typo must not stop a model from loading)."""
    return _FLASH_ATTN.get(os.environ.get(FLASH_ATTN_ENV, "auto").strip().lower(), -1)


@dataclass(frozen=True)
class LoadOptions:
    n_ctx: int = 4096
    n_gpu_layers: int = -1  # -1: every layer on the GPU when there is one
    # None: half the logical CPUs above 4, all of them up to 4, at most 8 (model.default_threads)
    n_threads: int | None = None
    # Tokens per llama_decode call (prompt chunks). The compute buffer llama.cpp reserves grows
    # with it (17.5 MiB at 512 for a 135M model, 8.8 MiB at 256) while prefill speed on CPU
    # barely changes, so 256.
    n_batch: int = 256
    max_outputs: int = DRAFT_MAX_LIMIT + 1  # most logits rows one decode may ask for (K + 1)
    use_mmap: bool = True
    # llama.cpp's flash_attn_type: -1 auto, 0 off, 1 on. TANDEM_FLASH_ATTN=off|on|auto sets the
    # default: a way around a driver whose flash-attention kernel misbehaves (Mesa 22.3's lavapipe
    # corrupts memory with llama.cpp's Vulkan one: the GPU lane turns it off, tests/gpu_lane.py).
    flash_attn: int | None = None  # None: $TANDEM_FLASH_ATTN, else auto (see flash_attn_type)
    # Greedy decoding on the CPU lets llama.cpp's own greedy sampler pick each token inside its
    # graph (LoadedModel.decode_greedy); off: the logits are read and checked, as on a GPU.
    greedy_in_graph: bool = True
    # Recurrent-state snapshots llama.cpp keeps per sequence (n_rs_seq), for the hybrid models
    # it can roll back itself (recurrence.py): a round rolls back at most K positions, so K's
    # adaptive cap. Each costs one more copy of the recurrent state; a round that drafts more
    # is checkpointed instead. Ignored by every other model; 0: always checkpoint.
    rs_snapshots: int = ADAPTIVE_K_MAX
    # rpc-server endpoints (HOST:PORT) the target's layers are spread over (rpc.py); the draft
    # always stays local. Empty: everything runs here.
    rpc_servers: tuple[str, ...] = ()
    # Load a target's built-in draft heads (multi-token prediction, drafters/heads/mtp.py) when its GGUF has
    # them: one more decoder block's weights and a small context. Off: they stay on disk.
    load_mtp: bool = True
    # Sequences the context holds (tandem serve --parallel; batch.py), each of n_ctx tokens.
    n_seq: int = 1

    @property
    def flash_attn_type(self) -> int:
        """What llama.cpp is given, read when a model loads (so the variable applies to options
        made before it was set)."""
        return flash_attn_default() if self.flash_attn is None else self.flash_attn

    def validate(self) -> None:
        if self.n_ctx < MIN_CONTEXT:
            raise TandemError(f"the context size must be at least {MIN_CONTEXT} tokens")
        if self.n_gpu_layers < -1:
            raise TandemError("GPU layers must be -1 (all), 0 (none) or a positive number")
        # More threads than CPUs only wait for each other at every barrier (--threads 1000
        # decoded at 0.4 tok/s).
        cpus = usable_cpus()
        if self.n_threads is not None and not 1 <= self.n_threads <= cpus:
            raise TandemError(
                f"CPU threads must be from 1 to {cpus}, the logical CPUs Tandem may use on this "
                f"machine, not {self.n_threads} (or left unset: chosen from the CPU count)"
            )
        if self.n_batch < 1 or self.max_outputs < 1:
            raise TandemError("the batch size and the number of outputs must be at least 1")
        if not 1 <= self.n_seq <= MAX_SEQUENCES:
            raise TandemError(f"parallel sequences must be between 1 and {MAX_SEQUENCES}")
        if not 0 <= self.rs_snapshots <= DRAFT_MAX_LIMIT:
            raise TandemError(f"recurrent-state snapshots must be between 0 and {DRAFT_MAX_LIMIT}")
        for server in self.rpc_servers:
            check_rpc_server(server)


# rpc-server's default port, quoted in messages and help texts.
RPC_PORT_DEFAULT = 50052


def check_rpc_server(endpoint: str) -> None:
    """HOST:PORT with an IPv4 address or a host name: ggml's RPC client resolves names with
    gethostbyname and aborts the process on anything it cannot parse, so bad input is refused
    here, with a sentence, before it gets there."""
    host, sep, port = endpoint.rpartition(":")
    example = f"(for example 192.168.1.10:{RPC_PORT_DEFAULT})"
    if not sep or not host or not all(c.isascii() and (c.isalnum() or c in ".-_") for c in host):
        raise TandemError(f"RPC server {endpoint!r} is not HOST:PORT {example}")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise TandemError(f"RPC server {endpoint!r}: the port must be a number from 1 to 65535 {example}")


def usable_cpus() -> int:
    """The logical CPUs this process may run on (its affinity; the CPU count where there is
    none): the most CPU threads that do not wait for each other."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


# Smaller contexts cannot hold a chat template's framing and an answer.
MIN_CONTEXT = 64
# The most parallel sequences one context holds (llama.cpp's own limit is 256).
MAX_SEQUENCES = 64
