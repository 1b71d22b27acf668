"""The public sinusoidal API: validate once, pick a backend, call its kernel."""

from __future__ import annotations

import numpy as np

from . import _backends, _dtypes
from ._config import DEFAULT_BASE, DEFAULT_MAX_LEN, PosEncConfig
from ._validate import POSITION_LIMIT, check_int, check_no_overlap, check_positions, check_table_out

__all__ = ["forward", "table", "table_rows"]

#: rows of float32 scratch narrowed to float16/bfloat16 at a time (bounded extra memory)
_NARROW_VALUES = 1 << 20


def _out_dtypes() -> tuple[np.dtype, ...]:
    names = ["float32", "float64", "float16"]
    try:
        _dtypes.resolve("bfloat16")
    except TypeError:
        pass
    else:
        names.append("bfloat16")
    return tuple(_dtypes.resolve(n) for n in names)


def _column_owner(config: PosEncConfig, j: int) -> tuple[int, bool]:
    """``(k, is_cos)`` of column ``j`` (a non-zero column)."""
    if config.layout == "interleaved":
        return j // 2, bool(j & 1)
    count = config.n_freq
    return (j, False) if j < count else (j - count, True)


def _fill32(module, config: PosEncConfig, positions, start: int, out: np.ndarray) -> None:
    """float32 or float64 rows: ``positions`` (uint32) or, when ``None``, ``start, start+1, ...``"""
    if out.dtype == np.float32 and config.is_spec:
        if positions is None:
            module.sinusoid_range(start, config.d_model, config.base, out)
        else:
            module.sinusoid_forward(positions, config.d_model, config.base, out)
        return
    if positions is None:
        positions = np.arange(start, start + out.shape[0], dtype=np.uint32)
    module.sincos_rows(positions, config.frequencies, config.layout, out)


def _fill(module, config: PosEncConfig, positions, start: int, out: np.ndarray) -> None:
    """Rows in ``out``'s dtype.  float16/bfloat16: float32 a block at a time, narrowed with
    ties decided by the exact reference (see :mod:`fastpe._dtypes`)."""
    n = out.shape[0]
    if n == 0:
        return
    if out.dtype in (np.float32, np.float64):
        _fill32(module, config, positions, start, out)
        return
    from . import _reference_sincos

    d = config.d_model
    fmt = _dtypes.format_of(out.dtype)
    freqs = config.frequencies
    block = max(1, _NARROW_VALUES // d)
    scratch = np.empty((min(block, n), d), dtype=np.float32)
    for r0 in range(0, n, block):
        r1 = min(n, r0 + block)
        part = scratch[:r1 - r0]
        pos = None if positions is None else positions[r0:r1]
        _fill32(module, config, pos, start + r0, part)

        def ties(idx, r0=r0, pos=pos):
            values = []
            for flat in idx.tolist():
                r, j = divmod(flat, d)
                p = start + r0 + r if pos is None else int(pos[r])
                k, is_cos = _column_owner(config, j)
                values.append(_reference_sincos.sin_cos(p, freqs, k, fmt)[is_cos])
            return values

        out[r0:r1] = _dtypes.narrow(part, out.dtype, ties)


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
    check_table_out(out, (pos.shape[0], config.d_model), _out_dtypes())
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
    dtype="float32",
    backend: str | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The ``(max_len, d_model)`` sinusoidal table for positions ``0 .. max_len-1``.

    Bit-identical to ``forward(np.arange(max_len), PosEncConfig(d_model, max_len, base,
    layout, denominator, min_timescale, max_timescale), out)`` on the same backend, without
    building the positions array.  ``dtype``: ``"float32"`` (default), ``"float64"``,
    ``"float16"`` or ``"bfloat16"`` (needs ml_dtypes).  ``out``, if given, is filled and
    returned (its dtype wins; same requirements as in :func:`forward`).

    Example: fairseq's table is ``table(d, n, layout="halves", denominator="half-1")``;
    tensor2tensor's adds ``min_timescale`` / ``max_timescale``.
    """
    config = PosEncConfig(d_model, max_len, base, layout, denominator, min_timescale, max_timescale)
    if out is None:
        dt = _dtypes.resolve(dtype)
        _, module = _backends.resolve(backend)
        out = np.empty((config.max_len, config.d_model), dtype=dt)
    else:
        check_table_out(out, (config.max_len, config.d_model), _out_dtypes())
        _, module = _backends.resolve(backend)
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
    check_table_out(out, (n, config.d_model), _out_dtypes())
    if start + n > POSITION_LIMIT:
        raise ValueError(f"start + len(out) must be <= 2**32, got {start} + {n}")
    _, module = _backends.resolve(backend)
    _fill(module, config, None, start, out)
    return out
