"""The public sinusoidal API: validate once, pick a backend, call its kernel."""

from __future__ import annotations

import numpy as np

from . import _backends, _dtypes
from ._config import DEFAULT_BASE, DEFAULT_MAX_LEN, PosEncConfig
from ._validate import POSITION_LIMIT, check_int, check_no_overlap, check_positions, check_table_out

__all__ = ["forward", "table", "table_rows", "out_dtypes", "output_array", "fill_rows", "fill_real",
           "narrow_into"]

#: rows of float32 scratch narrowed to float16/bfloat16 at a time (bounded extra memory)
_NARROW_VALUES = 1 << 20


def out_dtypes() -> tuple[np.dtype, ...]:
    names = ["float32", "float64", "float16"]
    try:
        _dtypes.resolve("bfloat16")
    except TypeError:
        pass
    else:
        names.append("bfloat16")
    return tuple(_dtypes.resolve(n) for n in names)


def output_array(out, shape: tuple[int, ...], dtype, inputs=()) -> np.ndarray:
    """The array a function writes: ``out`` checked (shape, a table dtype, writable, not
    sharing memory with any of ``inputs``, ``(name, array)`` pairs), else a new array of
    ``dtype``.  ``dtype`` is validated either way; ``None`` means float32, or ``out``'s
    dtype, and a ``dtype`` given beside an ``out`` of another dtype is refused."""
    dt = None if dtype is None else _dtypes.resolve(dtype)
    if out is None:
        return np.empty(shape, dtype=np.float32 if dt is None else dt)
    check_table_out(out, shape, out_dtypes())
    if dt is not None and out.dtype != dt:
        raise ValueError(f"dtype is {dt.name} but out has dtype {out.dtype.name}: give one of them")
    for name, arr in inputs:
        check_no_overlap(out, arr, other_name=name)
    return out


def column_owner(layout: str, count: int, j: int) -> tuple[int, bool]:
    """``(k, is_cos)`` of column ``j`` (a non-zero column) of a row with ``count``
    frequencies in ``layout`` (see :mod:`fastpe._layout`)."""
    if layout == "interleaved":
        return j // 2, bool(j & 1)
    first_is_cos = layout == "halves_cos"
    return (j, first_is_cos) if j < count else (j - count, not first_is_cos)


#: a tie is decided by the fast float64 value when it is this far (or farther) from the tie
#: point: beyond the float64 kernels' error bound (2**-45), so the side is certain
_DECIDE = 2.0**-44


