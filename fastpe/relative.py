"""T5 relative-position buckets, equal to Hugging Face's ``T5Attention._relative_position_bucket``.

::

    from fastpe import relative

    relative.t5_bucket([-200, -1, 0, 1, 1000])         # [15, 1, 0, 17, 31]
    b = relative.t5_bucket_matrix(512)                  # (512, 512) int64, as T5's compute_bias
    b = relative.t5_bucket_matrix(1, 513, bidirectional=False, offset=512)  # decoding step

What HF computes.  Half of the buckets (per direction) hold the small distances one each;
the other half cover ``[max_exact, max_distance)`` logarithmically:
``max_exact + int(log(float(d) / max_exact) / math.log(max_distance / max_exact) * (n - max_exact))``,
capped at ``n - 1``, where ``n`` is ``num_buckets`` (halved when bidirectional) and
``max_exact = n // 2``.  HF evaluates it in float32: ``float32(d)``, a float32 division, a
float32 ``log``, a division by the Python float rounded to float32, a float32 product, then
truncation.  Where the real value is an integer, or within float32 rounding of one, that
arithmetic -- not the real formula -- decides the bucket: e.g. ``num_buckets=36,
max_distance=50``, distance 30 (unidirectional) is exactly 27 in real arithmetic; HF gives 27
while the same float32 arithmetic with a correctly rounded log gives 26.

How fastpe is equal to it.  The bucket is a non-decreasing step function of the distance,
so each configuration has a table of thresholds: the smallest distance that reaches each
bucket under HF's float32 arithmetic.  :func:`_plan` builds it once per configuration by
searching HF's formula emulated operation by operation (float32 quotients and products are
IEEE, so emulating them is exact); the kernels then only compare integers.  The one
operation that is not pinned down is the float32 ``log``: torch's is within one ULP, not
correctly rounded (the MKL build it was developed with differs from the correctly rounded
log on ~9% of the float32 inputs in [1, 4)).  At almost every argument that does not matter: the bucket is the same whichever of
the two float32 neighbours of the true log is used.  Where it does matter -- a *fragile*
argument, rare (18 of 35,520 configurations tested have one, T5's own have none) -- HF's
answer is whatever its torch build's log returns (MKL, SLEEF and a GPU may differ), so no
single answer is "HF's".  fastpe takes the correctly rounded log there: its buckets are the
same on every machine, and equal HF's wherever HF's own are (the tests show that with this
machine's torch log plugged in through ``fastpe._plans.t5._hf_log``, the plan reproduces HF at the fragile
arguments too).
Logs of powers of two are taken as correctly rounded: every float32 log in use (MKL, SLEEF,
glibc) computes them as ``k * ln 2`` in extra precision.  The tests compare with HF's own
function over every relative position of thousands of configurations, fragile ones included.
"""

from __future__ import annotations

import numbers

import numpy as np

from . import _backends
from ._validate import _short, check_int
from .sinusoid import output_array

__all__ = ["t5_bucket", "t5_bucket_matrix", "MAX_BUCKETS", "MAX_DISTANCE", "MAX_LEN"]

MAX_BUCKETS = 4096
MAX_DISTANCE = 1 << 32
#: query and key lengths of a bucket matrix
MAX_LEN = 1 << 32
#: offset bound: relative positions stay far inside int64
MAX_OFFSET = 1 << 62
MAX_ELEMENTS = 1 << 40

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


# ------------------------------------------------------------------------------ validation


def _check_config(bidirectional, num_buckets, max_distance) -> tuple[bool, int, int, int]:
    """``(bidirectional, num_buckets, max_distance, n)`` with ``n`` buckets per direction."""
    if not isinstance(bidirectional, (bool, np.bool_)):
        raise TypeError(f"bidirectional must be True or False, got {type(bidirectional).__name__} {bidirectional!r}")
    bidirectional = bool(bidirectional)
    least = 4 if bidirectional else 2
    num_buckets = check_int("num_buckets", num_buckets, low=least, high=MAX_BUCKETS)
    n = num_buckets // 2 if bidirectional else num_buckets
    exact = n // 2
    max_distance = check_int("max_distance", max_distance, high=MAX_DISTANCE)
    if max_distance <= exact:
        raise ValueError(
            f"max_distance must be greater than max_exact = {exact} (half of the "
            f"{'per-direction ' if bidirectional else ''}buckets), got {max_distance}"
        )
    return bidirectional, num_buckets, max_distance, n


#: the bucket dtypes, the default first
_INT_DTYPES = (np.dtype(np.int64), np.dtype(np.int32))


def _check_int_dtype(dtype) -> np.dtype:
    """``dtype`` as spelled for every fastpe ``dtype`` (a name in any case, a NumPy dtype or
    scalar type): int64 or int32, in native byte order."""
    if isinstance(dtype, str) and dtype.strip().lower() in ("int64", "int32"):
        dtype = dtype.strip().lower()
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError):  # ValueError: a malformed structured description
        raise TypeError(f"dtype must be int64 or int32, got {dtype!r}") from None
    if dt not in _INT_DTYPES:
        # a byte-swapped int64 is named int64 too: show its code ('>i8') then
        shown = dt.name if dt.isnative else f"{dt.str!r} (not in native byte order)"
        raise TypeError(f"dtype must be int64 or int32, got {shown}")
    return dt


