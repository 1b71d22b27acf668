"""Lazy dask arrays of fastpe tables, computed block by block where dask runs them.

::

    import fastpe.dask

    x = fastpe.dask.table(1024, 2**31)          # (2**31, 1024) float32; nothing computed yet
    x[10**9 : 10**9 + 8].compute()              # computes one row block only
    x.to_zarr("pe.zarr")                        # or .store(memmap): block by block

Each block of the array is one small task: the configuration, the block's row and column
ranges and a reference to :func:`_block`.  A task computes the rows of its own block (the
positions of its rows in the table's run, ``start + step * row``) with fastpe's kernels and
keeps its columns, so
no task ever holds the whole table and building the array computes nothing.  The tasks
pickle, so the threaded, process and distributed schedulers all work; worker processes only
need fastpe (and dask) importable.

Building the array costs little, but not nothing: the graph is one symbolic layer, yet dask
keeps every block's size (and, once sliced or computed, its start and key) as Python
objects.  A table may therefore have at most :data:`MAX_BLOCKS` blocks (``2**20``: about
0.25 s and 80 MiB to build); more is refused with a :class:`ValueError` before anything is
built (116 million blocks -- 2**32 rows in blocks of 37 -- took a minute and 7.4 GiB).

Every block is bit-identical to the same slice of :func:`fastpe.table` with the same
arguments and backend: the kernels compute each value from its position alone (anchoring a
fresh product every 64 rows), so where a block starts changes nothing.  The automatic row
blocks are still multiples of 64 rows, which keeps each block on whole anchor runs.

Needs ``dask[array]`` (``pip install 'fastpe[dask]'``); ``import fastpe`` never imports it.
"""

from __future__ import annotations

import math
import numbers
import reprlib

import numpy as np

try:
    import dask.array as da
    from dask.array.core import Array, normalize_chunks
    from dask.base import tokenize
    from dask.blockwise import blockwise as _blockwise_layer
    from dask.layers import ArraySliceDep
except ImportError as exc:  # pragma: no cover - exercised by a test that hides dask
    raise ImportError(
        "fastpe.dask needs dask's array package: pip install 'fastpe[dask]' "
        f"(or pip install 'dask[array]') ({exc})"
    ) from exc

from . import sinusoid as _api, _backends
from .sinusoid import DEFAULT_BASE, DEFAULT_MAX_LEN, PosEncConfig
from ._dtypes import resolve as _resolve_dtype
from ._plans.words import STEPS

__all__ = ["table", "forward", "ROW_ALIGN", "MAX_BLOCKS"]

#: the kernels' anchor spacing (fastpe._plans.words.STEPS); automatic row blocks are a multiple of it
ROW_ALIGN = STEPS
#: the most blocks a table may have.  dask holds each block's size, start and key as Python
#: objects that building, slicing and scheduling walk: at 2**20 blocks the array is built in
#: ~0.25 s and ~80 MiB (blocks of 4096 rows still reach position 2**32 - 1 within it)
MAX_BLOCKS = 1 << 20

#: error messages show a long explicit chunks tuple by its first few sizes only
_short = reprlib.Repr()
_short.maxtuple = _short.maxlist = 4


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + " ..."


# --------------------------------------------------------------------------- worker side


def _block(slices: tuple[slice, slice], config: PosEncConfig, dtype: np.dtype, backend: str | None,
           start: int = 0, step: int = 1) -> np.ndarray:
    """One block of the table: rows ``slices[0]``, columns ``slices[1]`` (the rows from
    :func:`fastpe.sinusoid.fill_run`: the same kernel calls as :func:`fastpe.table`)."""
    rows, cols = slices
    out = np.empty((rows.stop - rows.start, config.d_model), dtype=dtype)
    if out.shape[0]:
        _, module = _backends.resolve(backend)
        _api.fill_run(module, config, start, step, rows.start, out)
    if cols.start == 0 and cols.stop == config.d_model:
        return out
    # a copy, so the block does not keep the full-width rows alive
    return np.ascontiguousarray(out[:, cols])


def _forward_block(positions: np.ndarray, config: PosEncConfig, out_dtype: np.dtype, backend: str | None) -> np.ndarray:
    out = np.empty((positions.shape[0], config.d_model), dtype=out_dtype)
    return _api.forward(positions, config, out, backend=backend)


# --------------------------------------------------------------------------- client side


def _check_backend(backend) -> str | None:
    # an explicit name must be known and load here; workers resolve ``None`` themselves
    if backend is None:
        return None
    name, _ = _backends.resolve(backend)
    return name


def _auto_rows(chunks) -> bool:
    """Whether the row blocks are left to the automatic choice (then aligned to 64)."""
    if isinstance(chunks, str):
        return chunks == "auto"
    if isinstance(chunks, dict):
        return chunks.get(0, chunks.get(-2)) == "auto"
    if isinstance(chunks, (tuple, list)) and chunks:
        return isinstance(chunks[0], str) and chunks[0] == "auto"
    return False


