"""Tables larger than memory: :func:`save_table` streams rows into ``.npy``, ``.npz`` or
``.safetensors`` files, and every file records the spec that made it (:func:`load_spec`).

Memory.  The table is computed and written in chunks of rows whose buffers fit in
``chunk_bytes``; one chunk buffer is allocated and reused, so the peak memory is the budget
whatever the table's size.  Each chunk goes to the file with ``file.write`` of the buffer.
``numpy.lib.format.open_memmap`` was the obvious alternative and was measured: the pages of
a shared file mapping count in the process's RSS as they are written (up to the whole file,
until the kernel writes them back and reclaims them), so writing a file larger than memory
through a memory map grows RSS with the file and puts the machine under memory pressure --
a 2 GiB table written through ``open_memmap`` in 64 MiB chunks peaked at 2.1 GiB of RSS,
the same chunks written with ``file.write`` at 89 MiB (25 MiB of it the interpreter).
Plain writes go through the page cache, which the kernel can always write back and drop, and
leave the RSS flat (``bench/stream_rss.py`` measures it).

Files.  The format is chosen by the extension, and the chunks go through that format's
writer (:mod:`fastpe._io.writers`, which every array command of the CLI writes through too):

``.npy``          the ``numpy.lib.format`` header, then the rows; the bytes are those of
                  ``numpy.save(fastpe.table(...))``.  A sidecar ``PATH.json`` holds the spec.
``.npz``          a stored (uncompressed) ZIP64 archive, as ``numpy.savez`` writes, with two
                  entries: ``spec`` (the spec's JSON text as a 0-d string array) and
                  ``table``, streamed into the archive member.  Timestamps are fixed, so
                  the same spec gives the same bytes.
``.safetensors``  the 8-byte little-endian header length, the JSON header (tensor ``table``,
                  ``"__metadata__": {"spec": JSON}``, padded with spaces to 8 bytes), then
                  the little-endian rows.  Requires the ``safetensors`` package (fastpe
                  writes the file itself, streaming; the package is what reads it).

bfloat16 is ``ml_dtypes.bfloat16``; NumPy has no standard code for it, so in ``.npy`` and
``.npz`` it is stored as its bit patterns, ``uint16`` (load, then ``.view(ml_dtypes.bfloat16)``,
or ``torch.from_numpy(a).view(torch.bfloat16)``; the spec records ``bfloat16``), as every
fastpe command writes it, and in ``.safetensors`` as ``BF16``.

Spec.  ``{"fastpe": VERSION, "function": "table", "params": {...}}`` where ``params`` are
every :class:`~fastpe.PosEncConfig` field and ``dtype``, then ``start`` and ``step`` when
the run of positions is not ``0, 1, 2, ...`` (each only when it differs from its default, so
the specs of ordinary tables are what they always were): exactly the keyword arguments of
:func:`save_table` (and of :func:`fastpe.table`) that define the values, so
``save_table(path, **load_spec(other)["params"])`` re-creates ``other``'s table.  The
backend is not recorded: every backend computes the same bits.

Safety.  Every argument is checked, the one chunk buffer compared with the machine's
physical memory, and the free space of the target's file system with the exact size of what
will be written, before any file is created.  Files are written to temporary files in the
target's directory (:mod:`fastpe._io.atomic`) and renamed into place only when complete; on
any error or ``KeyboardInterrupt`` nothing is left at the target and no temporary file
remains (a file already at the target is kept).  For ``.npy`` the data are written and
synced first, then the sidecar is renamed into place, then the data: the new data never sit
at their name without their complete sidecar.  Should the data's rename fail after the
sidecar's, the sidecar is taken back (the previous one restored, if there was one).

Signals.  SIGTERM and SIGHUP end a Python process on the spot by default, which would leave
the temporary file (as large as the part written so far) behind.  While :func:`save_table`
writes, a SIGTERM or SIGHUP left at its default disposition unwinds the call instead, so the
temporary files are removed, and then ends the process by that same signal: the program and
its parent see what they would have seen without fastpe, less the temporary file.  A signal
the program handles or ignores is left to it, and a call from a thread other than the main
one (where Python cannot set handlers) leaves the signals alone: there a SIGTERM can leave a
``.<name>.<random>.tmp`` file behind, safe to delete (:mod:`fastpe._io.atomic`).  The process
ends when the chunk being computed or written is done.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from .. import sinusoid as _api, _backends, _dtypes
from .atomic import end_cleanly_on_signals
from .writers import FORMATS, SIDECAR_SUFFIX, SPEC_COMMANDS, WRITERS, Entry, format_of, make_spec
from ..sinusoid import DEFAULT_BASE, DEFAULT_MAX_LEN, PosEncConfig
from .._validate import check_int

__all__ = [
    "save_table",
    "load_spec",
    "parse_spec",
    "check_describes",
    "SavedTable",
    "FORMATS",
    "DEFAULT_CHUNK_BYTES",
    "SIDECAR_SUFFIX",
    "output_size",
    "format_of",
    "require_safetensors",
    "physical_memory",
    "check_memory",
    "check_space",
]

#: the default chunk budget: large enough that per-chunk overheads vanish
DEFAULT_CHUNK_BYTES = 256 << 20
#: the entry (``.npz`` member, safetensors tensor) holding the table
TABLE_ENTRY = "table"
#: the function a table's spec names, the only one save_table and --from-spec re-run
SPEC_FUNCTION = "table"
_SPEC_KEYS = ("fastpe", "function", "params")

#: the run of positions a table spec records only when it differs from these
_RUN_DEFAULTS = {"start": 0, "step": 1}
#: bytes per row of the int64 positions a signed or backward run's block computes
_POSITION_BYTES = 8

#: transient bytes per value while float16/bfloat16 rows are computed, measured with
#: tracemalloc: :func:`fastpe.sinusoid.table_rows` computes them in float32 a block of at most
#: ``_api._NARROW_VALUES`` values at a time and narrows each block (the float32 scratch, the
#: narrowed copy and the float64 tie scan of :func:`fastpe._dtypes.narrow`: ~51 bytes a
#: value).  float32 and float64 rows are computed in place.  tests/io/test_save.py checks the
#: peak against the budget.
_NARROW_BYTES_PER_VALUE = 52


def _narrow_block() -> int:
    return int(getattr(_api, "_NARROW_VALUES", 1 << 20))


def _position_block() -> int:
    """Rows per positions array of a signed or backward run (those of :func:`fastpe.table`)."""
    return int(getattr(_api, "_TABLE_BLOCK", 1 << 16))


@dataclass(frozen=True)
class SavedTable:
    """What :func:`save_table` wrote.

    ``path`` the file; ``sidecar`` its spec file (``.npy``) or ``None``; ``spec`` the spec
    recorded; ``shape``/``dtype`` the table's; ``nbytes`` the table's data bytes (the file
    is a header larger); ``backend`` the backend that computed it; ``compute_seconds`` and
    ``write_seconds`` the time spent computing rows and writing them.
    """

    path: str
    sidecar: str | None
    spec: dict
    shape: tuple[int, int]
    dtype: str
    nbytes: int
    backend: str
    compute_seconds: float
    write_seconds: float


# --------------------------------------------------------------------------- checks


def require_safetensors() -> None:
    """Fail clearly when the ``safetensors`` package (needed to read the file) is missing."""
    WRITERS[".safetensors"].require()


def _check_path(path) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    target = os.fspath(path)
    if isinstance(target, bytes):
        raise TypeError("path must be a str or os.PathLike of str, got bytes")
    if not target:
        raise ValueError("path is empty")
    return target


def _check_place(target: str) -> None:
    """The directory must exist and be writable; ``target`` must not be a directory or a
    special file (replacing a device or a pipe would surprise)."""
    directory = os.path.dirname(target) or os.curdir
    if not os.path.isdir(directory):
        raise FileNotFoundError(errno.ENOENT, f"directory {directory!r} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, f"directory {directory!r} is not writable")
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, f"{target!r} is a directory")
    if not stat.S_ISREG(mode):
        raise ValueError(f"{target!r} exists and is not a regular file")


def _check_progress(progress) -> None:
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a callable(rows_done, rows_total) or None, got {type(progress).__name__}")


def _chunk_bytes(rows: int, d_model: int, dtype: np.dtype, run: bool = False) -> int:
    """Every byte held while a chunk of ``rows`` rows is computed and written: the chunk,
    for float16/bfloat16 the narrowing scratch, and for a signed or backward ``run`` the
    int64 positions of one block of it (a backend's own fixed workspace, under 1 MiB,
    aside)."""
    values = rows * d_model
    scratch = 0
    if dtype.itemsize < 4:
        scratch = min(values, _narrow_block()) * _NARROW_BYTES_PER_VALUE
    if run:
        scratch += min(rows, _position_block()) * _POSITION_BYTES
    return values * dtype.itemsize + scratch


def _rows_per_chunk(d_model: int, dtype: np.dtype, chunk_bytes: int, run: bool = False) -> int:
    """The most rows whose chunk fits in ``chunk_bytes`` (at least one, else ValueError)."""
    if _chunk_bytes(1, d_model, dtype, run) > chunk_bytes:
        what = "the row, its positions and its scratch" if run else "the row and its scratch"
        raise ValueError(
            f"chunk_bytes must hold at least one row: {_chunk_bytes(1, d_model, dtype, run)} bytes for "
            f"d_model={d_model} in {dtype.name} ({what}), got {chunk_bytes}"
        )
    lo, hi = 1, max(1, chunk_bytes // (d_model * dtype.itemsize))
    while lo < hi:  # the cost is increasing in rows: bisect for the largest that fits
        mid = (lo + hi + 1) // 2
        if _chunk_bytes(mid, d_model, dtype, run) <= chunk_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _human(nbytes: int) -> str:
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024 or unit == "EiB":
            return f"{nbytes} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def check_space(target: str, needed: int) -> None:
    """Refuse, before writing, a file of ``needed`` bytes that cannot fit in the target's file
    system: :class:`OSError` ``ENOSPC`` naming both sizes."""
    directory = os.path.dirname(target) or os.curdir
    free = shutil.disk_usage(directory).free
    if needed > free:
        raise OSError(
            errno.ENOSPC,
            f"not enough free space in {directory!r}: {os.path.basename(target)} needs {needed} bytes "
            f"({_human(needed)}), {free} bytes ({_human(free)}) are free",
        )


def physical_memory() -> int | None:
    """This machine's physical memory in bytes; ``None`` where the platform does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or no such name
        return None


