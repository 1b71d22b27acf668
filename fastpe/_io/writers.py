"""One writer per file format: ``.npy``, ``.npz`` and ``.safetensors``, chosen by the suffix
from :data:`WRITERS`, the one table of them.

A writer writes one or more named arrays (*entries*) and the spec that made them.  The
arrays arrive as *blocks*: ``(name, array)`` pairs, each entry's blocks in order and the
entries in order, a block being a run of the entry's leading rows (the whole array is one
block; :func:`fastpe.save_table` streams its table in chunks of rows).  Every byte around
the data is known before the first block (:meth:`Writer.layout`), so the exact size of the
file is known before anything is written.

``.npy``          one array: the ``numpy.lib.format`` header, then the data, the bytes
                  ``numpy.save`` writes.  Several entries (of one dtype and shape) are stacked
                  along a new first axis, in their order, and the spec lists them under
                  ``"stacked"``.  The spec is in the sidecar ``PATH.json``.
``.npz``          a stored (uncompressed) ZIP64 archive, as ``numpy.savez`` writes: the entry
                  ``spec`` (the spec's JSON text as a 0-d string array) first, then one
                  ``.npy`` member per entry, streamed.  Timestamps are fixed, so the same
                  spec gives the same bytes.
``.safetensors``  the 8-byte little-endian header length, the JSON header (one tensor per
                  entry, ``"__metadata__": {"spec": JSON}``, padded with spaces to 8 bytes),
                  then the entries' little-endian data.  Reading it back needs the
                  ``safetensors`` package (:meth:`Writer.require`).

bfloat16 (``ml_dtypes.bfloat16``) has no NumPy type code: in ``.npy`` and ``.npz`` it is
stored as its bit patterns, ``uint16`` (the spec records ``bfloat16``); in ``.safetensors``
as ``BF16``.

Atomicity.  :meth:`Writer.save` (and :func:`save`, which picks the writer by suffix)
writes through :func:`fastpe._io.atomic.atomic_write_with_sidecar`: a temporary file in the
target's directory renamed into place when complete (for ``.npy`` after its sidecar),
nothing left behind on any error, Ctrl-C or (while
:func:`~fastpe._io.atomic.signals_raise` holds them) SIGTERM and SIGHUP.

Reading back.  Each writer also reads its format: the array entries a file holds
(:meth:`Writer.entries`), an entry's dtype and shape from its header alone
(:meth:`Writer.stored`, what :func:`fastpe._io.save.load_spec` compares with a spec) and
the entry itself, memory-mapped where the format allows (:meth:`Writer.open`, what ``fastpe
plot`` draws), a ``.safetensors`` header parsed by hand, without its package.

Spec.  ``{"fastpe": VERSION, "function": NAME, "params": {...}}``: ``NAME`` the library
function under ``fastpe.`` that computes the values (``"table"``, ``"grid.sincos_2d"``,
``"timestep"``, ``"alibi.bias"``, ``"relative.t5_bucket_matrix"``, ``"rope.cos_sin"``) and
``params`` its keyword arguments that determine them (:func:`make_spec`), positions made
by the caller given as ``{"arange": N}``.  A stacked ``.npy`` adds ``"stacked"``.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import stat
import struct
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.lib import format as npy_format

from .atomic import atomic_write_with_sidecar, end_cleanly_on_signals

__all__ = [
    "Entry",
    "Layout",
    "Writer",
    "NpyWriter",
    "NpzWriter",
    "SafetensorsWriter",
    "WRITERS",
    "FORMATS",
    "SIDECAR_SUFFIX",
    "SPEC_ENTRY",
    "SPEC_COMMANDS",
    "formats_text",
    "format_of",
    "writer_for",
    "make_spec",
    "spec_text",
    "save",
]

#: a ``.npy`` file's spec sits next to it, in ``PATH + SIDECAR_SUFFIX``
SIDECAR_SUFFIX = ".json"
#: the ``.npz`` entry and the safetensors ``__metadata__`` key holding the spec
SPEC_ENTRY = "spec"
#: the spec key naming, in order, the entries stacked along axis 0 of a ``.npy`` file
STACKED_KEY = "stacked"

#: ZIP timestamps are fixed so that a spec always gives the same bytes (1980-01-01, the
#: earliest date a ZIP header can hold)
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
_ZIP_MODE = (stat.S_IFREG | 0o644) << 16

_SAFETENSORS_CODES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8",
    "uint64": "U64", "uint32": "U32", "uint16": "U16", "uint8": "U8", "bool": "BOOL",
}
_SAFETENSORS_NAMES = {code: name for name, code in _SAFETENSORS_CODES.items()}
#: the safetensors format's own bound on its JSON header (100 MB)
_SAFETENSORS_MAX_HEADER = 100_000_000


# --------------------------------------------------------------------------- entries and specs


@dataclass(frozen=True)
class Entry:
    """One named array of a file: its dtype (``bfloat16`` included) and shape."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def rows(self) -> int:
        """Blocks are runs of rows along the first axis (a 0-d entry is one row)."""
        return self.shape[0] if self.shape else 1

    @property
    def nbytes(self) -> int:
        n = self.dtype.itemsize
        for side in self.shape:
            n *= side
        return n


