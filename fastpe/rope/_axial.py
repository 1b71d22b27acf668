"""N-axis (axial) RoPE caches for vision encoders and diffusion transformers, exact.

A token has ``A`` real coordinates (frame, row, column, ...); its head is split into
``A`` blocks of even widths ``axes_dim``, and block ``a`` rotates by coordinate ``a`` at the
frequencies ``w_{a,k} = (1 / linear_factor) * (base * ntk_factor) ** (-2 (k + offset) /
axes_dim[a])``, ``k < axes_dim[a] / 2`` -- diffusers' ``get_1d_rotary_pos_embed`` per axis
(FLUX, Wan, HunyuanVideo, CogVideoX, Qwen-Image), timm/EVA's ``RotaryEmbeddingCat``,
Qwen2-VL's vision tower and Pixtral (``offset`` 1/2 on the width axis).

:func:`axial_cos_sin` returns ``(cos, sin)``, each ``(n, sum(axes_dim))``; every value is the
cosine or sine of the exact real product ``x * w`` (``x`` the coordinate taken at its exact
double value, ``w`` the exact real frequency, never a rounded double) rounded to the output
dtype: float32 within 1 ULP of the correctly rounded value, float16/bfloat16 correctly
rounded, float64 within ``2**-45``.  The values come from the sinusoid families' exact
kernels (``sincos_rows`` for whole-number coordinates, ``sincos_real`` for the others), one
row per distinct coordinate of an axis, then copied into place.

The grid builders below return the ``(n, A)`` float64 coordinates of the conventions in use,
each coordinate the double nearest to the convention's exact (rational) value.

The peers round the frequency itself: FLUX (``FluxPosEmbed``) and Wan use the float64
``1 / theta ** (2k / dim)`` and float64 angles (FLUX first casts the coordinates to float32);
diffusers' default ``get_1d_rotary_pos_embed`` (HunyuanVideo, CogVideoX, the 2-D/3-D helpers),
Qwen-Image, HF Qwen2-VL's vision tower, Pixtral and timm work in float32 throughout.  This
module computes the exact real frequency instead.  Measured largest errors against the exact
values (float32 caches): FLUX 64x64 and Wan 21x60x104 3.0e-8 (half a float32 ULP at 1: they
round a float64 once, as fastpe does); HunyuanVideo 33x45x80 (theta 256) 4.7e-6;
CogVideoX 13x30x45 1.4e-6; ``get_2d_rotary_pos_embed`` 64x64 1.9e-6; Qwen2-VL 98x146
patches 8.2e-6; Pixtral 64x64 1.9e-6; timm/EVA 32x32 (ref 16x16) 4.9e-7;
``get_1d_rotary_pos_embed`` at 4096 positions with ``ntk_factor=4, linear_factor=2`` 8.1e-5.
fastpe's own: 3.0e-8 in every case.
"""

from __future__ import annotations

import functools
import math
import numbers
from fractions import Fraction

import numpy as np

from .. import _backends
from .._plans.frequencies import DEFAULT_BASE, MAX_FREQUENCY, Geometric
from .._validate import (
    MAX_D_MODEL,
    POSITION_LIMIT,
    check_choice,
    check_finite_real,
    check_int,
    check_no_overlap,
)
from ..sinusoid import fill_real, output_array

__all__ = [
    "AXIAL_LAYOUTS",
    "axial_cos_sin",
    "axial_frequencies",
    "index_grid",
    "linspace_grid",
    "crop_grid",
    "timm_grid",
    "merge_window_grid",
    "prepend_cls",
]

#: ``gptj``: each frequency in two adjacent columns of its block (``[f0 f0 f1 f1 ...]``;
#: diffusers' ``repeat_interleave_real=True``: FLUX, Wan, HunyuanVideo, CogVideoX; timm's
#: default); ``neox``: ``[f0 f1 .. | f0 f1 ..]`` within each axis's block (diffusers'
#: ``repeat_interleave_real=False``); ``neox_head``: the halves span the whole head,
#: ``[axis 0 | axis 1 | ... | axis 0 | axis 1 | ...]`` (HF ``rotate_half`` over the head:
#: Qwen2-VL's vision tower, Pixtral, timm's ``rotate_half=True``).
AXIAL_LAYOUTS = ("gptj", "neox", "neox_head")

#: ``offset`` values the kernels' frequency sets cover: 0, and 1/2 (Pixtral's width axis)
_OFFSETS = (0.0, 0.5)


