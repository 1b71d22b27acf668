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
import threading
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
    gap = np.asarray(approx, dtype=np.float64).reshape(-1) - tie
    result = np.where(gap * (other - even) > 0, other, even)
    # near the tie (or a NaN gap): the reference decides
    for t in np.flatnonzero(~(np.abs(gap) > margin)).tolist():
        result[t] = exact(t)
    return result.tolist()


#: elements narrowed per backend call by :func:`narrow`: its flags (one byte each) stay in a
#: per-thread buffer of this size, reused from call to call
_TIE_BLOCK = 1 << 20

#: the largest scratch array (bytes) a thread keeps between calls (see :func:`take_scratch`)
_SCRATCH_KEEP = 4 << 20


class _Scratch(threading.local):
    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}


_SCRATCH = _Scratch()


def take_scratch(size: int, dtype) -> np.ndarray:
    """A 1-D ``dtype`` array of at least ``size`` elements (contents undefined), the one this
    thread last gave back to :func:`give_scratch` when it is large enough: a fresh array of
    megabytes page-faults on first touch, which cost more than the narrowing itself.  The
    array leaves the cache while taken, so a nested or concurrent use never shares it."""
    arr = _SCRATCH.arrays.pop(np.dtype(dtype).str, None)
    if arr is None or arr.size < size:
        arr = np.empty(size, dtype=dtype)
    return arr


def give_scratch(arr: np.ndarray) -> None:
    """Return an array from :func:`take_scratch` to this thread's cache (kept when at most
    :data:`_SCRATCH_KEEP` bytes; the larger of two is kept)."""
    if arr.nbytes <= _SCRATCH_KEEP:
        key = arr.dtype.str
        held = _SCRATCH.arrays.get(key)
        if held is None or held.size < arr.size:
            _SCRATCH.arrays[key] = arr


def _flagged(flags: np.ndarray) -> np.ndarray:
    """Ascending indices of the true elements of the 1-D bool array ``flags`` (a few per
    thousand at most): the words of eight flags that are not all zero first (one compare on
    an eighth as many elements: NumPy's nonzero on the bytes themselves is ~3x slower), then
    the flags within them."""
    n = flags.size
    if n < 1 << 16:  # a few calls' overhead would outweigh the saving
        return np.flatnonzero(flags)
    whole = n - n % 8
    words = np.flatnonzero(flags[:whole].view(np.uint64) != 0) if whole else np.empty(0, np.intp)
    idx = (words[:, None] * 8 + np.arange(8))[flags[:whole].reshape(-1, 8)[words]]
    if whole < n:
        idx = np.concatenate([idx, whole + np.flatnonzero(flags[whole:])])
    return idx


def narrow(
    x32: np.ndarray,
    dtype: np.dtype,
    correctly_rounded: Callable[[np.ndarray], Sequence[float]],
    module=None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``x32`` (float32, each the correctly rounded float32 of an exact value) in ``dtype``,
    each element the correctly rounded ``dtype`` number of the *exact* value.

    ``correctly_rounded(flat_indices)`` returns, for the few elements whose float32 is a
    tie in ``dtype`` (flat indices, ascending), their correctly rounded values in ``dtype``
    (as floats), computed from the exact values (the reference).  float32 and float64
    targets pass through ``astype``.  ``module``, a backend, does the rounding and finds the
    ties in one parallel pass (its ``narrow16`` operation); without it, NumPy's cast and
    :func:`narrow_ties` do.  ``out`` (``dtype``, ``x32``'s shape), when given, is written
    and returned: straight into its memory when it is C-contiguous, with no temporary.
    """
    dtype = np.dtype(dtype)
    fmt = format_of(dtype)
    if out is None:
        if dtype == np.float32:
            return x32
        if fmt.mant_bits >= 24:
            return x32.astype(dtype)
        out = np.empty(x32.shape, dtype=dtype)
    elif fmt.mant_bits >= 24 or not out.flags.c_contiguous:
        out[...] = narrow(x32, dtype, correctly_rounded, module)
        return out
    flat_out = out.reshape(-1)
    if module is None:
        np.copyto(flat_out, x32.reshape(-1), casting="unsafe")  # NumPy's (ml_dtypes') cast
        idx = narrow_ties(x32, fmt)
    else:
        flat = np.ascontiguousarray(x32, dtype=np.float32).reshape(-1).view(np.uint32)
        bits = flat_out.view(np.uint16)
        bf16 = fmt.name == "bfloat16"
        flags = take_scratch(min(flat.size, _TIE_BLOCK), np.bool_)
        try:
            found = []
            for lo in range(0, flat.size, _TIE_BLOCK):
                hi = min(flat.size, lo + _TIE_BLOCK)
                ties = flags[:hi - lo]
                module.narrow16(bits32=flat[lo:hi], bf16=bf16, out=bits[lo:hi], ties=ties)
                found.append(lo + _flagged(ties))
        finally:
            give_scratch(flags)
        idx = found[0] if len(found) == 1 else np.concatenate(found) if found else np.empty(0, np.intp)
    if idx.size:
        flat_out[idx] = np.asarray(list(correctly_rounded(idx)), dtype=np.float64).astype(dtype)
    return out