#: the spec's function -> the ``fastpe`` command that writes such files (its spec's ``function``)
SPEC_COMMANDS: dict[str, str] = {
    "table": "table", "grid.sincos_2d": "grid", "grid.sincos_3d": "grid", "timestep": "timestep",
    "alibi.bias": "alibi", "relative.t5_bucket_matrix": "t5-buckets", "rope.cos_sin": "rope",
}


def make_spec(function: str, params: Mapping) -> dict:
    """The spec of the values ``fastpe.<function>(**params)`` computes."""
    from .._version import __version__

    return {"fastpe": __version__, "function": function, "params": dict(params)}


def spec_text(spec: dict) -> str:
    """The spec as it is stored: indented JSON and a newline."""
    return json.dumps(spec, indent=2) + "\n"


class Layout:
    """What a writer will write for ``entries`` and ``spec``: the bytes around the data and
    the exact sizes.  ``size`` is the data file's; ``total`` adds the sidecar's (the spec's
    text, when the format keeps it beside the file); ``nbytes`` is the arrays' data."""

    def __init__(self, writer: Writer, entries: tuple[Entry, ...], spec: dict, text: str, size: int, **parts):
        self.writer = writer
        self.entries = entries
        self.spec = spec
        self.spec_text = text
        self.size = size
        self.sidecar_bytes = text.encode("utf-8") if writer.sidecar else b""
        self.total = size + len(self.sidecar_bytes)
        self.nbytes = sum(e.nbytes for e in entries)
        self.__dict__.update(parts)


# --------------------------------------------------------------------------- blocks


def _is_little(dtype: np.dtype) -> bool:
    order = dtype.byteorder
    return order in "<|" or (order == "=" and sys.byteorder == "little")


class _Blocks:
    """The blocks of a layout's entries, checked against them and handed out as bytes."""

    def __init__(self, blocks: Iterable[tuple[str, np.ndarray]], little_endian: bool):
        self._it = iter(blocks)
        self._little = little_endian

    def of(self, entry: Entry) -> Iterator[memoryview]:
        """The bytes of ``entry``'s blocks, one memoryview each (no copy), until it is complete."""
        done = 0
        while done < entry.rows:
            item = next(self._it, None)
            if item is None:
                raise ValueError(f"the blocks ended with {entry.name!r} at row {done} of {entry.rows}")
            name, block = item
            if name != entry.name:
                raise ValueError(f"a block of {name!r} arrived while {entry.name!r} is at row {done} of {entry.rows}")
            block = np.asarray(block)
            rows = block.shape[0] if block.ndim else 1
            same_kind = (block.ndim == 0) == (not entry.shape)  # a 0-d entry takes one 0-d block
            if block.dtype != entry.dtype or block.shape[1:] != entry.shape[1:] or not same_kind:
                raise ValueError(f"a block of {name!r} is {block.dtype} {block.shape}; {name!r} is {entry.dtype} "
                                 f"{entry.shape}")
            if done + rows > entry.rows:
                raise ValueError(f"the blocks of {name!r} run past its {entry.rows} rows")
            if rows:
                with self._ordered(np.ascontiguousarray(block)) as data:
                    yield memoryview(data.reshape(-1).view(np.uint8))
            done += rows

    @contextlib.contextmanager
    def _ordered(self, block: np.ndarray) -> Iterator[np.ndarray]:
        """``block`` in the byte order of the file: swapped in place for the write and back
        after (no second buffer), or copied if it is read-only."""
        if not self._little or _is_little(block.dtype) or block.dtype.itemsize == 1:
            yield block
            return
        if not block.flags.writeable:  # pragma: no cover - big-endian hosts only
            yield block.byteswap()
            return
        block.byteswap(inplace=True)  # pragma: no cover - big-endian hosts only
        try:  # pragma: no cover
            yield block
        finally:  # pragma: no cover
            block.byteswap(inplace=True)

    def finish(self) -> None:
        """Every entry is complete: there must be no block left."""
        for name, _ in self._it:
            raise ValueError(f"a block of {name!r} arrived after every entry was complete")


