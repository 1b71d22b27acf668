"""Output dtypes: float32 (default), float64, float16 and bfloat16, each correctly rounded.

Every table-producing function takes ``dtype``.  The kernels compute float32 (or float64)
from the exact value; the narrower formats are *not* computed in low precision: a float16 or
bfloat16 value is the nearest one to the exact real value.  Rounding the float32 once more
is right everywhere but at one kind of point: a float32 that lies exactly halfway between
two float16 (bfloat16) numbers, where the true value, just above or below it, decides the
direction and round-half-even would guess.  About one value in 8,192 (float16) or 65,536
(bfloat16) is such a tie; :func:`narrow` asks the caller's reference for those few.

``bfloat16`` is :class:`ml_dtypes.bfloat16` (the type JAX and PyTorch's NumPy interop use);
asking for it without ml_dtypes installed is a clear error.  Standard library and NumPy only
at import.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ._exact.rounding import FORMATS, Format, round_fraction, round_interval, round_ratio

__all__ = [
    "DTYPES",
    "Format",
    "resolve",
    "format_of",
    "round_ratio",
    "round_fraction",
    "round_interval",
    "narrow",
    "decide_ties",
]

#: accepted dtype names, the default first
DTYPES: tuple[str, ...] = ("float32", "float64", "float16", "bfloat16")


def _bfloat16():
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError(
            "dtype='bfloat16' needs the ml_dtypes package (pip install ml_dtypes, or "
            "pip install 'fastpe[bfloat16]')"
        ) from None
    return np.dtype(ml_dtypes.bfloat16)


def resolve(dtype, name: str = "dtype") -> np.dtype:
    """The NumPy dtype for ``dtype`` (a name, a NumPy dtype or scalar type); ``None`` means
    float32.  Anything else is a :class:`TypeError` naming the argument and the choices."""
    if dtype is None:
        return np.dtype(np.float32)
    if isinstance(dtype, str):
        key = dtype.strip().lower()
        if key == "bfloat16":
            return _bfloat16()
        if key in FORMATS:
            return np.dtype(key)
        # other spellings NumPy knows ('f4', '<f8', '>f2'): judged as the dtype they name
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError):  # ValueError: malformed type strings such as 'f4,'
        raise TypeError(f"{name} must be one of {', '.join(DTYPES)}, got {dtype!r}") from None
    if dt.name in FORMATS and dt.kind in "fV":  # ml_dtypes' bfloat16 has kind 'V'
        if not dt.isnative:  # '>f4' on a little-endian machine: the kernels write native words
            raise TypeError(
                f"{name} must be in native byte order, got {dt.str!r} (use {dt.name!r})"
            )
        return dt if dt.name != "bfloat16" else _bfloat16()
    raise TypeError(f"{name} must be one of {', '.join(DTYPES)}, got {dt.name}")


def format_of(dtype: np.dtype) -> Format:
    return FORMATS[np.dtype(dtype).name]


# --------------------------------------------------------------------------- narrowing


def narrow_ties(x32: np.ndarray, fmt: Format) -> np.ndarray:
    """Flat indices of the finite float32 values lying exactly halfway between two
    neighbouring numbers of ``fmt`` (a narrower format).

    On the bit patterns: in the target's normal range a float32 drops ``24 - mant_bits`` low
    significand bits, and it is a tie when they read ``100...0``; below that range (the
    target's subnormals, rare for encodings) more bits drop, worked out per value.
    """
    bits = x32.reshape(-1).view(np.uint32) & np.uint32(0x7FFFFFFF)
    low = 24 - fmt.mant_bits
    tie = (bits & np.uint32((1 << low) - 1)) == np.uint32(1 << (low - 1))
    # not past the midpoint between the largest finite number and infinity (inf, NaN and
    # everything that overflows round one way only)
    top = np.float32(math.ldexp(2.0 - 2.0 ** -fmt.mant_bits, fmt.emax)).view(np.uint32)
    tie &= bits <= top
    small = np.flatnonzero(bits < np.uint32((fmt.emin + 127) << 23))
    tie[small] = False
    if small.size:
        b = bits[small].astype(np.int64)
        e = b >> 23
        sig = np.where(e > 0, (b & 0x7FFFFF) | 0x800000, b & 0x7FFFFF)
        exp = np.where(e > 0, e - 127, -126)  # value = sig * 2**(exp - 23)
        drop = np.minimum(fmt.emin - exp + low, 40)  # bits below the target's quantum
        tie[small] = (sig != 0) & ((sig & ((1 << drop) - 1)) == (1 << (drop - 1)))
    return np.flatnonzero(tie)


def decide_ties(x: np.ndarray, dtype: np.dtype, approx: np.ndarray, margin: float,
                exact: Callable[[int], float]) -> list[float]:
    """The correctly rounded ``dtype`` values at float32 ties ``x`` (each exactly halfway
    between two ``dtype`` numbers): the true value lies above or below the tie, and
    ``approx`` (an approximation of it, e.g. a kernel's double) tells which wherever it is
    farther than ``margin`` (its error bound) from the tie; elsewhere ``exact(t)``, the
    reference's correctly rounded value of tie ``t``, decides."""
    x = np.asarray(x, dtype=np.float32)
    tie = x.astype(np.float64)
    even = x.astype(dtype).astype(np.float64)  # where round-half-even puts it
    other = 2 * tie - even  # the neighbour on the other side of the tie (exact)
    result = []
    for t in range(tie.size):
        gap = float(approx[t]) - tie[t]
        if abs(gap) > margin:
            result.append(other[t] if gap * (other[t] - even[t]) > 0 else even[t])
        else:
            result.append(exact(t))
    return result


def narrow(
    x32: np.ndarray,
    dtype: np.dtype,
    correctly_rounded: Callable[[np.ndarray], Sequence[float]],
    module=None,
) -> np.ndarray:
    """``x32`` (float32, each the correctly rounded float32 of an exact value) in ``dtype``,
    each element the correctly rounded ``dtype`` number of the *exact* value.

    ``correctly_rounded(flat_indices)`` returns, for the few elements whose float32 is a
    tie in ``dtype``, their correctly rounded values in ``dtype`` (as floats), computed from
    the exact values (the reference).  float32 and float64 targets pass through ``astype``.
    ``module``, a backend, does the rounding and finds the ties in one parallel pass (its
    ``narrow16`` operation); without it, NumPy's cast and :func:`narrow_ties` do.
    """
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return x32
    fmt = format_of(dtype)
    if fmt.mant_bits >= 24:
        return x32.astype(dtype)
    if module is None:
        out = x32.astype(dtype)
        idx = narrow_ties(x32, fmt)
    else:
        flat = np.ascontiguousarray(x32, dtype=np.float32).reshape(-1)
        bits = np.empty(flat.size, dtype=np.uint16)
        ties = np.empty(flat.size, dtype=np.bool_)
        module.narrow16(bits32=flat.view(np.uint32), bf16=fmt.name == "bfloat16", out=bits, ties=ties)
        out = bits.view(dtype).reshape(x32.shape)
        idx = np.flatnonzero(ties)
    if idx.size:
        flat_out = out.reshape(-1)
        flat_out[idx] = np.asarray(list(correctly_rounded(idx)), dtype=np.float64).astype(dtype)
    return out