def check_memory(what: str, needed: int) -> None:
    """Refuse, before allocating, ``needed`` bytes that exceed the physical memory: such an
    allocation either fails or, memory being overcommitted, brings the machine to its knees
    before failing.  :class:`ValueError` starting with ``what``."""
    total = physical_memory()
    if total is not None and needed > total:
        raise ValueError(
            f"{what} needs {needed} bytes ({_human(needed)}) of memory, more than this machine's "
            f"{total} bytes ({_human(total)})"
        )


# --------------------------------------------------------------------------- spec


def _version() -> str:
    from .._version import __version__

    return __version__


def _config_fields() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(PosEncConfig) if f.init)


def _make_spec(config: PosEncConfig, dtype: np.dtype, start: int = 0, step: int = 1) -> dict:
    params = {name: getattr(config, name) for name in _config_fields()}
    params["dtype"] = dtype.name
    for name, value in (("start", start), ("step", step)):
        if value != _RUN_DEFAULTS[name]:  # an ordinary table's spec stays what it always was
            params[name] = value
    return make_spec(SPEC_FUNCTION, params)


def _major(version: str) -> str:
    return version.split(".", 1)[0]


def parse_spec(spec, source: str = "spec") -> dict:
    """Check a spec (a dict, or its JSON text) and return it normalised.

    ``source`` names it in error messages.  Raises :class:`ValueError` (or
    :class:`TypeError` for a parameter of the wrong type) when it is not JSON, names another
    function, lacks or adds parameters, holds a bad value (the library's own checks), or
    was written by a fastpe of another major version.
    """
    if isinstance(spec, (str, bytes)):
        try:
            spec = json.loads(spec)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"{source} is not valid JSON: {exc}") from None
        except RecursionError:  # json's decoder recurses once per nested array or object
            raise ValueError(f"{source} is not a fastpe spec: its JSON nests too deeply to read") from None
    if not isinstance(spec, dict):
        raise ValueError(f"{source} must be a JSON object with keys {', '.join(_SPEC_KEYS)}, got {type(spec).__name__}")
    missing = [k for k in _SPEC_KEYS if k not in spec]
    if missing:
        raise ValueError(f"{source} is not a fastpe spec: it lacks {', '.join(map(repr, missing))}")
    version, function, params = spec["fastpe"], spec["function"], spec["params"]
    if not isinstance(version, str) or not version.split(".", 1)[0].isdigit():
        raise ValueError(f"{source}: 'fastpe' must be a version string like '1.2.0', got {version!r}")
    current = _version()
    if _major(version) != _major(current):
        raise ValueError(
            f"{source} was written by fastpe {version}, whose major version differs from this "
            f"fastpe {current}: its parameters may mean something else here"
        )
    # before the keys: the specs of other functions may hold keys of their own ("stacked")
    if function != SPEC_FUNCTION:
        command = SPEC_COMMANDS.get(function) if isinstance(function, str) else None
        wrote = f"fastpe {command} wrote it" if command else "no fastpe command writes it"
        raise ValueError(f"{source} names function {function!r} ({wrote}); fastpe table and save_table re-run "
                         f"the specs of tables only ({SPEC_FUNCTION!r})")
    extra = sorted(set(spec) - set(_SPEC_KEYS))
    if extra:
        raise ValueError(f"{source} has unknown keys {', '.join(map(repr, extra))}; a spec has {', '.join(_SPEC_KEYS)}")
    if not isinstance(params, dict):
        raise ValueError(f"{source}: 'params' must be an object, got {type(params).__name__}")
    required = (*_config_fields(), "dtype")
    known = (*required, *_RUN_DEFAULTS)  # start and step: recorded for runs other than 0, 1, 2, ...
    unknown = [k for k in params if k not in known]
    if unknown:
        raise ValueError(f"{source}: unknown params {', '.join(map(repr, unknown))}; known: {', '.join(known)}")
    absent = [k for k in required if k not in params]
    if absent:
        raise ValueError(f"{source}: params lack {', '.join(map(repr, absent))}")
    try:
        config = PosEncConfig(**{name: params[name] for name in _config_fields()})
        dtype = _dtypes.resolve(params["dtype"])
        start, step = _api.check_run(params.get("start", 0), params.get("step", 1), config.max_len)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{source}: params: {exc}") from None
    normal = _make_spec(config, dtype, start, step)
    normal["fastpe"] = version
    return normal


