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

Code.  This module holds what every format shares and the ``.npy`` writer; the ``.npz`` and
``.safetensors`` writers' reading and writing code is in :mod:`fastpe._io._npz` and
:mod:`fastpe._io._safetensors`, imported when a file of that format is first written or read.

Spec.  ``{"fastpe": VERSION, "function": NAME, "params": {...}}``: ``NAME`` the library
function under ``fastpe.`` that computes the values (``"table"``, ``"grid.sincos_2d"``,
``"timestep"``, ``"alibi.bias"``, ``"relative.t5_bucket_matrix"``, ``"rope.cos_sin"``, ``"rope.axial_cos_sin"``) and
``params`` its keyword arguments that determine them (:func:`make_spec`), positions made
by the caller given as ``{"arange": N}``.  A stacked ``.npy`` adds ``"stacked"``.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import io
import json
import os
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
    "rope.axial_cos_sin": "rope-axial", "relative.deberta_bucket_matrix": "deberta",
    "relative.shaw_positions": "shaw", "relative.sandwich_bias": "sandwich",
    "time.fourier_features": "fourier", "time.calendar_features": "calendar",
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


class _DeferredWriter(Writer):
    """A writer whose format code -- everything but what checking an output path reads --
    is in a module of this package imported on first use (:attr:`code`), so a command writing
    another format neither compiles nor loads it."""

    #: the module, relative to this package, with the format's ``layout``, ``write_data``,
    #: ``stored``, ``entries``, ``open_entry`` and ``read_spec`` (each taking the writer first)
    code = ""

    def _code(self):
        return importlib.import_module(self.code, __package__)

    def layout(self, entries, spec):
        return self._code().layout(self, entries, spec)

    def write_data(self, f, layout, blocks):
        self._code().write_data(self, f, layout, blocks)

    def stored(self, path, name):
        return self._code().stored(self, path, name)

    def entries(self, path):
        return self._code().entries(self, path)

    def open(self, path, name):
        return self._code().open_entry(self, path, name)

    def read_spec(self, path):
        return self._code().read_spec(self, path)


class NpzWriter(_DeferredWriter):
    suffix = ".npz"
    code = "._npz"


class SafetensorsWriter(_DeferredWriter):
    suffix = ".safetensors"
    little_endian = True
    bfloat16_as_uint16 = False
    code = "._safetensors"

    def require(self):
        try:
            import safetensors  # noqa: F401
        except ImportError:
            raise ImportError(
                "writing .safetensors needs the safetensors package: pip install safetensors "
                "(or pip install 'fastpe[safetensors]')"
            ) from None


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
