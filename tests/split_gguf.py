"""Split a GGUF into llama.cpp's `-0000N-of-0000M.gguf` parts with the `gguf` package.

GGUFWriter's own sharding (split_max_tensors) writes the split.* keys llama.cpp reads
(split.no, split.count, split.tensors.count) and the standard part names, so the first part
loads in llama.cpp, which opens the others from the same folder.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_split(src: Path, out_dir: Path, stem: str, parts: int) -> list[Path]:
    import gguf

    reader = gguf.GGUFReader(src)
    arch = str(reader.fields["general.architecture"].contents())
    n_tensors = len(reader.tensors)
    per_part = -(-n_tensors // parts)
    out_dir.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(out_dir / f"{stem}.gguf", arch, split_max_tensors=per_part)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue  # header pseudo-fields, and the key the writer adds itself
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), value_type, sub_type=sub_type)
    for t in reader.tensors:
        data = np.array(t.data)
        writer.add_tensor(
            t.name, data, raw_shape=list(reversed([int(d) for d in t.shape])), raw_dtype=t.tensor_type
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    names = [out_dir / f"{stem}-{i:05d}-of-{parts:05d}.gguf" for i in range(1, parts + 1)]
    assert all(p.exists() for p in names), sorted(out_dir.iterdir())
    return names