# --------------------------------------------------------------------------- the writers


class Writer:
    """The writer of one format; see the module's docstring for the bytes.

    ``suffix`` the file name's ending; ``sidecar`` whether the spec goes in
    ``PATH + SIDECAR_SUFFIX`` (else inside the file); ``one_array`` whether the file holds
    a single array (several entries are then stacked along a new first axis);
    ``little_endian`` whether the data are stored little-endian on every host (else in the
    host's order, as ``numpy.save`` does); ``bfloat16_as_uint16`` whether bfloat16 is stored
    as its ``uint16`` bit patterns (the format has no bfloat16 type).
    """

    suffix = ""
    sidecar = False
    one_array = False
    little_endian = False
    bfloat16_as_uint16 = True

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.suffix}>"

    def require(self) -> None:
        """Raise :class:`ImportError` saying what to install if this format needs a package
        that is missing."""

    def sidecar_path(self, path: str) -> str | None:
        return path + SIDECAR_SUFFIX if self.sidecar else None

    def layout(self, entries: Iterable[Entry], spec: dict) -> Layout:
        raise NotImplementedError

    def write_data(self, f, layout: Layout, blocks: Iterable[tuple[str, np.ndarray]]) -> None:
        """Write the whole data file, ``layout``'s bytes around the blocks, into the open
        binary file ``f``."""
        raise NotImplementedError

    def read_spec(self, path: str) -> str | bytes:
        """The spec text recorded with the file ``path``, unchecked (:func:`fastpe._io.save.parse_spec`
        checks it): a :class:`ValueError` naming the file if it holds none or cannot be read,
        :class:`FileNotFoundError` if it (or its sidecar) is absent."""
        raise NotImplementedError

    def stored(self, path: str, name: str) -> tuple[str, tuple[int, ...]]:
        """``(dtype, shape)`` of the array entry ``name`` as the file ``path`` holds it, read
        from its header alone (a ``.npy`` holds one array, whatever ``name``): the dtype's
        name (its code, e.g. ``'>f4'``, when not in native byte order; ``'bfloat16'`` for
        a ``.safetensors`` BF16).  A :class:`ValueError` naming the file if the entry is
        absent or its header cannot be read."""
        raise NotImplementedError

    def entries(self, path: str) -> list[str]:
        """The names of the array entries of the file ``path``, in its order, the spec aside
        (a ``.npy`` holds one array, named ``""``); a :class:`ValueError` naming the file if
        it cannot be read."""
        raise NotImplementedError

    def open(self, path: str, name: str) -> np.ndarray:
        """The array entry ``name`` of the file ``path`` as stored (bfloat16 as ``uint16``
        bits outside ``.safetensors``; a ``.safetensors`` BF16 tensor too, as ``uint16``,
        :meth:`stored` telling it apart), memory-mapped where the format allows: call
        :meth:`stored` first to check its size.  A :class:`ValueError` naming the file if it
        cannot be read."""
        raise NotImplementedError

    def stored_dtype(self, dtype: str) -> str:
        """The dtype name :meth:`stored` shows for an array of ``dtype`` this writer wrote."""
        return "uint16" if dtype == "bfloat16" and self.bfloat16_as_uint16 else dtype

    def size(self, entries: Iterable[Entry], spec: dict) -> int:
        """The exact number of bytes :meth:`save` writes (the sidecar included)."""
        return self.layout(entries, spec).total

    def save(self, path: str, layout: Layout, blocks: Iterable[tuple[str, np.ndarray]]) -> None:
        """Write the file (and its sidecar) atomically: temporary files in ``path``'s
        directory, renamed into place once complete; on any failure the targets are left as
        they were and no temporary file remains."""
        with atomic_write_with_sidecar(path, self.sidecar_path(path), layout.sidecar_bytes) as f:
            self.write_data(f, layout, blocks)

    def _blocks(self, blocks) -> _Blocks:
        return _Blocks(blocks, self.little_endian)


