"""Targets spread over other machines: llama.cpp's RPC backend (`rpc-server` on each host).

The RPC servers' devices are given to the target's llama_model_params.devices (with the local
GPUs), never registered globally: a globally registered device would be used by every model
loaded afterwards, and the draft must stay local (it runs between the target's batches, and a
network round trip per draft token would cost more than it saves).

ggml's RPC client aborts the process when a server cannot be reached or stops answering
(GGML_ABORT in ggml-rpc.cpp): no error code comes back to the caller. So:

* before ggml connects, `probe` does the protocol's first exchange itself (HELLO), with a
  timeout: a server that is down, busy with another client, or not an rpc-server at all is a
  TandemError before anything is loaded;
* for a server lost mid-answer nothing can be returned to the caller (the decode is blocked
  inside llama.cpp, and the process is about to abort), so an abort callback prints one line
  naming the servers and ends the process with status 1 instead of a C backtrace.

The symbols are looked up through llama-cpp-python's handle on libllama: dlsym on that handle
also searches the libraries it links (libggml, libggml-base), so no second copy is loaded.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import struct
import sys
import threading
from collections.abc import Sequence
from typing import Any

from ..config import check_rpc_server
from ..errors import TandemError
from .devices import fn, local_gpus
from .llama_lib import llama_cpp

PROBE_TIMEOUT_S = 5.0

# Head sizes (keys, values) whose flash-attention kernels every GPU backend builds (CUDA:
# fattn.cu's switch on the head size, which also takes 40 and 72; Vulkan and Metal cover these).
# llama.cpp's RPC client says every operation is supported (ggml-rpc.cpp, supports_op: "TODO:
# call the remote backend"), so flash attention "auto" turns on for layers on an RPC server
# even where the server's backend has no kernel for the model's heads, and the server aborts
# mid-answer (seen: a CUDA rpc-server, heads of 16, fattn.cu "fatal error").
FLASH_ATTN_HEADS = frozenset((n, n) for n in (64, 80, 96, 112, 128, 256))

# The HELLO exchange (ggml-rpc.cpp, protocol 7): command byte 14, a little-endian u64 size and
# the request (24 bytes of transport capabilities; zeros: plain TCP); the answer is a u64 size
# and major, minor, patch, padding plus the server's 24 bytes of capabilities.
_HELLO = 14
_CAPS = 24
_PROTO_MAJOR = 7

_ABORT_CB = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
_lock = threading.Lock()
_servers_in_use: list[str] = []
_abort_guard: Any = None  # the installed callback, kept alive as long as the process

_p = ctypes.c_void_p
_reg_by_name = fn("ggml_backend_reg_by_name", _p, [ctypes.c_char_p])
_reg_proc = fn("ggml_backend_reg_get_proc_address", _p, [_p, ctypes.c_char_p])
_reg_dev_count = fn("ggml_backend_reg_dev_count", ctypes.c_size_t, [_p])
_reg_dev_get = fn("ggml_backend_reg_dev_get", _p, [_p, ctypes.c_size_t])
_set_abort_callback = fn("ggml_set_abort_callback", _p, [_ABORT_CB])
_ADD_SERVER = ctypes.CFUNCTYPE(_p, ctypes.c_char_p)


def supported() -> bool:
    """Whether this llama.cpp build has the RPC backend (scripts/install.py builds it in)."""
    return bool(llama_cpp.llama_supports_rpc())  # (as scripts/install.py asks it)


def probe(endpoint: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Say hello to the rpc-server at `endpoint` as ggml's client will; TandemError if it is
    not there, does not answer in time, or speaks another protocol version."""
    host, _, port = endpoint.rpartition(":")
    hint = f"start `ggml-rpc-server --host {host} --port {port}` there (see the README)"
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            sock.sendall(struct.pack("<BQ", _HELLO, _CAPS) + bytes(_CAPS))
            reply = _recv_exactly(sock, 8 + 4 + _CAPS)
    except socket.gaierror:
        raise TandemError(f"RPC server {endpoint}: unknown host {host!r}") from None
    except TimeoutError:
        raise TandemError(
            f"RPC server {endpoint} did not answer within {timeout:g} s: it is busy with another "
            "client (an rpc-server serves one at a time) or a firewall drops the connection"
        ) from None
    except (OSError, EOFError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "the connection was closed"
        raise TandemError(f"RPC server {endpoint} is not reachable ({reason.lower()}): {hint}") from None
    size, major, minor = struct.unpack_from("<QBB", reply)
    if size != 4 + _CAPS:
        raise TandemError(f"{endpoint} is not an rpc-server: it answered something else to its greeting")
    if major != _PROTO_MAJOR:
        raise TandemError(
            f"the rpc-server at {endpoint} speaks protocol {major}.{minor}, Tandem's llama.cpp "
            f"{_PROTO_MAJOR}: build rpc-server from the same llama.cpp version (see the README)"
        )


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def target_devices(servers: Sequence[str]) -> list[int]:
    """The devices a target spread over `servers` is loaded on: the servers' devices first
    (as llama.cpp orders them itself: the output layer, computed last, stays local), then the
    local GPUs. Checks each server first (`probe`); TandemError if one is not usable."""
    if not supported():
        raise TandemError(
            "this llama.cpp build has no RPC support: run `python3 scripts/install.py --rebuild`"
        )
    reg = _reg_by_name(b"RPC")
    address = _reg_proc(reg, b"ggml_backend_rpc_add_server")
    if not address:
        raise TandemError("this llama.cpp build's RPC backend cannot add servers")
    add_server = _ADD_SERVER(address)
    devices: list[int] = []
    for endpoint in servers:
        check_rpc_server(endpoint)
        probe(endpoint)
        _install_abort_guard(endpoint)
        server_reg = add_server(endpoint.encode())
        if not server_reg:
            raise TandemError(f"RPC server {endpoint} offers no devices")
        devices += [_reg_dev_get(server_reg, i) for i in range(_reg_dev_count(server_reg))]
    return devices + [g.handle for g in local_gpus()]


def flash_attn_type(requested: int, heads: tuple[int, int] | None) -> tuple[int, str | None]:
    """llama.cpp's flash_attn_type for layers on RPC servers, and why it differs from what was
    asked: "auto" (-1) becomes off where the heads are not a size every backend has kernels for
    (an explicit on or off is kept: the user chose it)."""
    if requested != -1 or heads in FLASH_ATTN_HEADS:
        return requested, None
    sizes = (
        f"heads of {heads[0]}" + (f"/{heads[1]}" if heads[1] != heads[0] else "") if heads else "its heads"
    )
    return 0, (
        f"flash attention off: an RPC server cannot say whether its backend has kernels for {sizes} "
        "(TANDEM_FLASH_ATTN=on to try)"
    )


def device_array(devices: Sequence[int]) -> ctypes.Array[ctypes.c_void_p]:
    """A NULL-terminated array for llama_model_params.devices (keep it alive while loading)."""
    return (ctypes.c_void_p * (len(devices) + 1))(*devices, None)


def _install_abort_guard(endpoint: str) -> None:
    global _abort_guard
    with _lock:
        if endpoint not in _servers_in_use:
            _servers_in_use.append(endpoint)
        if _abort_guard is None:
            _abort_guard = _ABORT_CB(_on_abort)
            _set_abort_callback(_abort_guard)


def _on_abort(message: bytes | None) -> None:
    """Called by ggml_abort (on whichever thread failed) just before it aborts the process."""
    text = (message or b"").decode("utf-8", "replace").strip()
    if "ggml-rpc" not in text:
        # Not ours: what ggml would print itself (it then aborts as before).
        os.write(2, (text + "\n").encode())
        return
    servers = ", ".join(_servers_in_use)
    line = (
        f"tandem: error: lost the connection to the RPC server ({servers}): it stopped or the network "
        "failed, and llama.cpp cannot go on without it; start it again and rerun\n"
    )
    # What was answered so far stays on the screen; the process ends just below either way.
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    lead = ""
    if sys.stdout.isatty():
        lead = "\n"
        _restore_terminal()
    os.write(2, (lead + line).encode())
    os._exit(1)


def _restore_terminal() -> None:
    """Undo what a full-screen front-end (the app) did to the terminal, since the process ends
    without its own clean-up: the main screen back, the cursor shown, mouse reports and
    bracketed paste off, and line editing and echo on again. Harmless on a plain terminal."""
    os.write(1, b"\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?2004l\x1b[?1049l\x1b[?25h")
    with contextlib.suppress(Exception):
        import termios

        attrs = termios.tcgetattr(0)
        attrs[0] |= termios.ICRNL
        attrs[1] |= termios.OPOST
        attrs[3] |= termios.ICANON | termios.ECHO | termios.ISIG | termios.IEXTEN
        termios.tcsetattr(0, termios.TCSANOW, attrs)