def _aligned(rows: tuple[int, ...], max_len: int) -> tuple[int, ...]:
    """Regular row blocks of the first automatic size rounded down to a multiple of 64."""
    size = max(ROW_ALIGN, rows[0] - rows[0] % ROW_ALIGN)
    if size >= max_len:
        return (max_len,)
    full, rest = divmod(max_len, size)
    return (size,) * full + ((rest,) if rest else ())


def _blocks_along(spec, size: int) -> int | None:
    """How many blocks ``spec`` makes of an axis of ``size``, where that is known without
    building them: ``None`` for dask's automatic sizes (bounded by its chunk-size setting)
    and for anything dask will refuse."""
    if spec is None or (isinstance(spec, numbers.Integral) and spec == -1):
        return 1
    if isinstance(spec, (bool, np.bool_)):
        return None
    if isinstance(spec, numbers.Integral) and spec > 0:
        return -(-size // int(spec))
    if isinstance(spec, numbers.Real) and math.isfinite(spec) and spec > 0:
        return math.ceil(size / spec)
    if isinstance(spec, (tuple, list)):
        return len(spec)
    return None


def _per_axis(chunks):
    """``chunks`` as a pair, one entry per axis, where it names the axes (a pair, or a dict
    by axis number: 0 and 1, or -2 and -1, a missing axis whole); anything else unchanged,
    for dask to read.  Each entry that is a single number must be a positive size or -1."""
    spec = chunks
    if isinstance(spec, list):
        spec = tuple(spec)
    if isinstance(spec, dict):
        axes = {}
        for key, value in spec.items():
            if isinstance(key, (bool, np.bool_)) or key not in (0, 1, -2, -1):
                raise ValueError(f"chunks keys must be the axes 0 and 1 (or -2 and -1), got {key!r}")
            if key % 2 in axes:
                raise ValueError(f"chunks names axis {key % 2} twice")
            axes[key % 2] = value
        spec = (axes.get(0), axes.get(1))
    if isinstance(spec, tuple) and len(spec) == 2:
        for entry in spec:
            if isinstance(entry, (bool, np.bool_)):
                raise TypeError(f"chunks must hold sizes, not booleans, got {_short.repr(chunks)}")
            if isinstance(entry, numbers.Real) and entry != -1 and not (math.isfinite(entry) and entry > 0):
                raise ValueError(f"chunks must be positive (or -1 for a whole dimension), got {_short.repr(chunks)}")
    return spec


def _count_first(spec, shape: tuple[int, int]) -> int | None:
    """The number of blocks ``spec`` (as :func:`_per_axis` gives it) makes, when that is
    known before dask builds them."""
    if isinstance(spec, numbers.Number):
        spec = (spec, spec)
    if not isinstance(spec, tuple) or len(spec) != 2:
        return None
    counts = [_blocks_along(s, n) for s, n in zip(spec, shape)]
    return None if None in counts else counts[0] * counts[1]


def _check_count(count: int, chunks, shape: tuple[int, int]) -> None:
    if count > MAX_BLOCKS:
        # the suggestion: whole-width blocks of whole anchor runs, few enough
        rows = -(-shape[0] // MAX_BLOCKS)
        rows += -rows % ROW_ALIGN
        raise ValueError(
            f"chunks {_short.repr(chunks)} make {count} blocks of the shape {shape}; fastpe.dask takes at most "
            f"{MAX_BLOCKS} (2**20), since dask keeps every block's size and key as Python objects: "
            f"use larger blocks, e.g. chunks=({rows}, -1), or 'auto'"
        )


def _normalize(chunks, shape: tuple[int, int], dtype: np.dtype) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """dask's chunk normalisation, with ``"auto"`` meaning full-width rows in 64-row
    multiples (the kernels compute whole rows, so splitting columns only repeats work), and
    at most :data:`MAX_BLOCKS` blocks: counted before they are built where the spec says how
    many (an int size, -1, explicit sizes), else right after dask chose them."""
    if isinstance(chunks, str) and chunks == "auto":
        spec = ("auto", -1)
    else:
        spec = chunks
    if isinstance(spec, (bool, np.bool_)) or spec is None:
        raise TypeError(f"chunks must be 'auto', an int, a tuple or a dict, got {_short.repr(chunks)}")
    if isinstance(spec, numbers.Real) and spec != -1 and not (math.isfinite(spec) and spec > 0):
        raise ValueError(f"chunks must be positive (or -1 for a whole dimension), got {chunks!r}")
    spec = _per_axis(spec)
    count = _count_first(spec, shape)
    if count is not None:
        _check_count(count, chunks, shape)
    try:
        rows, cols = normalize_chunks(spec, shape, dtype=dtype)
    except (ValueError, TypeError, NotImplementedError, ArithmeticError) as exc:
        # (dask's own message can run to several lines and quote every block size)
        reason = _clip(str(exc).strip().splitlines()[0]) if str(exc).strip() else type(exc).__name__
        raise ValueError(f"chunks {_short.repr(chunks)} do not fit the shape {shape}: {reason}") from None
    if min(rows) <= 0 or min(cols) <= 0:  # (min is a C loop: no Python work per block)
        raise ValueError(f"chunks must be positive, got {_short.repr(chunks)}")
    if _auto_rows(chunks):
        rows = _aligned(rows, shape[0])
    _check_count(len(rows) * len(cols), chunks, shape)
    return rows, cols


def table(
    d_model: int,
    max_len: int = DEFAULT_MAX_LEN,
    *,
    chunks="auto",
    base: float = DEFAULT_BASE,
    start: int = 0,
    step: int = 1,
    dtype="float32",
    backend: str | None = None,
    **config,
) -> da.Array:
    """The ``(max_len, d_model)`` table as a lazy :class:`dask.array.Array`.

    Computing any part of it gives the same bits as that part of
    ``fastpe.table(d_model, max_len, base=base, start=start, step=step, dtype=dtype,
    backend=backend, **config)``;
    nothing is computed until then, and each block is computed by its own small task.

    Parameters
    ----------
    d_model, max_len, base:
        As in :func:`fastpe.table` (``max_len`` up to ``2**32``).
    start, step:
        The positions ``start, start + step, ..., start + (max_len - 1) * step``, as in
        :func:`fastpe.table` (integers, ``step != 0``, every position in ``(-2**32, 2**32)``):
        Transformer-XL's ``klen - 1 .. 0`` is ``table(d, klen, layout="halves",
        start=klen - 1, step=-1)``.
    chunks:
        ``"auto"`` (default): whole rows, the row count a multiple of 64 chosen from dask's
        ``array.chunk-size`` setting.  Otherwise anything :func:`dask.array.core.normalize_chunks`
        accepts for a 2-D shape: an int (square blocks), a pair such as ``(4096, -1)`` or
        ``("auto", 256)``, explicit block sizes ``((100, 37), (64, 64))``, or a dict.
        Splitting columns works but each column block recomputes its whole rows.  At most
        :data:`MAX_BLOCKS` (``2**20``) blocks.
    dtype:
        ``"float32"`` (default), ``"float64"``, ``"float16"`` or ``"bfloat16"``, as
        :func:`fastpe._dtypes.resolve` reads them.
    backend:
        A backend name (checked here, used by every task) or ``None``: each worker applies
        ``$FASTPE_BACKEND`` or its fastest available backend.
    **config:
        Further :class:`fastpe.PosEncConfig` fields, passed through unchanged.

    Raises
    ------
    TypeError, ValueError
        Bad arguments (including ``chunks`` making more than :data:`MAX_BLOCKS` blocks, and
        a ``dtype`` that is not one of the four, in native byte order), at once, before any
        task exists.
    """
    cfg = PosEncConfig(d_model, max_len, base, **config)
    start, step = _api.check_run(start, step, cfg.max_len)
    dt = _resolve_dtype(dtype)
    name_backend = _check_backend(backend)
    shape = (cfg.max_len, cfg.d_model)
    blocks = _normalize(chunks, shape, dt)

    # the block sizes as arrays: dask hashes their bytes, where a tuple costs a Python call a block
    sizes = [np.asarray(b, dtype=np.int64) for b in blocks]
    name = "fastpe-table-" + tokenize(cfg, start, step, dt.str, dt.name, *sizes, name_backend)
    # one blockwise layer whose only input is each block's (rows, columns) slices: the graph
    # stays symbolic (a handful of objects, whatever the number of blocks) until a scheduler
    # asks for the blocks it needs
    layer = _blockwise_layer(
        _block, name, "ij", ArraySliceDep(blocks), "ij", numblocks={},
        config=cfg, dtype=dt, backend=name_backend, start=start, step=step,
    )
    return Array(layer, name, blocks, dtype=dt, meta=np.empty((0, 0), dtype=dt))


def forward(positions, config: PosEncConfig, *, dtype="float32", backend: str | None = None) -> da.Array:
    """The encoding of a 1-D dask array of positions: a lazy ``(n, d_model)`` array.

    Row blocks follow ``positions``' blocks; each task calls :func:`fastpe.forward` on its
    block with an ``out`` of ``dtype``, so the values are bit-identical to it.  The positions' values are checked when
    the blocks are computed (a bad one raises there); their kind and shape are checked now.
    """
    if not isinstance(config, PosEncConfig):
        raise TypeError(f"config must be a fastpe.PosEncConfig, got {type(config).__name__}")
    if not isinstance(positions, da.Array):
        positions = da.asarray(positions)
    if positions.ndim != 1:
        raise ValueError(f"positions must be 1-D, got an array of shape {positions.shape}")
    if positions.dtype.kind not in "iuf":
        raise TypeError(f"positions must hold integers, got dtype {positions.dtype}")
    dt = _resolve_dtype(dtype)
    name_backend = _check_backend(backend)
    return da.map_blocks(
        # (map_blocks takes ``dtype`` for itself: the block function's is ``out_dtype``)
        _forward_block, positions, config=config, out_dtype=dt, backend=name_backend, dtype=dt,
        new_axis=1, chunks=(positions.chunks[0], (config.d_model,)),
        meta=np.empty((0, 0), dtype=dt),
        name="fastpe-forward-" + tokenize(positions, config, dt.str, dt.name, name_backend),
    )