def load_spec(path) -> dict:
    """The spec recorded for a table: read from a sidecar ``.json`` (or any spec file), from
    a ``.npy`` file's sidecar, or from inside a ``.npz`` or ``.safetensors`` file.

    Returns the normalised spec (see :func:`parse_spec`), whose ``params`` are keyword
    arguments for :func:`save_table` and :func:`fastpe.table`.  Given a data file, the spec
    must describe it: the table's shape and dtype in the file's header (the ``.npy``
    itself, the ``.npz`` or ``.safetensors`` entry ``table``) are compared with the spec's,
    so a sidecar left beside a ``.npy`` that something else wrote again since is refused
    (:func:`check_describes`).  A missing file is :class:`FileNotFoundError`; anything
    malformed, or a spec that does not describe its file, is a :class:`ValueError` naming
    the file.
    """
    source = _check_path(path)
    writer = WRITERS.get(os.path.splitext(source)[1].lower())
    if writer is None:  # a spec file, whatever its name
        with open(source, "rb") as f:
            text = f.read()
        return parse_spec(text, source)
    text = writer.read_spec(source)
    spec = parse_spec(text, writer.sidecar_path(source) or source)  # errors name the file the spec came from
    check_describes(source, spec)
    return spec


def check_describes(path: str, spec: dict) -> None:
    """A :class:`ValueError` unless the table file ``path`` (``.npy``, ``.npz`` or
    ``.safetensors``) holds, by its header, the shape and dtype its table ``spec`` (a
    normalised one) says: ``(max_len, d_model)`` in the spec's dtype as the format stores
    it (bfloat16 as ``uint16`` in ``.npy`` and ``.npz``)."""
    writer = WRITERS[format_of(path)]
    params = spec["params"]
    want = (writer.stored_dtype(params["dtype"]), (params["max_len"], params["d_model"]))
    what = f"the {TABLE_ENTRY!r} entry of {path}" if not writer.one_array else path
    try:
        got = writer.stored(path, TABLE_ENTRY)
    except ValueError as exc:
        raise ValueError(f"{exc}; its spec describes a {want[0]} {want[1]} table") from None
    if got != want:
        where = f"its sidecar {writer.sidecar_path(path)}" if writer.sidecar else "the spec inside it"
        raise ValueError(
            f"{what} holds {got[0]} {got[1]}, but {where} describes a {want[0]} {want[1]} table: the spec is "
            f"stale (the file was written again after fastpe wrote it)"
        )


