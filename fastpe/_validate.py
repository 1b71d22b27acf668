"""Argument checks, one helper per concern.  Everything is checked here, once, at the API
boundary; kernels assume valid input and never raise.

Each failure is a :class:`TypeError` (wrong kind of object) or :class:`ValueError` (right kind,
bad value) whose message starts with the argument's name.
"""

from __future__ import annotations

import math
import numbers
import operator
from decimal import Decimal, localcontext

import numpy as np

__all__ = [
    "check_d_model",
    "check_max_len",
    "check_base",
    "check_positions",
    "check_signed_positions",
    "check_out",
    "MAX_D_MODEL",
    "POSITION_LIMIT",
    "check_finite_real",
    "check_inv_freq",
    "check_layout",
    "check_rotary_dim",
    "check_inplace",
    "check_position_grid",
    "check_offset",
    "MAX_INV_FREQ",
    "ROPE_LAYOUTS",
]

MAX_D_MODEL = 65536
#: positions are unsigned 32-bit integers
POSITION_LIMIT = 1 << 32


def _is_integer(x) -> bool:
    return isinstance(x, (numbers.Integral, np.integer)) and not isinstance(x, (bool, np.bool_))


def check_int(name: str, value, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` as a Python int in ``[low, high]``; bools and floats are rejected."""
    if not _is_integer(value):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {_short(value)}")
    value = operator.index(value)
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {_short(value)}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high}, got {_short(value)}")
    return value


def check_d_model(d_model) -> int:
    return check_int("d_model", d_model, low=1, high=MAX_D_MODEL)


def check_max_len(max_len) -> int:
    return check_int("max_len", max_len, low=1, high=POSITION_LIMIT)


def _as_float(name: str, value) -> float:
    """``float(value)``, with a Python int too large for a double (``10**400``) reported as a
    ValueError naming the argument rather than a bare OverflowError."""
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{name} must be finite, got {_short(value)}") from None


def _short(value) -> str:
    """``value`` for an error message: an integer or fraction far outside the float range
    as its magnitude (``1.000e+400``), not thousands of digits (Python refuses to print an
    int of more than 4300 digits at all)."""
    if isinstance(value, numbers.Rational) and value and not 1e-20 < abs(value) < 1e20:
        with localcontext() as ctx:
            ctx.prec = 4
            return f"{Decimal(int(value.numerator)) / Decimal(int(value.denominator)):.3e}"
    return repr(value)


def _reject_bools(positions, arr: np.ndarray, name: str) -> None:
    """A Python sequence mixing bools with numbers (``[1, True]``) converts to an integer
    array in which the bools are lost; refuse it as an all-bool array is refused."""
    if isinstance(positions, np.ndarray) or arr.dtype.kind not in "iuf" or arr.size == 0:
        return
    try:
        items = np.asarray(positions, dtype=object).reshape(-1)
    except (ValueError, TypeError):  # pragma: no cover - converted once already
        return
    if any(isinstance(v, (bool, np.bool_)) for v in items):
        raise TypeError(f"{name} must hold numbers, got a bool among them")


def check_base(base) -> float:
    if isinstance(base, (bool, np.bool_)) or not isinstance(base, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"base must be a real number, got {type(base).__name__} {base!r}")
    value = _as_float("base", base)
    if not math.isfinite(value):
        raise ValueError(f"base must be finite, got {value!r}")
    if value <= 1.0:
        raise ValueError(f"base must be greater than 1, got {value!r}")
    return value


def _integers(positions, name: str):
    """``positions`` as a 1-D array of whole numbers and its least and greatest values
    (``None`` for both when empty); any integer dtype, a Python sequence of ints, or floats
    holding whole numbers; an object array comes back holding Python ints.  Bools, NaN,
    inf, fractions, ragged and other input refused by name."""
    if isinstance(positions, (str, bytes)):
        raise TypeError(f"{name} must be an array of integers, got {type(positions).__name__}")
    try:
        arr = np.asarray(positions)
    except (ValueError, TypeError) as exc:  # ragged nested lists and the like
        raise ValueError(f"{name} must be a 1-D array of integers: {exc}") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got an array of shape {arr.shape}")
    kind = arr.dtype.kind
    if kind == "b":
        raise TypeError(f"{name} must hold integers, got booleans")
    _reject_bools(positions, arr, name)
    if arr.size == 0:
        if kind not in "iufO":
            raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
        return arr, None, None
    if kind in "iu":
        lo, hi = int(arr.min()), int(arr.max())
    elif kind == "f":
        if not np.isfinite(arr).all():
            raise ValueError(f"{name} must be finite integers, got NaN or inf")
        if not (arr == np.floor(arr)).all():
            bad = float(arr[arr != np.floor(arr)][0])
            raise ValueError(f"{name} must be whole numbers, got {bad!r}")
        lo, hi = float(arr.min()), float(arr.max())
    elif kind == "O":
        for v in arr:
            if not _is_integer(v):
                raise TypeError(f"{name} must hold integers, got {type(v).__name__} {v!r}")
        arr = np.array([int(v) for v in arr], dtype=object)
        lo, hi = min(arr), max(arr)
    else:
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    return arr, lo, hi


def check_positions(positions, name: str = "positions") -> np.ndarray:
    """Validate an array-like of positions; return it as a C-contiguous ``uint32`` array.

    Accepts any integer dtype, a Python sequence of ints, or floats holding whole numbers.
    The input is never modified (a copy is made whenever conversion is needed).
    """
    arr, lo, hi = _integers(positions, name)
    if lo is None:
        return np.empty(0, dtype=np.uint32)
    if lo < 0:
        raise ValueError(f"{name} must be >= 0, got {lo}")
    if hi >= POSITION_LIMIT:
        raise ValueError(f"{name} must be < 2**32, got {int(hi)}")
    return np.ascontiguousarray(arr.astype(np.uint32, copy=False))


def check_signed_positions(positions, name: str = "positions") -> np.ndarray:
    """Validate an array-like of signed positions, each in ``(-2**32, 2**32)``; return it as a
    C-contiguous ``int64`` array.

    As :func:`check_positions` in everything else (any integer dtype, a Python sequence of
    ints, floats holding whole numbers; bools, NaN, inf, fractions and ragged input refused;
    the input never modified).  ``-0.0`` is the position 0.
    """
    arr, lo, hi = _integers(positions, name)
    if lo is None:
        return np.empty(0, dtype=np.int64)
    if lo <= -POSITION_LIMIT:
        raise ValueError(f"{name} must be > -2**32, got {_short(int(lo))}")
    if hi >= POSITION_LIMIT:
        raise ValueError(f"{name} must be < 2**32, got {_short(int(hi))}")
    # a float -0.0 becomes the integer 0; every value fits in int64 exactly
    return np.ascontiguousarray(arr.astype(np.int64, copy=False))


def check_out(out, shape: tuple[int, ...], name: str = "out", dtype=np.float32) -> np.ndarray:
    """``out`` must be a writable, C-contiguous array of ``dtype`` and exactly ``shape``."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(out).__name__}")
    if out.dtype != np.dtype(dtype):
        raise TypeError(f"{name} must have dtype {np.dtype(dtype).name}, got {out.dtype}")
    if out.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {out.shape}")
    if not out.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    if not out.flags.writeable:
        raise ValueError(f"{name} is read-only")
    if not out.dtype.isnative:
        raise ValueError(f"{name} must be in native byte order")
    return out


def check_no_overlap(out: np.ndarray, other, name: str = "out", other_name: str = "positions") -> None:
    if isinstance(other, np.ndarray) and np.may_share_memory(out, other):
        raise ValueError(f"{name} must not share memory with {other_name}")


# --------------------------------------------------------------------------- RoPE

#: the largest inverse frequency (radians per position) the exactness analysis covers: the
#: plan's words (``fastpe._plans.words``) keep the reduced angle to ~``2**-75`` turns at
#: ``p < 2**32`` up to this frequency (``2**-85`` at a frequency of 1).  Every RoPE formula in
#: use gives at most 1 (``base**0``), a LongRoPE factor below one a little more.
MAX_INV_FREQ = 1024.0

ROPE_LAYOUTS = ("neox", "gptj")


def check_finite_real(name: str, value) -> float:
    """``value`` as a finite Python float; bools, strings and complex numbers are rejected."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    result = _as_float(name, value)
    if not math.isfinite(result):
        raise ValueError(f"{name} must be finite, got {result!r}")
    return result


def check_inv_freq(inv_freq, name: str = "inv_freq") -> tuple[float, ...]:
    """A non-empty 1-D array-like of finite frequencies in ``[0, MAX_INV_FREQ]``, as a tuple
    of Python floats (each the exact value of a double; float32 input converts exactly)."""
    if isinstance(inv_freq, (str, bytes)):
        raise TypeError(f"{name} must be a 1-D array of floats, got {type(inv_freq).__name__}")
    try:
        arr = np.asarray(inv_freq)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{name} must be a 1-D array of floats: {exc}") from None
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got an array of shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must hold at least one frequency")
    with np.errstate(over="ignore"):  # a longdouble beyond the doubles becomes inf, refused below
        arr = arr.astype(np.float64)
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite, got NaN or inf")
    if (arr < 0).any():
        raise ValueError(f"{name} must be >= 0, got {float(arr.min())!r}")
    if (arr > MAX_INV_FREQ).any():
        raise ValueError(f"{name} must be <= {MAX_INV_FREQ:g}, got {float(arr.max())!r}")
    return tuple(float(f) for f in arr)


def check_layout(layout) -> str:
    if not isinstance(layout, str):
        raise TypeError(f"layout must be a string, got {type(layout).__name__} {layout!r}")
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(map(repr, ROPE_LAYOUTS))}, got {layout!r}")
    return layout


def check_rotary_dim(rotary_dim, n_freq: int, head_dim: int | None = None) -> int:
    """``rotary_dim`` (``None``: ``2 * n_freq``) must be even, match the frequencies and fit."""
    if rotary_dim is None:
        rotary_dim = 2 * n_freq
    else:
        rotary_dim = check_int("rotary_dim", rotary_dim, low=2)
        if rotary_dim % 2:
            raise ValueError(f"rotary_dim must be even, got {rotary_dim}")
        if rotary_dim != 2 * n_freq:
            raise ValueError(
                f"rotary_dim must be 2 * len(inv_freq) = {2 * n_freq}, got {rotary_dim}"
            )
    if head_dim is not None and rotary_dim > head_dim:
        raise ValueError(
            f"rotary_dim {rotary_dim} (2 * len(inv_freq)) exceeds head_dim {head_dim}"
        )
    return rotary_dim


def check_inplace(x, name: str) -> np.ndarray:
    """``x`` must be a writable, C-contiguous, native float32 array of 3 or 4 dimensions:
    ``(tokens, heads, head_dim)`` or ``(batch, heads, seq, head_dim)``."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype != np.float32:
        # a byte-swapped float32 ('>f4') is not equal to float32 either: the kernels write native words
        if x.dtype.kind == "f" and x.dtype.newbyteorder("=") == np.float32:
            raise TypeError(f"{name} must have dtype float32 in native byte order, got {x.dtype.str!r}")
        raise TypeError(f"{name} must have dtype float32, got {x.dtype}")
    if x.ndim not in (3, 4):
        raise ValueError(
            f"{name} must have shape (tokens, heads, head_dim) or (batch, heads, seq, head_dim), "
            f"got a {x.ndim}-D array of shape {x.shape}"
        )
    if not x.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    if not x.flags.writeable:
        raise ValueError(f"{name} is read-only (it is rotated in place)")
    return x


def check_position_grid(positions, shapes: tuple[tuple[int, ...], ...], name: str = "positions") -> np.ndarray:
    """Positions of one of ``shapes`` (each 1-D or 2-D), as a C-contiguous ``uint32`` array.

    Each element is checked as :func:`check_positions` does (any integer dtype, whole floats,
    ``[0, 2**32)``); the input is never modified.
    """
    if isinstance(positions, (str, bytes)):
        raise TypeError(f"{name} must be an array of integers, got {type(positions).__name__}")
    try:
        arr = np.asarray(positions)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{name} must be an array of integers: {exc}") from None
    if arr.shape not in shapes:
        want = " or ".join(dict.fromkeys(str(s) for s in shapes))  # each shape once: (seq,) may be x's too
        raise ValueError(f"{name} must have shape {want}, got {arr.shape}")
    _reject_bools(positions, arr, name)
    flat = check_positions(arr.reshape(-1), name)
    return flat.reshape(arr.shape)


def check_offset(offset, n: int) -> int:
    """``offset`` for positions ``offset .. offset + n - 1``, all below 2**32."""
    offset = check_int("offset", offset, low=0)
    if offset + n > POSITION_LIMIT:
        raise ValueError(f"offset + seq must be <= 2**32, got {offset} + {n} = {offset + n}")
    return offset


# --------------------------------------------------------------------------- sinusoid families


def check_choice(name: str, value, choices: tuple[str, ...]) -> str:
    """``value`` must name one of the lower-case strings ``choices``, in any case and with
    surrounding spaces, as backend and dtype names are: returned as that choice (so
    ``"Halves "`` is ``"halves"``, and a config or spec records ``"halves"``)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__} {value!r}")
    key = value.strip().lower()
    if key not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return key


def check_positive(name: str, value, *, high: float | None = None) -> float:
    """A finite real ``> 0`` (and ``<= high``), as a Python float."""
    result = check_finite_real(name, value)
    if result <= 0:
        raise ValueError(f"{name} must be > 0, got {result!r}")
    if high is not None and result > high:
        raise ValueError(f"{name} must be <= {high:g}, got {result!r}")
    return result


def check_real_positions(x, name: str = "t") -> np.ndarray:
    """A 1-D array-like of finite reals with ``|x| < 2**32``, as a C-contiguous ``float64``
    array (each value taken exactly; integers beyond 2**53 are rejected as inexact)."""
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be an array of real numbers, got {type(x).__name__}")
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{name} must be a 1-D array of real numbers: {exc}") from None
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (or a scalar), got an array of shape {arr.shape}")
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    _reject_bools(x, arr, name)
    out = np.ascontiguousarray(arr, dtype=np.float64)
    if out.size:
        if not np.isfinite(out).all():
            raise ValueError(f"{name} must be finite, got NaN or inf")
        big = float(np.abs(out).max())
        if big >= POSITION_LIMIT:
            raise ValueError(f"{name} must be in (-2**32, 2**32), got {big!r}")
    return out


def check_table_out(out, shape: tuple[int, ...], dtypes: tuple[np.dtype, ...], name: str = "out") -> np.ndarray:
    """``out`` as :func:`check_out` requires, of any of ``dtypes``."""
    if isinstance(out, np.ndarray) and out.dtype not in dtypes:
        names = ", ".join(d.name for d in dtypes)
        raise TypeError(f"{name} must have dtype {names}, got {out.dtype}")
    return check_out(out, shape, name, dtype=out.dtype if isinstance(out, np.ndarray) else np.float32)
