"""TGAT / TGN time encodings ``cos(t w_j)``, exact from the time value.

TGAT's ``TimeEncode`` (da-xu-tgat, module.py: ``basis_freq = 1 / 10 ** np.linspace(0, 9,
dim)`` as a float32 parameter, ``cos(ts * basis_freq + phase)`` with a zero phase) and TGN's
(twitter-research/tgn, model/time_encoding.py: a ``Linear(1, dim)`` whose weight is the same
numpy float64 vector cast to float32 and whose bias is zero, then ``cos``) are, at
initialisation, ``cos(t w_j)`` with ``w_j = 1 / 10 ** linspace(0, 9, dim)``.  Both compute
it in float32, from a float32 ``t``: a time of ``1.7e9`` s is then known to 128 s, and
``t w_0`` to ~64 rad.  Here the angle ``t w_j`` is exact (every factor is: the timestamp's
integer ticks, the tick's length, the double ``w_j``), and so is its reduction modulo
``2 pi`` (:mod:`fastpe._plans.time`, split words within ``2**-81`` of a turn); one ``cos``
follows, rounded once.

Units: ``datetime64`` / ``timedelta64`` values (and Python dates and durations) are
measured in ``unit`` (seconds by default, the unit TGN's datasets keep their times in):
``t = ticks * tick / unit``, exactly.  Integers are counts of ``unit``.  Floats are taken
at their exact binary values: each is a whole number of ticks of ``2**-shift`` for a range
of shifts, and the values sharing a shift go through the kernels together.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from .. import _backends
from .._exact import time as _reference
from .._validate import check_int
from .._plans.time import MAX_TIME_FREQS
from ._timestamps import TICK_SECONDS, check_timestamps, check_unit

__all__ = ["time_encoding", "tgn_frequencies"]

def tgn_frequencies(dim: int, float32: bool = False) -> tuple[float, ...]:
    """``1 / 10 ** np.linspace(0, 9, dim)`` as numpy computes it in float64 (the published
    formula), or its float32 rounding (TGN's and TGAT's parameters), as Python floats."""
    w = 1 / 10 ** np.linspace(0, 9, dim)
    if float32:
        w = w.astype(np.float32).astype(np.float64)
    return tuple(float(x) for x in w)


def _frequencies(frequencies, dim: int) -> tuple[float, ...]:
    if frequencies is None:
        return tgn_frequencies(dim)
    if isinstance(frequencies, str):
        if frequencies.lower() not in ("tgn", "tgat"):
            raise ValueError(f"frequencies must be None, 'tgn', 'tgat' or an array of {dim} weights, "
                             f"got {frequencies!r}")
        return tgn_frequencies(dim, float32=True)
    if hasattr(frequencies, "detach"):  # a torch tensor (a trained module's weights)
        frequencies = frequencies.detach().cpu().numpy()
    try:
        w = np.asarray(frequencies)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"frequencies must be an array of {dim} real weights: {exc}") from None
    if w.dtype.kind not in "iuf" or w.dtype.kind == "b":
        raise TypeError(f"frequencies must hold real numbers, got dtype {w.dtype}")
    w = w.astype(np.float64).reshape(-1)
    if w.size != dim:
        raise ValueError(f"frequencies must have dim = {dim} weights, got {w.size}")
    if not np.isfinite(w).all():
        raise ValueError("frequencies must be finite, got NaN or inf")
    return tuple(float(x) for x in w)


def _float_groups(arr: np.ndarray) -> list[tuple[np.ndarray | None, np.ndarray, Fraction]]:
    """Finite floats (flat ``float64``) as groups ``(rows, ticks, 2**-shift)`` with
    ``arr[rows] = ticks 2**-shift`` exactly, ``ticks`` int64 (``rows`` ``None``: all).

    A value ``m 2**e`` (``0.5 <= |m| < 1``) with its lowest set bit at ``2**(e - 53 + z)``
    is a whole number times ``2**-shift`` for any ``shift >= 53 - e - z`` and stays below
    ``2**63`` for ``shift <= 63 - e``: an interval of at least ten shifts.  One shift for the
    intervals that share it, chosen greedily by their right ends, gives the fewest groups
    (one for the values of any one binade or of a few neighbouring ones)."""
    if not np.isfinite(arr).all():
        raise ValueError("t must be finite, got NaN or inf")
    nz = np.flatnonzero(arr)
    if nz.size == 0:
        return [(None, np.zeros(arr.shape, dtype=np.int64), Fraction(1))]
    m, e = np.frexp(arr[nz])
    e = e.astype(np.int64)
    sig = np.abs(np.ldexp(m, 53)).astype(np.int64)  # 53-bit integers
    z = np.log2((sig & -sig).astype(np.float64)).astype(np.int64)  # trailing zero bits
    need, cap = 53 - e - z, 63 - e
    groups = []
    left = np.arange(nz.size)
    while left.size:
        shift = int(cap[left].min())
        take = need[left] <= shift
        rows = nz[left[take]]
        if not groups:  # the zeros are whole numbers at any scale
            rows = np.sort(np.concatenate([rows, np.flatnonzero(arr == 0)]))
        ticks = np.ldexp(arr[rows], shift).astype(np.int64)
        scale = Fraction(1, 1 << shift) if shift >= 0 else Fraction(1 << -shift)
        groups.append((rows, ticks, scale))
        left = left[~take]
    if len(groups) == 1:
        groups = [(None, np.ascontiguousarray(groups[0][1]), groups[0][2])]
    return groups


def _is_scalar(x) -> bool:
    """A plain number (``check_timestamps`` gives its ticks a shape of ``(1,)``)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _times(t, unit: str) -> tuple[tuple[int, ...], list]:
    """``(shape, groups)``: the time values, flat, as :func:`_float_groups` gives them
    (``ticks * scale`` in ``unit``, exactly)."""
    if hasattr(t, "to_numpy") and getattr(getattr(t, "dtype", None), "kind", "") == "f":
        t = t.to_numpy()  # a pandas Series of floats: taken exactly, as a NumPy array
    if not isinstance(t, (str, bytes)) and not hasattr(t, "to_numpy"):
        if hasattr(t, "detach"):  # a torch tensor
            t = t.detach().cpu().numpy()
        probe = None
        if isinstance(t, np.ndarray):
            probe = t
        elif isinstance(t, (list, tuple, float, np.floating)):
            try:
                probe = np.asarray(t)
            except (TypeError, ValueError):
                probe = None
        if probe is not None and probe.dtype.kind == "f":
            flat = np.asarray(probe, dtype=np.float64).reshape(-1)
            return probe.shape, _float_groups(flat)
    ticks, tick_unit = check_timestamps(t, "t", unit=unit)
    shape = () if _is_scalar(t) else ticks.shape
    return shape, [(None, np.ascontiguousarray(ticks.reshape(-1)), TICK_SECONDS[tick_unit] / TICK_SECONDS[unit])]


