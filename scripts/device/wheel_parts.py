#!/usr/bin/env python3
"""Carry a large wheel to the GPU machine in fewer bytes, and make it whole again there.

A CUDA build of llama-cpp-python is about 58 MB as a wheel (zip), mostly libggml-cuda.so; a
call to the machine carries 64 MiB with the tree. xz packs that library into 38 MB:

    python3 scripts/device/wheel_parts.py split W.whl .device/wheels/FOLDER   # here
    python3 scripts/device/wheel_parts.py join .device/wheels/FOLDER          # there

`split` writes the wheel without its members over 16 MiB, plus each of those as NAME.xz;
`join` puts them back and rewrites the wheel's RECORD (pip's list of files and hashes), leaving
the whole wheel in the folder, where scripts/install.py's build cache finds it. The standard
library alone: the machine has no network to fetch tools.
"""

from __future__ import annotations

import base64
import hashlib
import lzma
import sys
import zipfile
from pathlib import Path

BIG = 16 * 2**20


def split(wheel: Path, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    stub = folder / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(stub, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.file_size > BIG:
                part = folder / (info.filename.replace("/", "__") + ".xz")
                part.write_bytes(lzma.compress(data, preset=6))
            else:
                dst.writestr(info, data)
    print(f"{stub}: {stub.stat().st_size / 2**20:.1f} MiB, and {len(list(folder.glob('*.xz')))} .xz part(s)")


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def join(folder: Path) -> None:
    parts = sorted(folder.glob("*.xz"))
    if not parts:
        return
    (stub,) = sorted(folder.glob("*.whl"))
    whole = stub.with_suffix(".joined")
    members: dict[str, bytes] = {}
    with zipfile.ZipFile(stub) as src:
        for info in src.infolist():
            members[info.filename] = src.read(info)
    for part in parts:
        members[part.name[: -len(".xz")].replace("__", "/")] = lzma.decompress(part.read_bytes())
    (record,) = [name for name in members if name.endswith(".dist-info/RECORD")]
    lines = [f"{name},{_digest(data)},{len(data)}" for name, data in members.items() if name != record]
    members[record] = ("\n".join([*lines, f"{record},,"]) + "\n").encode()
    with zipfile.ZipFile(whole, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as dst:
        for name, data in members.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o755 << 16 if name.endswith((".so", ".so.0")) else 0o644 << 16
            dst.writestr(info, data)
    for part in parts:
        part.unlink()
    whole.replace(stub)
    print(f"{stub}: whole again, {stub.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "split":
        split(Path(sys.argv[2]), Path(sys.argv[3]))
    elif len(sys.argv) == 3 and sys.argv[1] == "join":
        join(Path(sys.argv[2]))
    else:
        sys.exit(__doc__)