def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The header ``numpy.save`` writes for a C-ordered array of ``dtype`` and ``shape``."""
    buf = io.BytesIO()
    if dtype.name == "bfloat16":  # its bits as uint16: NumPy and torch read that; '<V2' they cannot use
        dtype = np.dtype(np.uint16)
    header = {"descr": npy_format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    try:
        npy_format.write_array_header_1_0(buf, header)
    except ValueError:  # a header too long for format 1.0 (not for the shapes fastpe writes, kept for safety)
        buf = io.BytesIO()
        npy_format.write_array_header_2_0(buf, header)
    return buf.getvalue()


def _dtype_name(dtype: np.dtype) -> str:
    return dtype.name if dtype.isnative or dtype.itemsize == 1 else dtype.str


def _read_npy_header(f, where: str) -> tuple[str, tuple[int, ...]]:
    """``(dtype, shape)`` from the ``.npy`` header at ``f``'s position (formats 1.0 and 2.0,
    the ones NumPy and fastpe write for such arrays)."""
    try:
        version = npy_format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = npy_format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = npy_format.read_array_header_2_0(f)
        else:
            raise ValueError(f"a .npy format version {version[0]}.{version[1]} header")
    except (OSError, ValueError, EOFError) as exc:
        raise ValueError(f"{where} has no readable .npy header: {' '.join(str(exc).split())}") from None
    if fortran:
        return "Fortran-ordered " + _dtype_name(dtype), tuple(shape)
    return _dtype_name(dtype), tuple(shape)


def _npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    npy_format.write_array(buf, array, allow_pickle=False)
    return buf.getvalue()


def _check_names(entries: tuple[Entry, ...], reserved: tuple[str, ...]) -> None:
    names = [e.name for e in entries]
    if not names:
        raise ValueError("a file needs at least one array")
    if len(set(names)) != len(names):
        raise ValueError(f"array names must differ, got {names}")
    for name in names:
        if not name or name in reserved:
            raise ValueError(f"{name!r} cannot name an array (reserved: {', '.join(map(repr, reserved))})")


class NpyWriter(Writer):
    suffix = ".npy"
    sidecar = True
    one_array = True

    def layout(self, entries, spec):
        entries = tuple(entries)
        _check_names(entries, ())
        first = entries[0]
        shape = first.shape
        if len(entries) > 1:
            if any(e.dtype != first.dtype or e.shape != first.shape for e in entries):
                raise ValueError(".npy holds one array: arrays stacked into it must share dtype and shape, got "
                                 + ", ".join(f"{e.name} {e.dtype} {e.shape}" for e in entries))
            shape = (len(entries), *shape)
            spec = {**spec, STACKED_KEY: [e.name for e in entries]}
        header = _npy_header(first.dtype, shape)
        return Layout(self, entries, spec, spec_text(spec), len(header) + sum(e.nbytes for e in entries),
                      header=header, shape=shape)

    def write_data(self, f, layout, blocks):
        feed = self._blocks(blocks)
        f.write(layout.header)
        for entry in layout.entries:
            for data in feed.of(entry):
                f.write(data)
        feed.finish()

    def stored(self, path, name):
        with open(path, "rb") as f:
            return _read_npy_header(f, path)

    def entries(self, path):
        return [""]

    def open(self, path, name):
        try:
            return np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise ValueError(f"cannot read {path!r} as a .npy file: {' '.join(str(exc).split())}") from None

    def read_spec(self, path):
        sidecar = path + SIDECAR_SUFFIX
        if not os.path.exists(sidecar):
            raise FileNotFoundError(errno.ENOENT, f"{path} has no spec: its sidecar {sidecar} does not exist")
        with open(sidecar, "rb") as f:
            return f.read()


def _zip_size(members: list[tuple[str, int, bool]]) -> int:
    """The size of a stored ZIP archive holding ``members`` ``(name, size, force_zip64)`` in
    order, as :mod:`zipfile` writes it to a seekable file (no data descriptors): local
    headers (with a ZIP64 extra when forced or large), data, the central directory (with a
    ZIP64 extra for sizes or offsets past ``zipfile.ZIP64_LIMIT``) and the end records."""
    import zipfile
    limit = zipfile.ZIP64_LIMIT
    offset = 0
    central = 0
    for name, size, force in members:
        encoded = len(name.encode("utf-8"))
        zip64 = force or size * 1.05 > limit
        header_offset = offset
        offset += 30 + encoded + (20 if zip64 else 0) + size
        extra = (2 if size > limit else 0) + (1 if header_offset > limit else 0)
        central += 46 + encoded + (4 + 8 * extra if extra else 0)
    end = 22
    if len(members) > zipfile.ZIP_FILECOUNT_LIMIT or offset > limit or central > limit:
        end += 56 + 20  # the ZIP64 end record and its locator
    return offset + central + end


class NpzWriter(Writer):
    suffix = ".npz"

    def layout(self, entries, spec):
        entries = tuple(entries)
        _check_names(entries, (SPEC_ENTRY,))
        headers = tuple(_npy_header(e.dtype, e.shape) for e in entries)
        text = spec_text(spec)
        spec_npy = _npy_bytes(np.array(text))
        size = _zip_size([(SPEC_ENTRY + ".npy", len(spec_npy), False)]
                         + [(e.name + ".npy", len(h) + e.nbytes, True) for e, h in zip(entries, headers)])
        return Layout(self, entries, spec, text, size, headers=headers, spec_npy=spec_npy)

    def write_data(self, f, layout, blocks):
        import zipfile

        feed = self._blocks(blocks)
        with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
            spec_info = zipfile.ZipInfo(SPEC_ENTRY + ".npy", date_time=_ZIP_EPOCH)
            spec_info.external_attr = _ZIP_MODE
            archive.writestr(spec_info, layout.spec_npy)
            for entry, header in zip(layout.entries, layout.headers):
                info = zipfile.ZipInfo(entry.name + ".npy", date_time=_ZIP_EPOCH)
                info.external_attr = _ZIP_MODE
                info.file_size = len(header) + entry.nbytes
                with archive.open(info, "w", force_zip64=True) as member:
                    member.write(header)
                    for data in feed.of(entry):
                        member.write(data)
            feed.finish()

    def stored(self, path, name):
        import zipfile

        try:
            with zipfile.ZipFile(path) as archive:
                if name + ".npy" not in archive.namelist():
                    raise ValueError(f"{path} holds no {name!r} entry")
                with archive.open(name + ".npy") as member:
                    return _read_npy_header(member, f"{path}'s {name!r} entry")
        except (OSError, zipfile.BadZipFile) as exc:
            raise ValueError(f"{path} is not a readable .npz file: {exc}") from None

    def entries(self, path):
        import zipfile

        try:
            with zipfile.ZipFile(path) as archive:
                members = archive.namelist()
        except (OSError, zipfile.BadZipFile) as exc:
            raise ValueError(f"{path} is not a readable .npz file: {exc}") from None
        return [m[: -len(".npy")] for m in members if m.endswith(".npy") and m != SPEC_ENTRY + ".npy"]

    def open(self, path, name):
        import zipfile

        try:
            with np.load(path, allow_pickle=False) as archive:
                return archive[name]
        except KeyError:
            raise ValueError(f"{path} holds no {name!r} entry") from None
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise ValueError(f"{path}: its {name!r} entry cannot be read: {' '.join(str(exc).split())}") from None

    def read_spec(self, path):
        import zipfile

        if not os.path.exists(path):
            raise FileNotFoundError(errno.ENOENT, f"{path} does not exist")
        try:
            archive = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise ValueError(f"{path} is not a readable .npz file: {exc}") from None
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise ValueError(f"{path} holds a single array, not an .npz archive")
        with archive:
            if SPEC_ENTRY not in archive.files:
                raise ValueError(f"{path} holds no {SPEC_ENTRY!r} entry (not written by fastpe?)")
            try:
                value = archive[SPEC_ENTRY]
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
                raise ValueError(f"{path}: its {SPEC_ENTRY!r} entry cannot be read: {exc}") from None
        if not (isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind == "U"):
            raise ValueError(f"{path}: its {SPEC_ENTRY!r} entry is not a JSON string")
        return str(value[()])


class SafetensorsWriter(Writer):
    suffix = ".safetensors"
    little_endian = True
    bfloat16_as_uint16 = False

    def require(self):
        try:
            import safetensors  # noqa: F401
        except ImportError:
            raise ImportError(
                "writing .safetensors needs the safetensors package: pip install safetensors "
                "(or pip install 'fastpe[safetensors]')"
            ) from None

    def layout(self, entries, spec):
        entries = tuple(entries)
        _check_names(entries, ("__metadata__",))
        text = spec_text(spec)
        header = {"__metadata__": {SPEC_ENTRY: text}}
        offset = 0
        for e in entries:
            code = _SAFETENSORS_CODES.get(e.dtype.name)
            if code is None:
                raise ValueError(f".safetensors cannot hold {e.name!r}: no code for {e.dtype}")
            header[e.name] = {"dtype": code, "shape": list(e.shape), "data_offsets": [offset, offset + e.nbytes]}
            offset += e.nbytes
        text = json.dumps(header, separators=(",", ":")).encode("utf-8")
        text += b" " * (-(8 + len(text)) % 8)  # the data start 8-byte aligned, as safetensors pads
        head = struct.pack("<Q", len(text)) + text
        return Layout(self, entries, spec, text, len(head) + offset, header=head)

    def write_data(self, f, layout, blocks):
        feed = self._blocks(blocks)
        f.write(layout.header)
        for entry in layout.entries:
            for data in feed.of(entry):
                f.write(data)
        feed.finish()

    @staticmethod
    def _header(path) -> tuple[dict, int]:
        """The JSON header, read by hand (the package is not needed), and where the data start."""
        with open(path, "rb") as f:
            head = f.read(8)
            (n,) = struct.unpack("<Q", head) if len(head) == 8 else (-1,)
            try:
                header = json.loads(f.read(n)) if 2 <= n <= _SAFETENSORS_MAX_HEADER else None
            except (UnicodeDecodeError, json.JSONDecodeError):
                header = None
        if not isinstance(header, dict):
            raise ValueError(f"{path} has no readable .safetensors header")
        return header, 8 + n

    def _tensor(self, path, name) -> tuple[str, tuple[int, ...], tuple[int, int], int]:
        header, start = self._header(path)
        info = header.get(name) if name != "__metadata__" else None
        if not isinstance(info, dict):
            raise ValueError(f"{path} holds no {name!r} tensor")
        code, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(shape, list) or not all(isinstance(side, int) and side >= 0 for side in shape):
            raise ValueError(f"{path}: the {name!r} tensor's shape is not a list of sizes")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            raise ValueError(f"{path}: the {name!r} tensor has no data offsets")
        return _SAFETENSORS_NAMES.get(code, str(code)), tuple(shape), tuple(offsets), start

    def stored(self, path, name):
        dtype, shape, _, _ = self._tensor(path, name)
        return dtype, shape

    def entries(self, path):
        return [name for name in self._header(path)[0] if name != "__metadata__"]

    def open(self, path, name):
        dtype, shape, (lo, hi), start = self._tensor(path, name)
        if dtype not in _SAFETENSORS_CODES:
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

    def read_spec(self, path):
        self.require()
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


#: every format fastpe writes, by suffix, the default first: the one table
WRITERS: dict[str, Writer] = {w.suffix: w for w in (NpyWriter(), NpzWriter(), SafetensorsWriter())}
#: their suffixes
FORMATS: tuple[str, ...] = tuple(WRITERS)


def formats_text(formats: tuple[str, ...] = FORMATS) -> str:
    """``.npy, .npz or .safetensors``"""
    return f"{', '.join(formats[:-1])} or {formats[-1]}" if len(formats) > 1 else formats[0]


def format_of(path) -> str:
    """The format (one of :data:`FORMATS`) that ``path``'s suffix asks for, else a
    :class:`ValueError` naming the accepted suffixes."""
    name = os.path.basename(os.fspath(path))
    suffix = next((s for s in FORMATS if name.lower().endswith(s)), "")
    if not suffix:
        raise ValueError(f"path must end in {formats_text()}, got {os.fspath(path)!r}")
    if len(name) <= len(suffix):
        raise ValueError(f"path has no file name before {suffix}, got {os.fspath(path)!r}")
    return suffix


def writer_for(path) -> Writer:
    """The writer of ``path``'s format (see :func:`format_of`)."""
    return WRITERS[format_of(path)]


def save(path, entries: Iterable[Entry], spec: dict, blocks: Iterable[tuple[str, np.ndarray]]) -> Layout:
    """Write ``entries`` and ``spec`` to ``path`` atomically, in the format its suffix names,
    the data taken from ``blocks``; return the layout written.

    ``blocks`` may be lazy: a generator that computes the arrays when first asked, which is
    once the temporary file exists (so a command's work happens inside the atomic write, and
    an interruption during it leaves nothing either).  A SIGTERM or SIGHUP left at its
    default disposition removes the temporary files, then ends the process by that signal
    (:func:`fastpe._io.atomic.end_cleanly_on_signals`).
    """
    target = os.fspath(path)
    writer = writer_for(target)
    writer.require()
    layout = writer.layout(entries, spec)
    with end_cleanly_on_signals():
        writer.save(target, layout, blocks)
    return layout