def fill_time_cos(module, ticks: np.ndarray, freqs: tuple[float, ...], scale: Fraction, out: np.ndarray) -> None:
    """Rows of ``out`` (``(n, len(freqs))``, any table dtype) on ``module``; unchecked."""
    n, width = out.shape
    if n == 0:
        return
    if out.dtype in (np.float32, np.float64):
        module.time_cos(ticks=ticks, frequencies=freqs, scale=scale, out=out)
        return
    from ..sinusoid import narrow_into

    def fill32(r0, r1, part):
        module.time_cos(ticks=np.ascontiguousarray(ticks[r0:r1]), frequencies=freqs, scale=scale, out=part)

    def fill64(rows):
        values = np.empty((rows.size, width), dtype=np.float64)
        module.time_cos(ticks=np.ascontiguousarray(ticks[rows]), frequencies=freqs, scale=scale, out=values)
        return values

    def exact(r, j, fmt):
        return _reference.cos_angle(int(ticks[r]) * scale * Fraction(freqs[j]), fmt)

    narrow_into(out, fill32, exact, fill64, module)


def time_encoding(t, dim, *, dtype=None, out=None, frequencies=None, unit="s", backend=None) -> np.ndarray:
    """TGAT/TGN's time encoding ``cos(t w_j)`` of ``t``, exact.

    ``t``: time values -- ``datetime64``/``timedelta64`` (or Python dates, durations,
    pandas objects), measured in ``unit`` (``'s'`` by default); integers, counts of ``unit``;
    floats (a torch tensor too), at their exact binary values (grouped by binary scale:
    values of a few neighbouring binades share one kernel call).  ``dim``: the number of
    frequencies, ``1 .. 65536``.  ``frequencies``: ``None`` for the published
    ``w_j = 1 / 10 ** linspace(0, 9, dim)`` (numpy's float64 values), ``"tgn"`` (or
    ``"tgat"``) for their float32 roundings, which TGN's and TGAT's modules hold, or ``dim``
    weights of your own (a trained ``TimeEncode``'s, say), each taken as its double.

    Returns ``t.shape + (dim,)``, ``out[..., j] = cos(t w_j)``: float32 by default (within 1
    ULP of the correctly rounded value), float64 (within ``2**-45``), float16 or bfloat16
    (correctly rounded); ``out``: a C-contiguous array of that shape to fill instead.
    """
    from ..sinusoid import output_array

    unit = check_unit(unit)
    dim = check_int("dim", dim, low=1, high=MAX_TIME_FREQS)
    freqs = _frequencies(frequencies, dim)
    shape, groups = _times(t, unit)
    inputs = (("t", t),) if isinstance(t, np.ndarray) else ()
    result = output_array(out, shape + (dim,), dtype, inputs)
    _, module = _backends.resolve(backend)
    flat = result.reshape(-1, dim)
    for rows, ticks, scale in groups:
        if rows is None:
            fill_time_cos(module, ticks, freqs, scale, flat)
        else:
            part = np.empty((rows.size, dim), dtype=flat.dtype)
            fill_time_cos(module, ticks, freqs, scale, part)
            flat[rows] = part
    return result