# ------------------------------------------------------------------------- validation

def _check_axes_dim(axes_dim) -> tuple[int, ...]:
    if isinstance(axes_dim, (str, bytes)) or not hasattr(axes_dim, "__len__"):
        raise TypeError(f"axes_dim must be a sequence of even integers, got {type(axes_dim).__name__}")
    dims = tuple(check_int(f"axes_dim[{a}]", d, low=0) for a, d in enumerate(axes_dim))
    if not dims:
        raise ValueError("axes_dim must name at least one axis, got ()")
    for a, d in enumerate(dims):
        if d % 2:
            raise ValueError(f"axes_dim[{a}] must be even, got {d}")
    if sum(dims) == 0 or sum(dims) > MAX_D_MODEL:
        raise ValueError(f"sum(axes_dim) must be in [2, {MAX_D_MODEL}], got {sum(dims)}")
    return dims


def _per_axis(name: str, value, count: int) -> tuple[float, ...]:
    """A real or one real per axis, as a tuple of finite floats."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a real number or one per axis, got {type(value).__name__}")
    if isinstance(value, (numbers.Real, np.floating, np.integer)) or (
            isinstance(value, np.ndarray) and value.ndim == 0):
        return (check_finite_real(name, value),) * count
    try:
        items = list(value)
    except TypeError:
        raise TypeError(f"{name} must be a real number or one per axis, got {type(value).__name__}") from None
    if len(items) != count:
        raise ValueError(f"{name} must have one value per axis ({count}), got {len(items)}")
    return tuple(check_finite_real(f"{name}[{a}]", v) for a, v in enumerate(items))


def _check_coords(coords, n_axes: int) -> tuple[np.ndarray, list, list]:
    """``(x, lo, hi)``: ``coords`` as a column-major (Fortran-ordered: each axis's column
    contiguous) float64 ``(n, n_axes)`` array of finite reals below 2**32 in magnitude (a
    copy: never the caller's memory), and each column's least and greatest value (lists of
    floats).  ``-0.0`` stays: :func:`_distinct` makes it the coordinate ``0.0``."""
    if isinstance(coords, (str, bytes)):
        raise TypeError(f"coords must be an array of real numbers, got {type(coords).__name__}")
    try:
        arr = np.asarray(coords)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"coords must be a 2-D array of real numbers: {exc}") from None
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"coords must hold real numbers, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"coords must be 2-D (n, axes), got an array of shape {arr.shape}")
    if arr.shape[1] != n_axes:
        raise ValueError(f"coords has {arr.shape[1]} axes but axes_dim has {n_axes}")
    if not isinstance(coords, np.ndarray) and arr.size:
        items = np.asarray(coords, dtype=object).reshape(-1)
        if any(isinstance(v, (bool, np.bool_)) for v in items):
            raise TypeError("coords must hold numbers, got a bool among them")
    if arr.dtype.kind in "iu" and arr.size:
        big = max(abs(int(arr.min())), abs(int(arr.max())))
        if big >= POSITION_LIMIT:
            raise ValueError(f"coords must be in (-2**32, 2**32), got {big}")
    out = np.empty(arr.shape, dtype=np.float64, order="F")
    np.copyto(out, arr, casting="unsafe")  # exact: integers below 2**32, or floats
    if not out.size:
        return out, [0.0] * n_axes, [0.0] * n_axes
    lo, hi = out.min(axis=0).tolist(), out.max(axis=0).tolist()  # NaN propagates to both
    if not all(map(math.isfinite, lo + hi)):
        raise ValueError("coords must be finite, got NaN or inf")
    big = max(-min(lo), max(hi))
    if big >= POSITION_LIMIT:
        raise ValueError(f"coords must be in (-2**32, 2**32), got {big!r}")
    return out, lo, hi


def _exact_product(a: float, b: float) -> float | None:
    """``a * b`` when that double is the exact product, else ``None``."""
    p = a * b
    if math.isfinite(p) and Fraction(p) == Fraction(a) * Fraction(b):
        return p
    return None


@functools.lru_cache(maxsize=256)
def _axis_plan(dim: int, base: float, ntk: float, linear: float, offset: float):
    """``(Geometric, columns)``: the frequency set whose ``columns`` (a slice) are the
    ``dim / 2`` frequencies ``(1 / linear) * (base * ntk) ** (-2 (k + offset) / dim)``.

    Each parameter is a double taken exactly; the rule's real value is kept whenever the
    frequency set can hold it: always with ``ntk_factor = linear_factor = 1``, and whenever
    ``base * ntk_factor`` (and ``* linear_factor``, unless ``1 / linear_factor`` is a double)
    is a double.  Otherwise the product ``base * ntk_factor * linear_factor`` is rounded once
    to a double (diffusers' own ``theta * ntk_factor`` is a rounded double too)."""
    half = dim // 2
    b = _exact_product(base, ntk)
    if b is None:
        b = base * ntk
    lo, scale = 1.0, 1.0
    if linear != 1.0:
        inv = 1.0 / linear
        hi = _exact_product(b, linear)
        if hi is not None:
            lo = linear
        elif Fraction(inv) * Fraction(linear) == 1:
            scale = inv
            hi = b
        else:
            lo, hi = linear, b * linear
    else:
        hi = b
    if offset == 0.0:
        return Geometric(half, float(half), hi, lo, scale), slice(0, half)
    # offset 1/2: the odd members of the set with twice the frequencies, half the step
    return Geometric(dim, float(dim), hi, lo, scale), slice(1, dim, 2)


def axial_frequencies(axes_dim, *, base=DEFAULT_BASE, linear_factor=1.0, ntk_factor=1.0,
                      offset=0.0) -> list[np.ndarray]:
    """Each axis's ``axes_dim[a] / 2`` frequencies rounded to float64 (for inspection and
    tests; the caches never use these rounded values)."""
    dims = _check_axes_dim(axes_dim)
    plans = _plans(dims, base, linear_factor, ntk_factor, offset)
    out = []
    for (freqs, cols), d in zip(plans, dims):
        k = np.arange(freqs.count, dtype=np.float64)
        w = (freqs.scale / freqs.lo) * (freqs.hi / freqs.lo) ** (-k / freqs.n)
        out.append(w[cols] if d else np.empty(0))
    return out


def _plans(dims, base, linear_factor, ntk_factor, offset):
    n_axes = len(dims)
    bases = _per_axis("base", base, n_axes)
    ntks = _per_axis("ntk_factor", ntk_factor, n_axes)
    linears = _per_axis("linear_factor", linear_factor, n_axes)
    offsets = _per_axis("offset", offset, n_axes)
    for a in range(n_axes):
        if bases[a] < 1.0:
            raise ValueError(f"base must be >= 1, got {bases[a]!r}" if n_axes == 1 or len(set(bases)) == 1
                             else f"base[{a}] must be >= 1, got {bases[a]!r}")
        if ntks[a] <= 0 or bases[a] * ntks[a] < 1.0 or not math.isfinite(bases[a] * ntks[a]):
            raise ValueError(f"ntk_factor must be > 0 with base * ntk_factor finite and >= 1, got "
                             f"{ntks[a]!r} (base {bases[a]!r})")
        if linears[a] <= 0 or 1.0 / linears[a] > MAX_FREQUENCY:
            raise ValueError(f"linear_factor must be >= 1/{MAX_FREQUENCY:g}, got {linears[a]!r}")
        if not math.isfinite(bases[a] * ntks[a] * linears[a]):
            # the frequency set's ratio: it must be a double (1e307 with base 1e4 is not)
            name = "linear_factor" if n_axes == 1 or len(set(linears)) == 1 else f"linear_factor[{a}]"
            raise ValueError(f"{name} must keep base * ntk_factor * linear_factor finite, got "
                             f"{linears[a]!r} (base {bases[a]!r}, ntk_factor {ntks[a]!r})")
        if offsets[a] not in _OFFSETS:
            raise ValueError(f"offset must be 0 or 0.5 (per axis), got {offsets[a]!r}")
    return [_axis_plan(d, bases[a], ntks[a], linears[a], offsets[a]) for a, d in enumerate(dims)]


#: the same checks for plain arguments (ints, floats, a tuple or list of ints: hashable,
#: and no bool among them, which hashes as an int but is refused), remembered: a call
#: repeated with one configuration skips ~10 us of argument checks
_cached_axes_dim = functools.lru_cache(maxsize=64)(_check_axes_dim)
_cached_plans = functools.lru_cache(maxsize=64)(_plans)


# ------------------------------------------------------------------------- the caches

#: a whole-number axis whose span is at most this many times its length (plus this
#: constant) is indexed by subtraction, without sorting
_SPAN = 4
_SPAN_EXTRA = 1024


def _whole_span(lo: float, hi: float, n: int) -> bool:
    """Whether an axis of ``n`` values in ``[lo, hi]`` is indexed by subtraction (if whole)."""
    return lo == math.floor(lo) and hi - lo <= _SPAN * n + _SPAN_EXTRA


def _distinct(x: np.ndarray, lo: float, hi: float, row: int, index: np.ndarray) -> np.ndarray:
    """The distinct values of ``x`` (``lo`` and ``hi`` its least and greatest), with
    ``index`` (``int64``, one per value of ``x``) set to ``row`` plus each value's place among
    them: for whole numbers in a narrow span (grids) the whole span, by subtraction; else the
    sorted distinct values.  ``-0.0`` and ``0.0`` are one value, ``0.0`` (one zero, whatever
    path a row takes)."""
    if lo == hi:  # one value (a single frame, the text tokens' zeros)
        index.fill(row)
        return np.array([lo + 0.0])
    if _whole_span(lo, hi, x.size):
        np.subtract(x, lo - row, out=index, casting="unsafe")  # exact for whole numbers
        if (index + (lo - row) == x).all():
            return np.arange(int(hi - lo) + 1, dtype=np.float64) + lo  # 0 + -0.0 is 0.0
    values, inverse = np.unique(x, return_inverse=True)  # -0.0 == 0.0: one of them kept
    np.add(inverse.reshape(-1), row, out=index, casting="unsafe")
    return values + 0.0  # -0.0 + 0.0 is 0.0


def axial_cos_sin(
    coords,
    axes_dim,
    *,
    base=DEFAULT_BASE,
    layout: str = "gptj",
    linear_factor=1.0,
    ntk_factor=1.0,
    offset=0.0,
    dtype=None,
    out: tuple[np.ndarray, np.ndarray] | None = None,
    backend: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Axial RoPE caches ``(cos, sin)``, each ``(n, sum(axes_dim))``.

    Parameters
    ----------
    coords:
        ``(n, A)`` real coordinates (any real dtype or array-like; taken exactly as float64),
        finite, ``|x| < 2**32``.  See the grid builders in this module.
    axes_dim:
        ``A`` even block widths, e.g. FLUX's ``(16, 56, 56)``; a width may be 0.
    base:
        ``theta`` (``>= 1``), one for all axes or one per axis.
    layout:
        ``"gptj"``, ``"neox"`` or ``"neox_head"`` (see :data:`AXIAL_LAYOUTS`).
    linear_factor, ntk_factor:
        diffusers' ``get_1d_rotary_pos_embed`` factors, scalars or per axis: the frequencies
        are ``(1 / linear_factor) * (base * ntk_factor) ** (-2k / dim)``; ``linear_factor``
        at least ``1/1024``, and ``base * ntk_factor * linear_factor`` a finite double.
    offset:
        0, or 1/2 per axis: ``(-2 (k + 1/2) / dim)`` exponents (Pixtral's width axis).
    dtype:
        ``"float32"`` (default; ``None`` means float32 or ``out``'s dtype), ``"float64"``,
        ``"float16"`` or ``"bfloat16"``.
    out:
        ``(cos, sin)`` arrays to fill and return: distinct, C-contiguous, writable, of one of
        those dtypes and the result's shape, sharing no memory with ``coords``.  Without
        ``out``, ``cos`` and ``sin`` are the two halves of one new ``(2, n, D)`` array (each
        C-contiguous, the first on a 64-byte line; the memory is freed when both are).
    backend:
        as everywhere in fastpe.

    Every value is the cosine or sine of the exact product of the coordinate and the exact
    frequency, rounded once (float32 within 1 ULP of the correctly rounded value).
    Raises :class:`TypeError` / :class:`ValueError` naming the argument before anything is
    written.
    """
    plain = type(axes_dim) in (tuple, list) and all(type(d) is int for d in axes_dim)
    dims = _cached_axes_dim(tuple(axes_dim)) if plain else _check_axes_dim(axes_dim)
    x, lo, hi = _check_coords(coords, len(dims))
    layout = check_choice("layout", layout, AXIAL_LAYOUTS)
    if all(type(v) in (int, float) for v in (base, linear_factor, ntk_factor, offset)):
        plans = _cached_plans(dims, base, linear_factor, ntk_factor, offset)
    else:
        plans = _plans(dims, base, linear_factor, ntk_factor, offset)
    width = sum(dims)
    shape = (x.shape[0], width)
    if out is None:
        out_cos, out_sin = _new_pair(shape, output_array(None, (0,), dtype).dtype)
    else:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"out must be a pair (cos, sin) of arrays, got {type(out).__name__}")
        out_cos = output_array(out[0], shape, dtype, [("coords", coords)], name="out[0]")
        out_sin = output_array(out[1], shape, dtype, [("coords", coords)], name="out[1]")
        if out_cos.dtype != out_sin.dtype:
            raise ValueError(f"out[0] and out[1] must have one dtype, got {out_cos.dtype} and {out_sin.dtype}")
        check_no_overlap(out_cos, out_sin, "out[0]", "out[1]")
    _, module = _backends.resolve(backend)
    if x.shape[0] == 0:
        return out_cos, out_sin
    _fill(module, x, lo, hi, dims, plans, layout, out_cos, out_sin)
    return out_cos, out_sin


#: gptj's repeated values by item size: the value's bits, the pair's, and the factor that
#: writes the value into both halves of the pair (little- or big-endian alike)
_PAIR_BITS = {2: (np.uint16, np.uint32, np.uint32(0x10001)), 4: (np.uint32, np.uint64, np.uint64(0x100000001))}


#: the new caches start on a cache line (64 bytes): the C kernel's 32-byte stores then
#: split no line where a row's does not (FLUX 64x64's copy: ~110 -> ~93 us, against
#: malloc's 16-byte alignment)
_ALIGN = 64


def _new_pair(shape: tuple[int, int], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """``(cos, sin)``: the two halves of one new ``(2, n, D)`` array starting on a 64-byte
    line.  One allocation for both: two fresh arrays of a few MB each were handed back to
    the system and faulted in again page by page on every call (glibc trims the heap once
    their total passes its threshold); one buffer of twice the size stays in the heap, like
    any single array of that size."""
    nbytes = 2 * shape[0] * shape[1] * dtype.itemsize
    raw = np.empty(nbytes + _ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % _ALIGN
    pair = raw[start:start + nbytes].view(dtype).reshape((2,) + shape)
    return pair[0], pair[1]


def _fill(module, x, lo, hi, dims, plans, layout, out_cos, out_sin) -> None:
    """Each axis's cos/sin values at its distinct coordinates (one table row per value, laid
    out as the axis's columns), then every token's rows copied from its axes' rows by the
    backend's ``axial_gather`` (on bit patterns: the values' bits unchanged)."""
    n, width = out_cos.shape
    axes = [a for a, d in enumerate(dims) if d]
    gptj = layout == "gptj"
    index = np.empty((len(axes), n), dtype=np.int64)
    found = []     # (values, first table row, whether its rows are its own) per axis
    row = 0
    for j, a in enumerate(axes):
        values = _distinct(x[:, a], lo[a], hi[a], row, index[j])
        # an axis with an earlier one's frequencies and values (FLUX's and Wan's row and
        # column axes of a square grid) reads that one's table rows
        same = next((first for b, (v, first, _) in zip(axes, found)
                     if plans[b] is plans[a] and v.size == values.size and (v == values).all()), None)
        if same is None:
            found.append((values, row, True))
            row += values.size
        else:
            index[j] -= row - same
            found.append((values, same, False))
    k = max(dims[a] if gptj else dims[a] // 2 for a in axes)
    table = np.empty((row, 2, k), dtype=out_cos.dtype)
    pieces = []    # (axis, src, col, width): what axial_gather copies
    start = 0      # the block's first column (gptj, neox)
    start_h = 0    # the axis's first column in each half (neox_head)
    for j, (a, (values, row, own)) in enumerate(zip(axes, found)):
        (freqs, cols), d, h, m = plans[a], dims[a], dims[a] // 2, values.size
        if own:
            _axis_rows(module, freqs, cols, values, table[row:row + m], d, gptj)
        if gptj:
            pieces.append((j, 0, start, d))
        elif layout == "neox":
            pieces += [(j, 0, start, h), (j, 0, start + h, h)]
        else:
            pieces += [(j, 0, start_h, h), (j, 0, width // 2 + start_h, h)]
        start += d
        start_h += h
    bits = np.dtype(f"u{out_cos.itemsize}")
    module.axial_gather(table=table.view(bits), index=index, pieces=np.array(pieces, dtype=np.int64),
                        out_cos=out_cos.view(bits), out_sin=out_sin.view(bits))


def _axis_rows(module, freqs, cols, values, rows, d: int, gptj: bool) -> None:
    """An axis's table rows: ``rows[i, 0]`` the cosines, ``rows[i, 1]`` the sines of
    ``values[i]`` at its ``d / 2`` frequencies, each twice (gptj, ``d`` values) or once."""
    m, h = values.size, d // 2
    if m == 1 and values[0] == 0.0:  # the coordinate 0 (a single frame, text tokens): cos(0)
        # = 1 and sin(0) = +0.0 exactly, the kernels' bits too (tested)
        rows[:, 0, :d if gptj else h] = 1
        rows[:, 1, :d if gptj else h] = 0
        return
    sc = np.empty((m, 2 * freqs.count), dtype=rows.dtype)
    fill_real(module, freqs, "halves_cos", values, sc)   # [cos | sin] of every frequency
    pairs = sc.reshape(m, 2, freqs.count)[:, :, cols]      # (value, cos/sin, frequency)
    if not gptj:  # [f0 f1 ...], the half block placed twice
        rows[:, :, :h] = pairs
    elif rows.itemsize in _PAIR_BITS:  # [f0 f0 f1 f1 ...]: each value's bits twice, as one
        # integer of twice the width (v * (2**bits + 1)): one pass, no broadcast
        narrow, wide, factor = _PAIR_BITS[rows.itemsize]
        np.multiply(pairs.view(narrow), factor, out=rows.view(wide)[:, :, :h], dtype=wide)
    else:
        rows[:, :, :d].reshape(m, 2, h, 2)[...] = pairs[..., None]


# ------------------------------------------------------------------------- grids

def _sizes(name: str, sizes) -> tuple[int, ...]:
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__len__"):
        raise TypeError(f"{name} must be a sequence of integers, got {type(sizes).__name__}")
    out = tuple(check_int(f"{name}[{a}]", s, low=0) for a, s in enumerate(sizes))
    if not out:
        raise ValueError(f"{name} must name at least one axis")
    if math.prod(out) > 1 << 31:
        raise ValueError(f"{name} gives more than 2**31 tokens: {out}")
    return out


def _mesh(axes: list[np.ndarray]) -> np.ndarray:
    """Row-major (``ij``) meshgrid of 1-D float64 axes as ``(n, A)``."""
    grids = np.meshgrid(*axes, indexing="ij")
    return np.ascontiguousarray(np.stack([g.reshape(-1) for g in grids], axis=1), dtype=np.float64)


def _as_double(q: Fraction) -> float:
    return float(q)  # Fraction -> float rounds correctly (to nearest)


def _fraction(name: str, value) -> Fraction:
    return Fraction(check_finite_real(name, value))


def index_grid(sizes, *, start=0, centered=False) -> np.ndarray:
    """Integer meshgrid coordinates, row-major over ``sizes`` (slowest axis first).

    Axis ``a`` runs ``start[a], start[a] + 1, ...`` (``start`` an int or one per axis).  With
    ``centered`` (a bool or one per axis; Qwen-Image's ``scale_rope``) an axis of size ``s``
    runs ``-(s - s // 2) .. s // 2 - 1`` instead.  FLUX's image ids are
    ``index_grid((1, h, w))``; Wan's and HunyuanVideo's ``index_grid((f, h, w))``; Pixtral's
    ``index_grid((h, w))``."""
    sizes = _sizes("sizes", sizes)
    n = len(sizes)
    starts, cents = _spread(start, n), _spread(centered, n)
    if len(starts) != n or len(cents) != n:
        raise ValueError(f"start and centered must be scalars or one per axis ({n})")
    axes = []
    for a, (s, s0, c) in enumerate(zip(sizes, starts, cents)):
        s0 = check_int(f"start[{a}]" if n > 1 else "start", s0)
        if not isinstance(c, (bool, np.bool_)):
            raise TypeError(f"centered must be a bool or one per axis, got {type(c).__name__}")
        first = -(s - s // 2) if c else s0
        if abs(first) >= POSITION_LIMIT or abs(first + s) >= POSITION_LIMIT:
            raise ValueError(f"start[{a}] puts coordinates beyond 2**32")
        axes.append(np.arange(s, dtype=np.float64) + float(first))
    return _mesh(axes)


def _spread(value, n: int) -> tuple:
    """A grid builder's per-axis argument: a scalar for every axis, or its items as given."""
    return (value,) * n if not hasattr(value, "__len__") else tuple(value)


def _linspace(name: str, start: Fraction, stop: Fraction, num: int, endpoint: bool = True) -> np.ndarray:
    """``num`` points from ``start`` to ``stop`` (exclusive without ``endpoint``), each the
    double nearest the exact rational value."""
    div = (num - 1 if endpoint else num) or 1
    step = (stop - start) / div
    return np.array([_as_double(start + i * step) for i in range(num)], dtype=np.float64)


def linspace_grid(sizes, start, stop, *, endpoint=True) -> np.ndarray:
    """Meshgrid of per-axis ``linspace(start[a], stop[a], sizes[a])`` (NumPy's definition,
    ``endpoint`` as there), each coordinate the double nearest its exact value."""
    sizes = _sizes("sizes", sizes)
    n = len(sizes)
    starts, stops = _spread(start, n), _spread(stop, n)
    if len(starts) != n or len(stops) != n:
        raise ValueError(f"start and stop must be scalars or one per axis ({n})")
    return _mesh([_linspace("start", _fraction(f"start[{a}]", s0), _fraction(f"stop[{a}]", s1), s, endpoint)
                  for a, (s, s0, s1) in enumerate(zip(sizes, starts, stops))])


def crop_grid(crops_coords, grid_size, temporal_size: int | None = None, *, grid_type: str = "linspace",
              max_size=None) -> np.ndarray:
    """diffusers' crop coordinates (``get_2d_rotary_pos_embed``, CogVideoX's
    ``get_3d_rotary_pos_embed``): ``(h, w)`` per token, or ``(t, h, w)`` with
    ``temporal_size``, row-major in that order.

    ``grid_type="linspace"``: ``crops_coords = ((top, left), (bottom, right))``, row ``i`` of
    ``gh`` at ``top + i * (bottom (gh - 1) / gh - top) / (gh - 1)`` (diffusers' float32
    ``linspace(top, bottom * (gh - 1) / gh, gh)``, here exact), likewise columns; frames at
    ``0, 1, ...``.  ``grid_type="slice"``: integer ``(t, h, w)`` of the top-left ``grid_size``
    (``max_size`` is only checked to hold it, as diffusers slices its ``max_size`` table).
    Note: ``get_2d_rotary_pos_embed`` puts the width block first: pass ``coords[:, ::-1]``."""
    grid_type = check_choice("grid_type", grid_type, ("linspace", "slice"))
    gh, gw = _sizes("grid_size", grid_size)
    t = None if temporal_size is None else check_int("temporal_size", temporal_size, low=0)
    if grid_type == "slice":
        if max_size is None:
            raise ValueError("max_size is needed with grid_type='slice'")
        mh, mw = _sizes("max_size", max_size)
        if gh > mh or gw > mw:
            raise ValueError(f"grid_size {(gh, gw)} exceeds max_size {(mh, mw)}")
        axes = [np.arange(gh, dtype=np.float64), np.arange(gw, dtype=np.float64)]
    else:
        try:
            (top, left), (bottom, right) = crops_coords
        except (TypeError, ValueError):
            raise ValueError("crops_coords must be ((top, left), (bottom, right))") from None
        top, left = _fraction("crops_coords[0][0]", top), _fraction("crops_coords[0][1]", left)
        bottom, right = _fraction("crops_coords[1][0]", bottom), _fraction("crops_coords[1][1]", right)
        axes = [_linspace("h", top, bottom * (gh - 1) / gh if gh else bottom, gh),
                _linspace("w", left, right * (gw - 1) / gw if gw else right, gw)]
    if t is not None:
        axes.insert(0, np.arange(t, dtype=np.float64))
    return _mesh(axes)


def timm_grid(feat_shape, *, grid_type: str = "index", ref_feat_shape=None, grid_offset=0.0,
              normalize_coords: str = "separate", grid_indexing: str = "ij") -> np.ndarray:
    """timm's ``_build_grid`` coordinates (EVA, ViT rope), exact: ``"index"`` ``i +
    grid_offset``; ``"pixel"`` ``linspace(-1, 1, s)``; ``"centered"`` ``2 (i + 1/2 +
    grid_offset) / denom - 1`` (``normalize_coords`` ``"separate"``, ``"min"`` or ``"max"``
    chooses ``denom``); ``ref_feat_shape`` rescales ``x -> x / s * ref`` (EVA's fine-tune
    resize; applied before the centred mapping, as timm does).  ``grid_indexing="xy"`` swaps the first two
    axes as timm does.  Tokens row-major over ``feat_shape``; the coordinate columns in
    ``feat_shape`` order (``"xy"``: first two swapped)."""
    grid_type = check_choice("grid_type", grid_type, ("index", "pixel", "centered"))
    normalize_coords = check_choice("normalize_coords", normalize_coords, ("separate", "min", "max"))
    grid_indexing = check_choice("grid_indexing", grid_indexing, ("ij", "xy"))
    shape = list(_sizes("feat_shape", feat_shape))
    ref = None if ref_feat_shape is None else list(_sizes("ref_feat_shape", ref_feat_shape))
    if ref is not None and len(ref) != len(shape):
        raise ValueError(f"ref_feat_shape must have {len(shape)} axes, got {len(ref)}")
    if ref is not None and 0 in shape:
        raise ValueError("feat_shape must be positive with ref_feat_shape")
    off = _fraction("grid_offset", grid_offset)
    if grid_indexing == "xy" and len(shape) >= 2:
        shape[0], shape[1] = shape[1], shape[0]
        if ref is not None:
            ref[0], ref[1] = ref[1], ref[0]
    axes_q: list[list[Fraction]] = []
    for a, s in enumerate(shape):
        if grid_type == "pixel":
            vals = [Fraction(-1) + Fraction(2 * i, s - 1) if s > 1 else Fraction(-1) for i in range(s)]
        elif grid_type == "centered":
            denom = {"separate": s, "min": min(shape), "max": max(shape)}[normalize_coords]
            vals = [(i + Fraction(1, 2) + off) / denom for i in range(s)]
        else:
            vals = [i + off for i in range(s)]
        if ref is not None:
            vals = [v / s * ref[a] for v in vals]
        if grid_type == "centered":
            vals = [2 * v - 1 for v in vals]
        axes_q.append(vals)
    axes = [np.array([_as_double(v) for v in vals], dtype=np.float64) for vals in axes_q]
    grids = np.meshgrid(*axes, indexing=grid_indexing)
    return np.ascontiguousarray(np.stack([g.reshape(-1) for g in grids], axis=1), dtype=np.float64)


def merge_window_grid(grid_thw, spatial_merge_size: int, *, temporal: bool = False) -> np.ndarray:
    """Qwen2-VL vision tower's ``(h, w)`` ids (``rot_pos_emb`` / ``get_vision_position_ids``):
    per image or video ``(t, h, w)`` of ``grid_thw`` (one triple or ``(N, 3)``), the
    ``h x w`` integer grid permuted window by window of ``spatial_merge_size`` squared
    (row-major over windows, row-major within each), repeated ``t`` times; images
    concatenated.  ``temporal`` prepends the frame index (``(t, h, w)`` ids)."""
    m = check_int("spatial_merge_size", spatial_merge_size, low=1)
    arr = np.asarray(grid_thw)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"grid_thw must hold integers, got dtype {arr.dtype}")
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise ValueError(f"grid_thw must be (t, h, w) or (N, 3), got shape {arr.shape}")
    parts = []
    for t, h, w in arr.tolist():
        if t < 0 or h < 0 or w < 0 or h % m or w % m:
            raise ValueError(f"grid_thw rows must be non-negative with h and w multiples of "
                             f"spatial_merge_size {m}, got {(t, h, w)}")
        hh, ww = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        blocks = (h // m, m, w // m, m)
        hh = hh.reshape(blocks).transpose(0, 2, 1, 3).reshape(-1)
        ww = ww.reshape(blocks).transpose(0, 2, 1, 3).reshape(-1)
        ids = np.stack([hh, ww], axis=1).astype(np.float64)
        ids = np.tile(ids, (t, 1))
        if temporal:
            ids = np.concatenate([np.repeat(np.arange(t, dtype=np.float64), h * w)[:, None], ids], axis=1)
        parts.append(ids)
    if not parts:
        return np.empty((0, 3 if temporal else 2), dtype=np.float64)
    return np.ascontiguousarray(np.concatenate(parts, axis=0))


def prepend_cls(coords, count: int = 1) -> np.ndarray:
    """``coords`` with ``count`` rows of zeros first: a class (or register) token whose
    rotation is zero -- its cache rows are exactly ``cos = 1``, ``sin = 0``."""
    count = check_int("count", count, low=0)
    arr = np.asarray(coords, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"coords must be 2-D (n, axes), got an array of shape {arr.shape}")
    return np.ascontiguousarray(np.concatenate([np.zeros((count, arr.shape[1])), arr], axis=0))
