"""The ``.safetensors`` format's code, for :class:`fastpe._io.writers.SafetensorsWriter` (see
that module for the bytes): the 8-byte little-endian header length, the JSON header, then the
entries' little-endian data; headers are read by hand, without the package.  Imported on
first use, so that a command writing ``.npy`` does not compile it.
"""

from __future__ import annotations

import errno
import json
import os
import struct

import numpy as np

from .writers import SPEC_ENTRY, Layout, _check_names, spec_text

CODES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8",
    "uint64": "U64", "uint32": "U32", "uint16": "U16", "uint8": "U8", "bool": "BOOL",
}
NAMES = {code: name for name, code in CODES.items()}
#: the safetensors format's own bound on its JSON header (100 MB)
MAX_HEADER = 100_000_000


def layout(writer, entries, spec) -> Layout:
    entries = tuple(entries)
    _check_names(entries, ("__metadata__",))
    text = spec_text(spec)
    header = {"__metadata__": {SPEC_ENTRY: text}}
    offset = 0
    for e in entries:
        code = CODES.get(e.dtype.name)
        if code is None:
            raise ValueError(f".safetensors cannot hold {e.name!r}: no code for {e.dtype}")
        header[e.name] = {"dtype": code, "shape": list(e.shape), "data_offsets": [offset, offset + e.nbytes]}
        offset += e.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)  # the data start 8-byte aligned, as safetensors pads
    head = struct.pack("<Q", len(text)) + text
    return Layout(writer, entries, spec, text, len(head) + offset, header=head)


def write_data(writer, f, layout, blocks) -> None:
    feed = writer._blocks(blocks)
    f.write(layout.header)
    for entry in layout.entries:
        for data in feed.of(entry):
            f.write(data)
    feed.finish()


def _header(path) -> tuple[dict, int]:
    """The JSON header, read by hand (the package is not needed), and where the data start."""
    with open(path, "rb") as f:
        head = f.read(8)
        (n,) = struct.unpack("<Q", head) if len(head) == 8 else (-1,)
        try:
            header = json.loads(f.read(n)) if 2 <= n <= MAX_HEADER else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            header = None
    if not isinstance(header, dict):
        raise ValueError(f"{path} has no readable .safetensors header")
    return header, 8 + n


def _tensor(path, name) -> tuple[str, tuple[int, ...], tuple[int, int], int]:
    header, start = _header(path)
    info = header.get(name) if name != "__metadata__" else None
    if not isinstance(info, dict):
        raise ValueError(f"{path} holds no {name!r} tensor")
    code, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(shape, list) or not all(isinstance(side, int) and side >= 0 for side in shape):
        raise ValueError(f"{path}: the {name!r} tensor's shape is not a list of sizes")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
        raise ValueError(f"{path}: the {name!r} tensor has no data offsets")
    return NAMES.get(code, str(code)), tuple(shape), tuple(offsets), start


def stored(writer, path, name):
    dtype, shape, _, _ = _tensor(path, name)
    return dtype, shape


def entries(writer, path):
    return [name for name in _header(path)[0] if name != "__metadata__"]


def open_entry(writer, path, name):
    dtype, shape, (lo, hi), start = _tensor(path, name)
    if dtype not in CODES:
        raise ValueError(f"{path}: the {name!r} tensor's dtype {dtype!r} is not one fastpe reads")
    dt = np.dtype("<u2" if dtype == "bfloat16" else dtype).newbyteorder("<")  # the data are little-endian
    count = 1
    for side in shape:
        count *= side
    if hi - lo != count * dt.itemsize or start + hi > os.path.getsize(path):
        raise ValueError(f"{path}: the {name!r} tensor's data do not match its shape")
    if count == 0:
        return np.zeros(shape, dtype=dt)
    return np.memmap(path, dtype=dt, mode="r", offset=start + lo, shape=shape)


def read_spec(writer, path):
    writer.require()
    from safetensors import safe_open

    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, f"{path} does not exist")
    try:
        with safe_open(path, framework="numpy") as f:
            metadata = f.metadata() or {}
    except Exception as exc:  # safetensors raises its own SafetensorError for a bad file
        raise ValueError(f"{path} is not a readable .safetensors file: {exc}") from None
    if SPEC_ENTRY not in metadata:
        raise ValueError(f"{path} has no {SPEC_ENTRY!r} in its __metadata__ (not written by fastpe?)")
    return metadata[SPEC_ENTRY]
