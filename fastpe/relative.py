"""Relative positions of attention, equal to their peers': T5's buckets (Hugging Face's
``T5Attention._relative_position_bucket``), DeBERTa's log buckets (HF deberta_v2's
``make_log_bucket_position`` and ``build_relative_position``) and Shaw et al.'s clipped
distances (tensor2tensor's ``_generate_relative_positions_matrix``).

::

    from fastpe import relative

    relative.t5_bucket([-200, -1, 0, 1, 1000])         # [15, 1, 0, 17, 31]
    b = relative.t5_bucket_matrix(512)                  # (512, 512) int64, as T5's compute_bias
    b = relative.t5_bucket_matrix(1, 513, bidirectional=False, offset=512)  # decoding step
    relative.deberta_bucket([-1000, 5, 600])            # [-317, 5, 270]: DeBERTa-v3's 256 / 512
    r = relative.deberta_bucket_matrix(512)             # (512, 512) int64: build_relative_position[0]
    s = relative.shaw_positions(512, max_relative_position=16)   # (512, 512) int32

DeBERTa's buckets are HF's float32 formula reproduced the way T5's are (below): a plan per
configuration, built by emulating the float32 operations exactly, where the bucket changes
(:mod:`fastpe._plans.deberta`), the correctly rounded float32 log where only torch's last bit
would decide; the kernels compare integers.  Shaw's positions are integers throughout.

The T5 buckets in detail.

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
from ._sandwich import sandwich_bias  # noqa: E402  (Sandwich: fastpe._sandwich)

__all__ = ["t5_bucket", "t5_bucket_matrix", "deberta_bucket", "deberta_bucket_matrix", "shaw_positions", "sandwich_bias",
           "MAX_BUCKETS", "MAX_DISTANCE", "MAX_LEN"]

MAX_BUCKETS = 4096
MAX_DISTANCE = 1 << 32
#: query and key lengths of a bucket matrix
MAX_LEN = 1 << 32
#: offset bound: relative positions stay far inside int64
MAX_OFFSET = 1 << 62
MAX_ELEMENTS = 1 << 40

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1


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


# ------------------------------------------------------------------------------ DeBERTa
# HF deberta_v2's make_log_bucket_position and build_relative_position: see
# fastpe._plans.deberta for the float32 formula and how its plan is built.


def _check_deberta(bucket_size, max_position) -> tuple[int, int]:
    from ._plans.deberta import MAX_BUCKET_SIZE, MAX_POSITION

    bucket_size = check_int("bucket_size", bucket_size, low=2, high=MAX_BUCKET_SIZE)
    mid = bucket_size // 2
    # HF divides by log((max_position - 1) / mid): it must be positive
    max_position = check_int("max_position", max_position, high=MAX_POSITION)
    if max_position < mid + 2:
        raise ValueError(f"max_position must be >= bucket_size // 2 + 2 = {mid + 2} (HF divides by "
                         f"log((max_position - 1) / (bucket_size // 2))), got {max_position}")
    return bucket_size, max_position


def _target(dtype, out, default) -> np.dtype:
    """The dtype a call will write (``dtype``, else ``out``'s, else ``default``), known before
    ``out`` is checked or anything allocated; :func:`_output` checks both afterwards."""
    if dtype is not None:
        return _check_int_dtype(dtype)
    return out.dtype if isinstance(out, np.ndarray) else np.dtype(default)


def _check_plan_size(bucket_size: int, max_position: int, distance: int) -> None:
    """Refuse, before any work, a configuration whose plan up to ``distance`` would be huge:
    ``max_position`` barely above ``bucket_size // 2`` makes HF's buckets climb by one per
    few distances, without a cap."""
    from ._plans.deberta import MAX_STARTS, plan_size

    size = plan_size(bucket_size, max_position, distance)
    if size > MAX_STARTS:
        raise ValueError(
            f"max_position={max_position} with bucket_size={bucket_size} gives {size} distinct buckets up to "
            f"distance {distance} (at most 2**20): use a larger max_position or smaller relative positions")


def deberta_bucket(relative_position, bucket_size=256, max_position=512, *, dtype=None, out=None,
                   backend=None) -> np.ndarray:
    """HF DeBERTa-v2/v3's log bucket of each relative position (query minus key).

    Equal to ``make_log_bucket_position(relative_position, bucket_size, max_position)`` of
    ``transformers.models.deberta_v2`` as the integers ``.to(torch.long)`` makes of its float32
    values (``build_relative_position`` does that): ``rp`` itself where ``|rp| <= bucket_size
    // 2``, else ``sign(rp) * (ceil(log(|rp| / mid) / log((max_position - 1) / mid) * (mid -
    1)) + mid)`` in HF's float32 arithmetic, not capped.  The defaults are DeBERTa-v3's
    (``position_buckets`` 256, ``max_position_embeddings`` 512).  ``relative_position``:
    integers of any shape, in ``(-2**63, 2**63)``; returns int64 of that shape
    (``dtype="int32"`` on request); ``out`` as in :func:`t5_bucket`.  ``bucket_size`` in
    ``[2, 2**16]``, ``max_position`` in ``[bucket_size // 2 + 2, 2**62]``.  Where only the last
    bit of torch's float32 log decides (the divisor, or a *fragile* argument), fastpe takes
    the correctly rounded log (see :mod:`fastpe._plans.deberta`).
    """
    bucket_size, max_position = _check_deberta(bucket_size, max_position)
    if dtype is not None:
        _check_int_dtype(dtype)
    rel = _check_relative(relative_position)
    reach = max(int(rel.max()), -int(rel.min())) if rel.size else 0
    _check_plan_size(bucket_size, max_position, reach)
    out = _output(out, rel.shape, dtype, [("relative_position", relative_position), ("relative_position", rel)])
    _, module = _backends.resolve(backend)
    if rel.size:
        module.deberta_bucket(relative_position=rel.reshape(-1), bucket_size=bucket_size,
                              max_position=max_position, out=out.reshape(-1))
    return out


def deberta_bucket_matrix(q_len, k_len=None, *, bucket_size=256, max_position=512, dtype=None, out=None,
                          backend=None) -> np.ndarray:
    """The ``(q_len, k_len)`` relative positions of HF DeBERTa's ``build_relative_position``.

    ``out[i, j]`` is query ``i`` minus key ``j``, bucketed by :func:`deberta_bucket` when
    ``bucket_size > 0`` and ``max_position > 0`` (as HF), else the raw difference.  HF returns
    shape ``(1, q_len, k_len)``; fastpe drops the leading 1 (``[None]`` restores it).
    ``k_len`` defaults to ``q_len``; int64 (``dtype="int32"`` on request); ``out`` as in
    :func:`t5_bucket_matrix`.  Filled row by row by a kernel (in parallel when large).
    """
    bucket_size = check_int("bucket_size", bucket_size)
    max_position = check_int("max_position", max_position)
    bucketed = bucket_size > 0 and max_position > 0  # HF's condition
    if bucketed:
        bucket_size, max_position = _check_deberta(bucket_size, max_position)
    else:
        bucket_size = max_position = 0
    q_len = check_int("q_len", q_len, low=1, high=MAX_LEN)
    k_len = q_len if k_len is None else check_int("k_len", k_len, low=1, high=MAX_LEN)
    if q_len * k_len > MAX_ELEMENTS:
        raise ValueError(f"q_len * k_len must be <= 2**40, got {q_len} * {k_len}")
    if bucketed:
        _check_plan_size(bucket_size, max_position, max(q_len, k_len) - 1)
    if not bucketed and _target(dtype, out, np.int64) == np.int32 and (q_len > 1 << 31 or k_len > (1 << 31) + 1):
        raise ValueError(f"q_len and k_len must be <= 2**31 for int32 relative positions, got {q_len}, {k_len}")
    out = _output(out, (q_len, k_len), dtype)
    _, module = _backends.resolve(backend)
    module.deberta_bucket_matrix(bucket_size=bucket_size, max_position=max_position, out=out)
    return out


# --------------------------------------------------------------------------------- Shaw
# tensor2tensor's _generate_relative_positions_matrix (Shaw et al. 2018, clipped distances)


def shaw_positions(q_len, k_len=None, *, max_relative_position, cache=False, dtype=None, out=None,
                   backend=None) -> np.ndarray:
    """Shaw et al.'s clipped relative positions, equal to tensor2tensor's
    ``_generate_relative_positions_matrix(q_len, k_len, max_relative_position, cache)``.

    ``out[i, j] = clip(j - p_i, -k, k) + k`` (``k = max_relative_position``, in ``[0,
    2**62]``), the index of the learned embedding of that distance, with query ``i`` at key
    position ``p_i = i + k_len - q_len``: tensor2tensor takes the query range as the last
    ``q_len`` of the key range when the lengths differ.  ``q_len <= k_len`` (tensor2tensor's
    slice would silently give ``k_len`` rows otherwise).  ``cache=True`` gives tensor2tensor's
    decoding row, shape ``(1, k_len)``: ``clip(-k_len + 1 .. 0, -k, k) + k`` (the last query's
    row).  int32 by default, as ``tf.range`` gives them (``dtype="int64"`` on request); ``out``
    as in :func:`t5_bucket_matrix`.
    """
    m = check_int("max_relative_position", max_relative_position, low=0, high=MAX_OFFSET)
    if not isinstance(cache, (bool, np.bool_)):
        raise TypeError(f"cache must be True or False, got {type(cache).__name__} {cache!r}")
    q_len = check_int("q_len", q_len, low=1, high=MAX_LEN)
    k_len = q_len if k_len is None else check_int("k_len", k_len, low=1, high=MAX_LEN)
    if q_len > k_len:
        raise ValueError(f"q_len must be <= k_len (the queries are the last q_len keys), got {q_len} > {k_len}")
    rows = 1 if cache else q_len
    if rows * k_len > MAX_ELEMENTS:
        raise ValueError(f"q_len * k_len must be <= 2**40, got {q_len} * {k_len}")
    if dtype is None and out is None:
        dtype = "int32"  # tf.range's
    top = m + (0 if cache else min(m, q_len - 1))  # the largest value written
    if _target(dtype, out, np.int32) == np.int32 and top > _INT32_MAX:
        raise ValueError(f"max_relative_position={m} gives values up to {top}, past int32: ask for dtype='int64'")
    out = _output(out, (rows, k_len), dtype)
    _, module = _backends.resolve(backend)
    module.shaw_matrix(max_relative_position=m, query_offset=k_len - 1 if cache else k_len - q_len, out=out)
    return out