def _check_relative(relative_position) -> np.ndarray:
    """Any-shape integers in ``(-2**63, 2**63)`` as a C-contiguous int64 array."""
    name = "relative_position"
    if isinstance(relative_position, (str, bytes)):
        raise TypeError(f"{name} must be an array of integers, got {type(relative_position).__name__}")
    try:
        arr = np.asarray(relative_position)
    except (ValueError, TypeError) as exc:  # ragged nested lists and the like
        raise ValueError(f"{name} must be an array of integers: {exc}") from None
    kind = arr.dtype.kind
    if kind == "b":
        raise TypeError(f"{name} must hold integers, got booleans")
    if kind == "f" and arr.size == 0:  # [] is float64 to NumPy: no value to refuse
        return np.empty(arr.shape, dtype=np.int64)
    if kind == "O":
        values = arr.reshape(-1).tolist()
        for v in values:
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Integral, np.integer)):
                raise TypeError(f"{name} must hold integers, got {type(v).__name__} {v!r}")
        if values:
            lo, hi = min(int(v) for v in values), max(int(v) for v in values)
            if lo <= _INT64_MIN or hi > _INT64_MAX:
                bad = lo if lo <= _INT64_MIN else hi
                raise ValueError(f"{name} must be in (-2**63, 2**63), got {_short(bad)}")
        return np.array([int(v) for v in values], dtype=np.int64).reshape(arr.shape)
    if kind not in "iu":
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.size:
        if kind == "u" and int(arr.max()) > _INT64_MAX:
            raise ValueError(f"{name} must be in (-2**63, 2**63), got {int(arr.max())}")
        if kind == "i" and int(arr.min()) == _INT64_MIN:
            raise ValueError(f"{name} must be in (-2**63, 2**63), got {_INT64_MIN} (its abs() overflows)")
    return arr.astype(np.int64, order="C", copy=False)  # keeps the shape, 0-d included


def _output(out, shape, dtype, inputs=()) -> np.ndarray:
    """The bucket array: ``out`` checked, else a new one (``dtype=None``: int64)."""
    return output_array(out, shape, dtype, inputs, dtypes=_INT_DTYPES, default=np.int64, resolve=_check_int_dtype)


# ---------------------------------------------------------------------------------- public


def t5_bucket(relative_position, *, bidirectional=True, num_buckets=32, max_distance=128,
              dtype=None, out=None, backend=None) -> np.ndarray:
    """HF T5's bucket of each relative position (memory position minus query position).

    ``relative_position``: integers of any shape (a list, a NumPy array, a CPU tensor).
    Returns an array of the same shape, ``int64`` as HF's (``dtype="int32"`` on request),
    equal to ``T5Attention._relative_position_bucket`` of the same arguments.  ``out``, if
    given (int64 or int32, that shape, C-contiguous, writable, not sharing memory with
    ``relative_position``), is filled and returned; ``dtype=None`` means its dtype.
    ``bidirectional=False`` is T5's decoder: positive positions (the future) share bucket 0.
    ``num_buckets >= 4`` (``>= 2`` unidirectional) and ``max_distance`` greater than
    ``max_exact`` (a quarter of ``num_buckets`` bidirectional, half unidirectional).
    """
    bidirectional, num_buckets, max_distance, _ = _check_config(bidirectional, num_buckets, max_distance)
    if dtype is not None:
        _check_int_dtype(dtype)  # a bad dtype is named before a bad relative_position
    rel = _check_relative(relative_position)
    out = _output(out, rel.shape, dtype, [("relative_position", relative_position), ("relative_position", rel)])
    _, module = _backends.resolve(backend)
    if rel.size:
        module.t5_bucket(relative_position=rel.reshape(-1), bidirectional=bidirectional,
                         num_buckets=num_buckets, max_distance=max_distance, out=out.reshape(-1))
    return out


def t5_bucket_matrix(q_len, k_len=None, *, bidirectional=True, num_buckets=32, max_distance=128,
                     offset=0, dtype=None, out=None, backend=None) -> np.ndarray:
    """The ``(q_len, k_len)`` buckets of ``j - (i + offset)``, as T5's ``compute_bias``.

    ``k_len`` defaults to ``q_len``; ``offset`` is the position of the first query (the
    tokens already in the cache when decoding).  Equal to
    ``t5_bucket(np.arange(k_len)[None, :] - np.arange(q_len)[:, None] - offset, ...)``,
    filled by a kernel (in parallel when large) without building the positions.  ``dtype``
    and ``out`` as in :func:`t5_bucket`.
    """
    bidirectional, num_buckets, max_distance, _ = _check_config(bidirectional, num_buckets, max_distance)
    q_len = check_int("q_len", q_len, low=1, high=MAX_LEN)
    k_len = q_len if k_len is None else check_int("k_len", k_len, low=1, high=MAX_LEN)
    offset = check_int("offset", offset, low=0, high=MAX_OFFSET)
    if q_len * k_len > MAX_ELEMENTS:
        raise ValueError(f"q_len * k_len must be <= 2**40, got {q_len} * {k_len}")
    out = _output(out, (q_len, k_len), dtype)
    _, module = _backends.resolve(backend)
    module.t5_bucket_matrix(query_offset=offset, bidirectional=bidirectional,
                            num_buckets=num_buckets, max_distance=max_distance, out=out)
    return out