# --------------------------------------------------------------------------- layouts


def _table_layout(fmt: str, config: PosEncConfig, dtype: np.dtype, spec: dict):
    """The table's file in format ``fmt``: one entry, :data:`TABLE_ENTRY`."""
    return WRITERS[fmt].layout([Entry(TABLE_ENTRY, dtype, (config.max_len, config.d_model))], spec)


def output_size(path, d_model: int, max_len: int = DEFAULT_MAX_LEN, *, dtype="float32", start: int = 0,
                step: int = 1, **params) -> int:
    """The exact number of bytes :func:`save_table` writes for these arguments (the data
    file plus, for ``.npy``, its sidecar): what the free-space check compares."""
    fmt = format_of(_check_path(path))
    config = PosEncConfig(d_model, max_len, **params)
    dt = _dtypes.resolve(dtype)
    start, step = _api.check_run(start, step, config.max_len)
    return _table_layout(fmt, config, dt, _make_spec(config, dt, start, step)).total


# --------------------------------------------------------------------------- writing


class _Stream:
    """Computes the table chunk by chunk into one reused buffer and hands each chunk to the
    writer as a block; times both halves and reports progress."""

    def __init__(self, config, dtype, rows_per_chunk, module, progress, start=0, step=1):
        self.config = config
        self.dtype = dtype
        self.start = start
        self.step = step
        self.rows = rows_per_chunk
        self.module = module
        self.progress = progress
        self.compute_seconds = 0.0
        self.write_seconds = 0.0

    def blocks(self) -> Iterator[tuple[str, np.ndarray]]:
        """The table's blocks, each written (the writer asks for the next) before the buffer
        is filled again."""
        total = self.config.max_len
        buf = np.empty((min(self.rows, total), self.config.d_model), dtype=self.dtype)
        done = 0
        while done < total:
            n = min(self.rows, total - done)
            chunk = buf[:n]
            t0 = time.perf_counter()
            self._fill(done, chunk)
            t1 = time.perf_counter()
            yield TABLE_ENTRY, chunk
            self.write_seconds += time.perf_counter() - t1
            self.compute_seconds += t1 - t0
            done += n
            if self.progress is not None:
                self.progress(done, total)

    def _fill(self, row: int, chunk: np.ndarray) -> None:
        """Rows ``row .. row + len(chunk) - 1`` of the table, as :func:`fastpe.table` computes
        them (checked once, in save_table)."""
        _api.fill_run(self.module, self.config, self.start, self.step, row, chunk)


