"""Argument checks, one helper per concern.  Everything is checked here, once, at the API
boundary; kernels assume valid input and never raise.

Each failure is a :class:`TypeError` (wrong kind of object) or :class:`ValueError` (right kind,
bad value) whose message starts with the argument's name.
"""

from __future__ import annotations

import math
import numbers
import operator

import numpy as np

__all__ = [
    "check_d_model",
    "check_max_len",
    "check_base",
    "check_positions",
    "check_out",
    "MAX_D_MODEL",
    "POSITION_LIMIT",
]

MAX_D_MODEL = 65536
#: positions are unsigned 32-bit integers
POSITION_LIMIT = 1 << 32


def _is_integer(x) -> bool:
    return isinstance(x, (numbers.Integral, np.integer)) and not isinstance(x, (bool, np.bool_))


def check_int(name: str, value, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` as a Python int in ``[low, high]``; bools and floats are rejected."""
    if not _is_integer(value):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    value = operator.index(value)
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high}, got {value}")
    return value


def check_d_model(d_model) -> int:
    return check_int("d_model", d_model, low=1, high=MAX_D_MODEL)


def check_max_len(max_len) -> int:
    return check_int("max_len", max_len, low=1, high=POSITION_LIMIT)


def check_base(base) -> float:
    if isinstance(base, (bool, np.bool_)) or not isinstance(base, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"base must be a real number, got {type(base).__name__} {base!r}")
    value = float(base)
    if not math.isfinite(value):
        raise ValueError(f"base must be finite, got {value!r}")
    if value <= 1.0:
        raise ValueError(f"base must be greater than 1, got {value!r}")
    return value


def check_positions(positions, name: str = "positions") -> np.ndarray:
    """Validate an array-like of positions; return it as a C-contiguous ``uint32`` array.

    Accepts any integer dtype, a Python sequence of ints, or floats holding whole numbers.
    The input is never modified (a copy is made whenever conversion is needed).
    """
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
    if arr.size == 0:
        if kind not in "iufO":
            raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
        return np.empty(0, dtype=np.uint32)
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
        lo, hi = min(int(v) for v in arr), max(int(v) for v in arr)
        arr = np.array([int(v) for v in arr], dtype=object)
    else:
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    if lo < 0:
        raise ValueError(f"{name} must be >= 0, got {lo}")
    if hi >= POSITION_LIMIT:
        raise ValueError(f"{name} must be < 2**32, got {int(hi)}")
    return np.ascontiguousarray(arr.astype(np.uint32, copy=False))


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