def narrow_into(out: np.ndarray, fill32, exact, fill64, module=None) -> None:
    """Fill ``out`` (float16 or bfloat16, ``(n, d)``) a block of rows at a time:
    ``fill32(r0, r1, scratch)`` writes float32 rows ``[r0, r1)``, then each is narrowed (see
    :func:`fastpe._dtypes.narrow`).  A float32 that is a tie in the target format is decided
    by which side of it the true value lies: by ``fill64(rows)`` (float64 values of those
    rows, within 2**-45) when that is far enough from the tie to be sure, else by
    ``exact(r, j, fmt)``, the correctly rounded value from the reference.  ``module`` (a
    backend) narrows in parallel."""
    n, d = out.shape
    fmt = _dtypes.format_of(out.dtype)
    block = max(1, _NARROW_VALUES // max(d, 1))
    scratch = np.empty((min(block, n), d), dtype=np.float32)
    for r0 in range(0, n, block):
        r1 = min(n, r0 + block)
        part = scratch[:r1 - r0]
        fill32(r0, r1, part)

        def ties(idx, r0=r0, part=part):
            rows, cols = np.divmod(idx, d)
            uniq, inverse = np.unique(rows, return_inverse=True)
            approx = fill64(r0 + uniq)[inverse, cols]
            return _dtypes.decide_ties(part.reshape(-1)[idx], out.dtype, approx, _DECIDE,
                                       lambda t: exact(r0 + int(rows[t]), int(cols[t]), fmt))

        out[r0:r1] = _dtypes.narrow(part, out.dtype, ties, module)


def fill_rows(module, freqs, layout: str, positions, start: int, out: np.ndarray,
              spec: tuple[int, float] | None = None) -> None:
    """Rows of ``freqs`` in ``layout`` and ``out``'s dtype for ``positions`` (uint32) or, when
    ``None``, ``start, start + 1, ...``.  ``spec=(d_model, base)`` routes float32 to the
    spec's own kernels."""
    n = out.shape[0]
    if n == 0:
        return
    if out.dtype == np.float32 and spec is not None:
        if positions is None:
            module.sinusoid_range(start, spec[0], spec[1], out)
        else:
            module.sinusoid_forward(positions, spec[0], spec[1], out)
    elif out.dtype in (np.float32, np.float64):
        if positions is None:
            positions = np.arange(start, start + n, dtype=np.uint32)
        module.sincos_rows(positions, freqs, layout, out)
    else:
        from . import _reference_sincos

        def fill32(r0, r1, part):
            pos = None if positions is None else positions[r0:r1]
            fill_rows(module, freqs, layout, pos, start + r0, part, spec)

        def fill64(rows):
            pos = (start + rows if positions is None else positions[rows]).astype(np.uint32)
            values = np.empty((rows.size, out.shape[1]), dtype=np.float64)
            module.sincos_rows(pos, freqs, layout, values)
            return values

        def exact(r, j, fmt):
            p = start + r if positions is None else int(positions[r])
            k, is_cos = column_owner(layout, freqs.count, j)
            return _reference_sincos.sin_cos(p, freqs, k, fmt)[is_cos]

        narrow_into(out, fill32, exact, fill64, module)


def _real_rows(module, freqs, layout: str, x: np.ndarray, out: np.ndarray) -> None:
    """float32/float64 rows at real positions.  A row whose ``x`` is a whole number in
    ``[0, 2**32)`` is an integer position: it takes the table kernels (the same value as a
    table row of those frequencies, ~10x faster than the real-position exact path); any
    other row takes the real-position path.  Each row depends on its own ``x`` only."""
    whole = (x >= 0) & (x == np.floor(x))
    if whole.all():
        module.sincos_rows(x.astype(np.uint32), freqs, layout, out)
    elif not whole.any():
        module.sincos_real(x, freqs, layout, out)
    else:
        for rows, op, pos in ((np.flatnonzero(whole), module.sincos_rows, np.uint32),
                              (np.flatnonzero(~whole), module.sincos_real, np.float64)):
            part = np.empty((rows.size, out.shape[1]), dtype=out.dtype)
            op(np.ascontiguousarray(x[rows], dtype=pos), freqs, layout, part)
            out[rows] = part


def fill_real(module, freqs, layout: str, x: np.ndarray, out: np.ndarray) -> None:
    """Rows at the real positions ``x`` (float64), in ``out``'s dtype."""
    if out.shape[0] == 0:
        return
    if out.dtype in (np.float32, np.float64):
        _real_rows(module, freqs, layout, x, out)
        return
    from . import _reference_sincos

    def fill32(r0, r1, part):
        _real_rows(module, freqs, layout, x[r0:r1], part)

    def fill64(rows):
        values = np.empty((rows.size, out.shape[1]), dtype=np.float64)
        _real_rows(module, freqs, layout, np.ascontiguousarray(x[rows]), values)
        return values

    def exact(r, j, fmt):
        k, is_cos = column_owner(layout, freqs.count, j)
        return _reference_sincos.sin_cos(float(x[r]), freqs, k, fmt)[is_cos]

    narrow_into(out, fill32, exact, fill64, module)


def _fill(module, config: PosEncConfig, positions, start: int, out: np.ndarray) -> None:
    spec = (config.d_model, config.base) if config.is_spec else None
    fill_rows(module, config.frequencies, config.layout, positions, start, out, spec)


def forward(positions, config: PosEncConfig, out: np.ndarray, *, backend: str | None = None):
    """Fill ``out`` with the sinusoidal encoding of ``positions``; return ``out``.

    With the spec's configuration ``out[r, 2i] = sin(p * w_i)`` and
    ``out[r, 2i + 1] = cos(p * w_i)`` with ``p = positions[r]`` and
    ``w_i = config.base ** (-2i / config.d_model)``; for an odd ``d_model`` the last column is
    a sine.  ``config.layout``, ``config.denominator`` and the timescales select the other
    conventions (see :class:`PosEncConfig`).  In float32 every value is within 1 ULP of the
    correctly rounded float32 of the true value (in practice correctly rounded), for every
    position; float16 and bfloat16 values are the correctly rounded ones; float64 values
    are within ``2**-45`` of the true value.

    Parameters
    ----------
    positions:
        1-D array-like of integers in ``[0, 2**32)``: any integer dtype, a list, or floats
        holding whole numbers.  Never modified.  May be empty.
    config:
        A :class:`PosEncConfig`; ``config.max_len`` does not limit the positions.
    out:
        Writable C-contiguous array of shape ``(len(positions), d_model)``, of dtype
        float32 (the spec), float64, float16 or bfloat16 (``ml_dtypes.bfloat16``).
    backend:
        ``"numba"``, ``"cython"``, ``"python"`` or ``None`` (``$FASTPE_BACKEND``, else the
        fastest available).

    Raises
    ------
    TypeError, ValueError
        Naming the offending argument, before anything is written.
    """
    if not isinstance(config, PosEncConfig):
        raise TypeError(f"config must be a fastpe.PosEncConfig, got {type(config).__name__}")
    pos = check_positions(positions)
    check_table_out(out, (pos.shape[0], config.d_model), out_dtypes())
    check_no_overlap(out, positions)
    _, module = _backends.resolve(backend)
    _fill(module, config, pos, 0, out)
    return out


def table(
    d_model: int,
    max_len: int = DEFAULT_MAX_LEN,
    *,
    base: float = DEFAULT_BASE,
    layout: str = "interleaved",
    denominator: str = "d",
    min_timescale: float = 1.0,
    max_timescale: float | None = None,
    dtype=None,
    backend: str | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The ``(max_len, d_model)`` sinusoidal table for positions ``0 .. max_len-1``.

    Bit-identical to ``forward(np.arange(max_len), PosEncConfig(d_model, max_len, base,
    layout, denominator, min_timescale, max_timescale), out)`` on the same backend, without
    building the positions array.  ``dtype``: ``"float32"`` (default), ``"float64"``,
    ``"float16"`` or ``"bfloat16"`` (needs ml_dtypes); ``None`` means float32, or ``out``'s
    dtype.  ``out``, if given, is filled and returned (same requirements as in
    :func:`forward`; a ``dtype`` beside it must be ``out``'s).

    Example: fairseq's table is ``table(d, n, layout="halves", denominator="half-1")``;
    tensor2tensor's adds ``min_timescale`` / ``max_timescale``.
    """
    config = PosEncConfig(d_model, max_len, base, layout, denominator, min_timescale, max_timescale)
    _, module = _backends.resolve(backend)
    out = output_array(out, (config.max_len, config.d_model), dtype)
    _fill(module, config, None, 0, out)
    return out


def table_rows(config: PosEncConfig, start: int, out: np.ndarray, *, backend: str | None = None) -> np.ndarray:
    """Fill ``out`` (``(n, d_model)``, any table dtype) with the rows of positions
    ``start .. start + n - 1``; bit-identical to those rows of :func:`table`.  The building
    block of streamed and chunked tables (:func:`fastpe.save_table`, :mod:`fastpe.dask`)."""
    if not isinstance(config, PosEncConfig):
        raise TypeError(f"config must be a fastpe.PosEncConfig, got {type(config).__name__}")
    start = check_int("start", start, low=0)
    n = out.shape[0] if isinstance(out, np.ndarray) and out.ndim == 2 else 0
    check_table_out(out, (n, config.d_model), out_dtypes())
    if start + n > POSITION_LIMIT:
        raise ValueError(f"start + len(out) must be <= 2**32, got {start} + {n}")
    _, module = _backends.resolve(backend)
    _fill(module, config, None, start, out)
    return out