def save_table(
    path,
    d_model: int,
    max_len: int = DEFAULT_MAX_LEN,
    *,
    base: float = DEFAULT_BASE,
    layout: str = "interleaved",
    denominator: str = "d",
    min_timescale: float = 1.0,
    max_timescale: float | None = None,
    start: int = 0,
    step: int = 1,
    dtype="float32",
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    backend: str | None = None,
    progress: Callable[[int, int], object] | None = None,
) -> SavedTable:
    """Write the ``(max_len, d_model)`` table of :func:`fastpe.table` to ``path`` without
    ever holding it in memory; return a :class:`SavedTable`.

    The values are bit-identical to ``fastpe.table(d_model, max_len, base=..., ...,
    start=start, step=step, dtype=dtype)``.  The format follows the extension: ``.npy`` (plus the sidecar
    ``PATH.json`` holding the spec), ``.npz`` (entries ``table`` and ``spec``) or
    ``.safetensors`` (tensor ``table``, the spec in ``__metadata__["spec"]``; needs the
    ``safetensors`` package).  Read the spec back with :func:`load_spec`.

    Parameters
    ----------
    path:
        Target file; its directory must exist.  An existing file is replaced atomically.
    d_model, max_len, base, layout, denominator, min_timescale, max_timescale, dtype:
        As for :func:`fastpe.table`.
    start, step:
        As for :func:`fastpe.table`: the rows are those of positions ``start, start + step,
        ..., start + (max_len - 1) * step``, each in ``(-2**32, 2**32)``, ``step`` a non-zero
        integer (Transformer-XL's ``klen-1 .. 0``: ``layout="halves", start=klen - 1,
        step=-1``).  The spec records them when they are not 0 and 1.
    chunk_bytes:
        Memory budget of one chunk of rows: every buffer held while a chunk is computed and
        written fits in it (for float16/bfloat16 that includes the float32 values they are
        narrowed from).  Must hold at least one row, and the chunk it gives (at most the
        whole table) must fit in the machine's physical memory.  Default 256 MiB.
    backend:
        As for :func:`fastpe.table`.
    progress:
        ``None`` or a callable ``progress(rows_done, rows_total)``, called after each
        chunk is written.  An exception it raises (``KeyboardInterrupt`` included) stops
        the write and leaves nothing behind.

    A SIGTERM or SIGHUP during the call removes the temporary files, then ends the process
    by that signal (see "Signals" in :mod:`fastpe._io.save`).

    Raises
    ------
    TypeError, ValueError
        Bad arguments, before anything is created.
    ImportError
        ``.safetensors`` without the ``safetensors`` package.
    OSError
        A missing or unwritable directory (before anything is created), not enough free
        space (``errno.ENOSPC``, before anything is created), or a failure while writing.
    """
    target = _check_path(path)
    fmt = format_of(target)
    config = PosEncConfig(
        d_model, max_len, base=base, layout=layout, denominator=denominator,
        min_timescale=min_timescale, max_timescale=max_timescale,
    )
    start, step = _api.check_run(start, step, config.max_len)
    run = _api.needs_positions(start, step)
    dt = _dtypes.resolve(dtype)
    chunk_bytes = check_int("chunk_bytes", chunk_bytes, low=1)
    rows = _rows_per_chunk(config.d_model, dt, chunk_bytes, run)
    # the one buffer allocated, at most the whole table: a budget beyond memory is refused
    # only for a table that is larger too
    check_memory(
        f"chunk_bytes must fit in memory: a chunk of {min(rows, config.max_len)} rows",
        _chunk_bytes(min(rows, config.max_len), config.d_model, dt, run),
    )
    _check_progress(progress)
    backend_name, module = _backends.resolve(backend)
    writer = WRITERS[fmt]
    writer.require()
    sidecar = writer.sidecar_path(target)
    _check_place(target)
    if sidecar is not None:
        _check_place(sidecar)
    spec = _make_spec(config, dt, start, step)
    layout_ = _table_layout(fmt, config, dt, spec)
    check_space(target, layout_.total)

    stream = _Stream(config, dt, rows, module, progress, start, step)
    with end_cleanly_on_signals():  # see "Signals" above
        writer.save(target, layout_, stream.blocks())
    return SavedTable(
        path=target, sidecar=sidecar, spec=spec, shape=(config.max_len, config.d_model), dtype=dt.name,
        nbytes=layout_.nbytes, backend=backend_name, compute_seconds=stream.compute_seconds,
        write_seconds=stream.write_seconds,
    )
