"""The sinusoidal encodings: the spec's ``PosEncConfig``, ``forward`` and ``table``, and the
sinusoids beyond the table (add-in-place, continuous timesteps, fairseq's position rule).

Each function validates once, picks a backend and calls the registry operations; every value
is exact in the sense of :func:`forward` (float32 within 1 ULP of the correctly rounded
value, in practice correctly rounded; float16/bfloat16 correctly rounded; float64 within
``2**-45``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from . import _backends, _dtypes
from ._plans.frequencies import DEFAULT_BASE, MAX_FREQUENCY, Geometric
from ._plans.layouts import TABLE_LAYOUTS, column_owner
from ._validate import (
    MAX_D_MODEL,
    POSITION_LIMIT,
    check_base,
    check_choice,
    check_d_model,
    check_finite_real,
    check_int,
    check_max_len,
    check_no_overlap,
    check_offset,
    check_position_grid,
    check_positive,
    check_real_positions,
    check_signed_positions,
    check_table_out,
)

__all__ = [
    "PosEncConfig",
    "DEFAULT_MAX_LEN",
    "DEFAULT_BASE",
    "MAX_D_MODEL",
    "TABLE_LAYOUTS",
    "DENOMINATORS",
    "forward",
    "table",
    "table_rows",
    "add_",
    "timestep",
    "fairseq_positions",
    "fairseq_embedding",
    "transformer_xl_embedding",
    "conformer_embedding",
    "CONFORMER_CONVENTIONS",
]

#: the spec's default table length
DEFAULT_MAX_LEN = 2048


#: ``"d"``: ``w_i = base**(-2i/d)`` (the spec); ``"half-1"``: ``w_k = base**(-k/(d//2 - 1))``
DENOMINATORS = ("d", "half-1")


@dataclass(frozen=True)
class PosEncConfig:
    """Sinusoidal positional-encoding configuration.

    The spec (the defaults): column ``j = 2i`` holds ``sin(p * w_i)`` and ``j = 2i + 1``
    holds ``cos(p * w_i)`` with ``w_i = base ** (-2i / d_model)``.

    Parameters
    ----------
    d_model:
        Number of columns, ``1 <= d_model <= 65536``; odd is legal (last column is a sine).
    max_len:
        Table length (the spec's invariant ``max_len > 0``), at most ``2**32``.
    base:
        Frequency base, a finite number greater than 1.
    layout:
        ``"interleaved"`` (the spec; HF DistilBERT/XLM): ``sin, cos, sin, cos, ...``;
        ``"halves"`` (HF Marian/RoFormer, fairseq): ``[sin | cos]``, the sine block
        ``ceil(n/2)`` wide.
    denominator:
        ``"d"`` (the spec): ``w_i = base ** (-2i / d_model)``, ``ceil(d_model/2)`` frequencies;
        ``"half-1"`` (fairseq, M2M100, tensor2tensor): ``h = d_model // 2`` frequencies
        ``w_k = base ** (-k / (h - 1))`` (``h - 1`` taken as 1 when ``h = 1``, as
        tensor2tensor does); an odd ``d_model`` then ends with a zero column.
    min_timescale, max_timescale:
        tensor2tensor's timescales: frequencies run from ``1 / min_timescale`` down to
        ``1 / max_timescale`` (``max_timescale=None`` means ``base``), so
        ``w = (1/min_ts) * (max_ts/min_ts) ** (-exponent)`` with either denominator.
        ``min_timescale`` at least ``1/1024``, ``max_timescale > min_timescale``.

    Invalid values raise :class:`TypeError` or :class:`ValueError` naming the field.
    """

    d_model: int
    max_len: int = DEFAULT_MAX_LEN
    base: float = DEFAULT_BASE
    layout: str = "interleaved"
    denominator: str = "d"
    min_timescale: float = 1.0
    max_timescale: float | None = None

    def __post_init__(self) -> None:
        # normalise numpy scalars to plain Python numbers so configs hash and compare simply
        set_ = object.__setattr__
        set_(self, "d_model", check_d_model(self.d_model))
        set_(self, "max_len", check_max_len(self.max_len))
        set_(self, "base", check_base(self.base))
        set_(self, "layout", check_choice("layout", self.layout, TABLE_LAYOUTS))
        set_(self, "denominator", check_choice("denominator", self.denominator, DENOMINATORS))
        if self.denominator == "half-1" and self.d_model < 2:
            raise ValueError("d_model must be >= 2 with denominator='half-1', got 1")
        lo = check_positive("min_timescale", self.min_timescale)
        if 1.0 / lo > MAX_FREQUENCY:
            raise ValueError(f"min_timescale must be >= 1/{MAX_FREQUENCY:g}, got {lo!r}")
        set_(self, "min_timescale", lo)
        if self.max_timescale is not None:
            hi = check_positive("max_timescale", self.max_timescale)
            if self.base not in (DEFAULT_BASE, hi):
                raise ValueError(
                    f"give base or max_timescale, not both (base={self.base!r}, "
                    f"max_timescale={hi!r})"
                )
            set_(self, "max_timescale", hi)
        if self.top_timescale <= lo:
            raise ValueError(
                f"max_timescale (or base) must be greater than min_timescale, got "
                f"{self.top_timescale!r} <= {lo!r}"
            )

    @property
    def top_timescale(self) -> float:
        """``max_timescale``, or ``base`` when it is not given."""
        return self.base if self.max_timescale is None else self.max_timescale

    @property
    def n_freq(self) -> int:
        """Number of distinct frequencies: ``ceil(d_model / 2)``, or ``d_model // 2`` under
        the ``half-1`` denominator."""
        return self.frequencies.count

    @property
    def frequencies(self) -> Geometric:
        """The frequency set (see :mod:`fastpe._plans.frequencies`)."""
        if self.denominator == "d":
            count, n = (self.d_model + 1) // 2, self.d_model / 2
        else:
            count = self.d_model // 2
            n = float(max(count - 1, 1))
        return Geometric(count, n, self.top_timescale, self.min_timescale)

    @property
    def is_spec(self) -> bool:
        """The spec's own convention (the kernels of ``forward`` and ``table`` since 0.1)."""
        return (
            self.layout == "interleaved"
            and self.denominator == "d"
            and self.min_timescale == 1.0
            and self.top_timescale == self.base
        )

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


def output_array(out, shape: tuple[int, ...], dtype, inputs=(), *, dtypes=None, default=np.float32,
                 resolve=_dtypes.resolve, name: str = "out") -> np.ndarray:
    """The array a function writes: ``out`` checked (shape, one of ``dtypes`` -- default the
    table dtypes --, C-contiguous, writable, not sharing memory with any of ``inputs``,
    ``(name, array)`` pairs), else a new array of ``dtype``.  ``dtype`` is validated either
    way (by ``resolve``); ``None`` means ``out``'s dtype, or ``default`` without ``out``, and a
    ``dtype`` given beside an ``out`` of another dtype is refused.  Nothing is written."""
    dt = None if dtype is None else resolve(dtype)
    if out is None:
        return np.empty(shape, dtype=np.dtype(default) if dt is None else dt)
    check_table_out(out, shape, out_dtypes() if dtypes is None else tuple(np.dtype(d) for d in dtypes), name)
    if dt is not None and out.dtype != dt:
        raise ValueError(f"dtype is {dt.name} but {name} has dtype {out.dtype.name}: give one of them")
    for other_name, arr in inputs:
        check_no_overlap(out, arr, name, other_name)
    return out


#: a tie is decided by the fast float64 value when it is this far (or farther) from the tie
#: point: beyond the float64 kernels' error bound (2**-45), so the side is certain
_DECIDE = 2.0**-44


def narrow_into(out: np.ndarray, fill32, exact, fill64, module=None) -> None:
    """Fill ``out`` (float16 or bfloat16, ``(n, d)``) a block of rows at a time:
    ``fill32(r0, r1, scratch)`` writes float32 rows ``[r0, r1)``, then each is narrowed (see
    :func:`fastpe._dtypes.narrow`) straight into ``out``.  A float32 that is a tie in the
    target format is decided by which side of it the true value lies: by ``fill64(rows)``
    (float64 values of those rows, within 2**-45) when that is far enough from the tie to
    be sure, else by ``exact(r, j, fmt)``, the correctly rounded value from the reference.
    ``module`` (a backend) narrows in parallel.  The float32 scratch is this thread's
    (:func:`fastpe._dtypes.take_scratch`): reused, it does not page-fault call after call."""
    n, d = out.shape
    fmt = _dtypes.format_of(out.dtype)
    block = max(1, _NARROW_VALUES // max(d, 1))
    buf = _dtypes.take_scratch(min(block, n) * d, np.float32)
    try:
        for r0 in range(0, n, block):
            r1 = min(n, r0 + block)
            part = buf[:(r1 - r0) * d].reshape(r1 - r0, d)
            fill32(r0, r1, part)

            def ties(idx, r0=r0, part=part):
                rows, cols = np.divmod(idx, d)
                # idx ascending: the rows sorted, each new one where it differs from the last
                new = np.empty(rows.size, dtype=np.bool_)
                new[:1] = True
                np.not_equal(rows[1:], rows[:-1], out=new[1:])
                inverse = np.cumsum(new) - 1
                approx = fill64(r0 + rows[new])[inverse, cols]
                return _dtypes.decide_ties(part.reshape(-1)[idx], out.dtype, approx, _DECIDE,
                                           lambda t: exact(r0 + int(rows[t]), int(cols[t]), fmt))

            _dtypes.narrow(part, out.dtype, ties, module, out=out[r0:r1])
    finally:
        _dtypes.give_scratch(buf)


def fill_rows(module, freqs, layout: str, positions, start: int, out: np.ndarray,
              spec: tuple[int, float] | None = None) -> None:
    """Rows of ``freqs`` in ``layout`` and ``out``'s dtype for ``positions`` (uint32, or int64
    with ``|p| < 2**32``) or, when ``None``, ``start, start + 1, ...``.  ``spec=(d_model, base)`` routes float32 to the
    spec's own kernels."""
    n = out.shape[0]
    if n == 0:
        return
    if out.dtype == np.float32 and spec is not None:
        if positions is None:
            module.sinusoid_range(start=start, d_model=spec[0], base=spec[1], out=out)
        else:
            module.sinusoid_forward(positions=positions, d_model=spec[0], base=spec[1], out=out)
    elif out.dtype in (np.float32, np.float64):
        if positions is None:
            positions = np.arange(start, start + n, dtype=np.uint32)
        module.sincos_rows(positions=positions, freqs=freqs, layout=layout, out=out)
    else:
        from ._exact import sincos as _reference_sincos

        def fill32(r0, r1, part):
            pos = None if positions is None else positions[r0:r1]
            fill_rows(module, freqs, layout, pos, start + r0, part, spec)

        def fill64(rows):
            pos = (start + rows).astype(np.uint32) if positions is None else positions[rows]
            values = np.empty((rows.size, out.shape[1]), dtype=np.float64)
            module.sincos_rows(positions=pos, freqs=freqs, layout=layout, out=values)
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
        module.sincos_rows(positions=x.astype(np.uint32), freqs=freqs, layout=layout, out=out)
    elif not whole.any():
        module.sincos_real(x=x, freqs=freqs, layout=layout, out=out)
    else:
        rows = np.flatnonzero(whole)
        part = np.empty((rows.size, out.shape[1]), dtype=out.dtype)
        module.sincos_rows(positions=np.ascontiguousarray(x[rows], dtype=np.uint32), freqs=freqs,
                           layout=layout, out=part)
        out[rows] = part
        rows = np.flatnonzero(~whole)
        part = np.empty((rows.size, out.shape[1]), dtype=out.dtype)
        module.sincos_real(x=np.ascontiguousarray(x[rows]), freqs=freqs, layout=layout, out=part)
        out[rows] = part


def fill_real(module, freqs, layout: str, x: np.ndarray, out: np.ndarray) -> None:
    """Rows at the real positions ``x`` (float64), in ``out``'s dtype."""
    if out.shape[0] == 0:
        return
    if out.dtype in (np.float32, np.float64):
        _real_rows(module, freqs, layout, x, out)
        return
    from ._exact import sincos as _reference_sincos

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


def fill_config(module, config: PosEncConfig, positions, start: int, out: np.ndarray) -> None:
    """Rows of ``config`` for ``positions`` (uint32 or int64) or, when ``None``, ``start, start + 1,
    ...``, into ``out`` (any table dtype) on the backend ``module``; unchecked: the callers
    (the public functions, :func:`fastpe.save_table`'s chunks) have validated everything."""
    spec = (config.d_model, config.base) if config.is_spec else None
    fill_rows(module, config.frequencies, config.layout, positions, start, out, spec)


def _kernel_positions(pos: np.ndarray) -> np.ndarray:
    """Validated int64 positions as the kernels take them: ``uint32`` when none is negative
    (the unsigned kernels), else the int64 array itself (the signed ones)."""
    if pos.size == 0 or int(pos.min()) >= 0:
        return pos.astype(np.uint32)
    return pos


#: rows of a table with ``step != 1`` (or a negative start) filled per positions array
_TABLE_BLOCK = 1 << 16


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
        1-D array-like of integers in ``(-2**32, 2**32)``: any integer dtype, a list, or
        floats holding whole numbers.  Never modified.  May be empty.  A negative position
        ``-p`` gives the row of ``p`` with every sine negated (sine is odd, cosine even, and
        rounding is symmetric), bit for bit, in every layout and dtype.
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
    pos = _kernel_positions(check_signed_positions(positions))
    check_table_out(out, (pos.shape[0], config.d_model), out_dtypes())
    check_no_overlap(out, positions)
    _, module = _backends.resolve(backend)
    fill_config(module, config, pos, 0, out)
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
    start: int = 0,
    step: int = 1,
    dtype=None,
    out: np.ndarray | None = None,
    backend: str | None = None,
) -> np.ndarray:
    """The ``(max_len, d_model)`` sinusoidal table for positions ``0 .. max_len-1``, or
    ``start, start + step, ..., start + (max_len - 1) * step`` (each in ``(-2**32, 2**32)``;
    ``step`` a non-zero integer).

    Bit-identical to ``forward(np.arange(max_len), PosEncConfig(d_model, max_len, base,
    layout, denominator, min_timescale, max_timescale), out)`` on the same backend, without
    building the positions array.  ``dtype``: ``"float32"`` (default), ``"float64"``,
    ``"float16"`` or ``"bfloat16"`` (needs ml_dtypes); ``None`` means float32, or ``out``'s
    dtype.  ``out``, if given, is filled and returned (same requirements as in
    :func:`forward`; a ``dtype`` beside it must be ``out``'s).

    Example: fairseq's table is ``table(d, n, layout="halves", denominator="half-1")``;
    tensor2tensor's adds ``min_timescale`` / ``max_timescale``.  Relative sinusoids run
    backwards and through zero: Transformer-XL's ``klen-1 .. 0`` is
    ``table(d, klen, layout="halves", start=klen - 1, step=-1)``, a Conformer's
    ``L-1 .. -(L-1)`` is ``table(d, 2 * L - 1, start=L - 1, step=-1)``; each row is the row
    :func:`forward` gives its position, bit for bit.
    """
    config = _table_config(d_model, max_len, base, layout, denominator, min_timescale, max_timescale)
    start, step = check_run(start, step, config.max_len)
    _, module = _backends.resolve(backend)
    out = output_array(out, (config.max_len, config.d_model), dtype)
    fill_run(module, config, start, step, 0, out)
    return out


def check_run(start, step, max_len: int) -> tuple[int, int]:
    """:func:`table`'s ``start`` and ``step`` checked (the messages every caller gives):
    integers, ``step != 0``, the first and the last position in ``(-2**32, 2**32)``."""
    start = check_int("start", start)
    step = check_int("step", step)
    if step == 0:
        raise ValueError("step must be a non-zero integer, got 0")
    last = start + (max_len - 1) * step
    for name, value in (("start", start), ("the last position, start + (max_len - 1) * step", last)):
        if not -POSITION_LIMIT < value < POSITION_LIMIT:
            raise ValueError(f"{name} must be in (-2**32, 2**32), got {value}")
    return start, step


def needs_positions(start: int, step: int) -> bool:
    """Whether the run ``start, start + step, ...`` needs a positions array: anything but a
    forward run from ``start >= 0`` (which the table kernels compute from ``start``)."""
    return step != 1 or start < 0


def fill_run(module, config: PosEncConfig, start: int, step: int, row: int, out: np.ndarray) -> None:
    """Rows ``row .. row + len(out) - 1`` of the run ``start, start + step, ...`` of
    ``config``'s table into ``out``, as :func:`table` computes them (unchecked: see
    :func:`check_run`), so any cut of a table into blocks keeps its bits.  A forward run from
    ``start >= 0`` goes to the table kernels from its first position; any other run goes by
    the int64 positions of each block of ``_TABLE_BLOCK`` rows, to the signed kernels
    whatever their signs (the same bits as the unsigned ones at a non-negative position)."""
    if config.max_len == 1:  # one row: the step never applies (and may be any size)
        step = 1
    if not needs_positions(start, step):  # the table kernels
        fill_config(module, config, None, start + row, out)
        return
    n = out.shape[0]
    for r0 in range(0, n, _TABLE_BLOCK):
        r1 = min(n, r0 + _TABLE_BLOCK)
        positions = np.arange(row + r0, row + r1, dtype=np.int64)  # in place: one array per block
        positions *= step
        positions += start
        fill_config(module, config, positions, 0, out[r0:r1])


@functools.lru_cache(maxsize=256, typed=True)
def _cached_config(*fields) -> PosEncConfig:
    return PosEncConfig(*fields)


def _table_config(*fields) -> PosEncConfig:
    """``PosEncConfig(*fields)``, validated once per distinct plain-valued arguments (a table
    call's checks cost about as much as a small table): fields of any other type (numpy
    scalars, subclasses) are validated on every call, as the config itself does."""
    if all(f is None or type(f) in (int, float, str) for f in fields):
        return _cached_config(*fields)
    return PosEncConfig(*fields)


def table_rows(config: PosEncConfig, start: int, out: np.ndarray, *, backend: str | None = None) -> np.ndarray:
    """Fill ``out`` (``(n, d_model)``, any table dtype) with the rows of positions
    ``start .. start + n - 1``; bit-identical to those rows of :func:`table` (what the torch
    modules' tables are built from; streamed and chunked tables go through :func:`fill_run`)."""
    if not isinstance(config, PosEncConfig):
        raise TypeError(f"config must be a fastpe.PosEncConfig, got {type(config).__name__}")
    start = check_int("start", start, low=0)
    n = out.shape[0] if isinstance(out, np.ndarray) and out.ndim == 2 else 0
    check_table_out(out, (n, config.d_model), out_dtypes())
    if start + n > POSITION_LIMIT:
        raise ValueError(f"start + len(out) must be <= 2**32, got {start} + {n}")
    _, module = _backends.resolve(backend)
    fill_config(module, config, None, start, out)
    return out

_INT64_MAX = (1 << 63) - 1

#: the convention keywords of :func:`add_` (fields of :class:`PosEncConfig`) and their defaults
_CONVENTION_DEFAULTS = (("base", DEFAULT_BASE), ("layout", "interleaved"), ("denominator", "d"),
                        ("min_timescale", 1.0), ("max_timescale", None))

#: rows of the encoding computed at a time by :func:`add_` (bounded scratch memory)
_ADD_VALUES = 1 << 20


def _check_x(x) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"x must have dtype float32 or float64, got {x.dtype}")
    if x.ndim < 2:
        raise ValueError(f"x must have shape (..., seq, d_model), got {x.shape}")
    if not x.flags.c_contiguous:
        raise ValueError("x must be C-contiguous")
    if not x.flags.writeable:
        raise ValueError("x is read-only (the encoding is added in place)")
    if not x.dtype.isnative:
        raise ValueError("x must be in native byte order")
    return x


def add_(
    x: np.ndarray,
    *,
    offset: int = 0,
    positions=None,
    config: PosEncConfig | None = None,
    scale: float | None = None,
    base: float = DEFAULT_BASE,
    layout: str = "interleaved",
    denominator: str = "d",
    min_timescale: float = 1.0,
    max_timescale: float | None = None,
    backend: str | None = None,
) -> np.ndarray:
    """Add the sinusoidal encoding to embeddings ``x`` in place; return ``x``.

    ``x`` (float32 or float64, C-contiguous, ``(..., seq, d_model)``) becomes
    ``x * scale + pe[p]`` row by row, in ``x``'s dtype -- bit-identical to NumPy's
    ``x * scale + table[positions]`` -- without materialising the table: the rows needed are
    computed a block at a time.  ``scale`` (e.g. ``sqrt(d_model)``) is optional.

    Positions: ``offset, offset + 1, ...`` along ``seq`` (``offset`` for decoding with a
    cache), or ``positions`` of shape ``(seq,)`` (shared by every leading index) or
    ``x.shape[:-1]`` (per row).  ``config`` (its ``d_model`` must be ``x.shape[-1]``), or the
    keywords ``base``, ``layout``, ``denominator``, ``min_timescale``, ``max_timescale``,
    choose the convention.
    """
    x = _check_x(x)
    seq, d_model = x.shape[-2], x.shape[-1]
    if d_model == 0:
        raise ValueError(f"x must have at least one column (d_model >= 1), got shape {x.shape}")
    # the keywords are checked even beside a config, so that a typo is never ignored
    keywords = PosEncConfig(d_model, 1, base, layout, denominator, min_timescale, max_timescale)
    if config is None:
        config = keywords
    elif not isinstance(config, PosEncConfig):
        raise TypeError(f"config must be a fastpe.PosEncConfig, got {type(config).__name__}")
    elif config.d_model != d_model:
        raise ValueError(f"config.d_model is {config.d_model} but x has {d_model} columns")
    elif given := [k for k, default in _CONVENTION_DEFAULTS if getattr(keywords, k) != default]:
        raise ValueError(f"give config or {', '.join(given)}, not both")
    factor = None if scale is None else check_finite_real("scale", scale)
    if positions is None:
        offset = check_offset(offset, seq)
        pos = None
    else:
        if check_int("offset", offset, low=0):
            raise ValueError("give offset or positions, not both")
        pos = check_position_grid(positions, ((seq,), x.shape[:-1]))
        check_no_overlap(x, positions, "x")
    _, module = _backends.resolve(backend)
    if x.size == 0:
        return x
    spec = (config.d_model, config.base) if config.is_spec and x.dtype == np.float32 else None
    freqs = config.frequencies
    block = max(1, _ADD_VALUES // d_model)
    if pos is None or pos.ndim == 1:  # one row of encodings per sequence index
        lead = x.reshape(-1, seq, d_model)
        pe = np.empty((min(block, seq), d_model), dtype=x.dtype)
        for r0 in range(0, seq, block):
            r1 = min(seq, r0 + block)
            part = pe[:r1 - r0]
            fill_rows(module, freqs, config.layout, None if pos is None else pos[r0:r1],
                      offset + r0, part, spec)
            module.add_rows(x=lead[:, r0:r1], pe=part, scale=factor)
    else:  # per-row positions: x as (rows, d_model)
        flat_x = x.reshape(1, -1, d_model)
        flat_p = pos.reshape(-1)
        n = flat_x.shape[1]
        pe = np.empty((min(block, n), d_model), dtype=x.dtype)
        for r0 in range(0, n, block):
            r1 = min(n, r0 + block)
            part = pe[:r1 - r0]
            fill_rows(module, freqs, config.layout, flat_p[r0:r1], 0, part, spec)
            module.add_rows(x=flat_x[:, r0:r1], pe=part, scale=factor)
    return x


def timestep(
    t,
    d_model: int,
    *,
    base: float = DEFAULT_BASE,
    flip_sin_to_cos: bool = False,
    shift: float = 1.0,
    scale: float = 1.0,
    dtype=None,
    out: np.ndarray | None = None,
    backend: str | None = None,
) -> np.ndarray:
    """Sinusoidal embedding of real timesteps (diffusion models, time series): ``(N, d_model)``.

    With ``h = d_model // 2`` and ``w_k = base ** (-k / (h - shift))``, row ``r`` is
    ``[sin(scale t_r w_k) | cos(scale t_r w_k)]`` (``[cos | sin]`` with
    ``flip_sin_to_cos``), and an odd ``d_model`` ends with a zero column -- diffusers'
    ``get_timestep_embedding`` (``base`` is its ``max_period``, ``shift`` its
    ``downscale_freq_shift``: 1 is the fairseq form, 0 the halves form); ``base >= 1``.
    ``t`` (float64, or anything converting to it; a scalar is one row) is taken at its exact
    value, ``|t| < 2**32``; the angle is never rounded, so large or fractional timesteps are
    as exact as small ones.  Whole-number timesteps (the usual
    0..999) take the table kernels and give the rows of the same frequencies' table.
    ``d_model`` is 2 .. 65536.  ``dtype`` as in :func:`fastpe.table` (``None``: float32, or
    ``out``'s dtype); ``out``, if given, is filled and returned, and must not share memory
    with ``t``.
    """
    x = check_real_positions(t, "t")
    d_model = check_int("d_model", d_model, low=2, high=MAX_D_MODEL)
    half = d_model // 2
    base = check_finite_real("base", base)
    if base < 1.0:
        raise ValueError(f"base must be >= 1, got {base!r}")
    shift = check_finite_real("shift", shift)
    if half - shift <= 0:
        raise ValueError(f"d_model // 2 - shift must be > 0, got {half} - {shift!r}")
    scale = check_positive("scale", scale, high=MAX_FREQUENCY)
    if not isinstance(flip_sin_to_cos, (bool, np.bool_)):
        raise TypeError(f"flip_sin_to_cos must be a bool, got {type(flip_sin_to_cos).__name__}")
    freqs = Geometric(half, half - shift, max(base, 1.0), 1.0, scale)
    _, module = _backends.resolve(backend)
    out = output_array(out, (x.shape[0], d_model), dtype, [("t", t)])
    fill_real(module, freqs, "halves_cos" if flip_sin_to_cos else "halves", x, out)
    return out


def fairseq_positions(tokens, padding_idx: int, *, offset: int = 0, out: np.ndarray | None = None) -> np.ndarray:
    """fairseq's / M2M100's positions of a token array: ``padding_idx + 1, + 2, ...`` along
    the last axis, counting only non-pad tokens, and ``padding_idx`` at pad tokens
    (``(cumsum(tokens != pad) + offset) * mask + padding_idx``; ``offset`` is HF's
    ``past_key_values_length``).  int64, the shape of ``tokens``; ``out``, if given (int64,
    that shape, C-contiguous, writable, not sharing memory with ``tokens``), is filled and
    returned."""
    padding_idx = check_int("padding_idx", padding_idx, low=0, high=_INT64_MAX)
    offset = check_int("offset", offset, low=0, high=_INT64_MAX)
    try:
        tok = np.asarray(tokens)
    except (ValueError, TypeError) as exc:  # ragged nested lists and the like
        raise ValueError(f"tokens must be an integer array of shape (..., seq): {exc}") from None
    if tok.dtype.kind not in "iu" or tok.ndim < 1:
        raise TypeError(f"tokens must be an integer array of shape (..., seq), got {tok.dtype} {tok.shape}")
    if padding_idx + offset + tok.shape[-1] > _INT64_MAX:  # the largest position is below this
        raise ValueError(
            f"padding_idx + offset + seq must fit in int64, got {padding_idx} + {offset} + {tok.shape[-1]}"
        )
    out = output_array(out, tok.shape, None, [("tokens", tokens), ("tokens", tok)], dtypes=(np.int64,),
                       default=np.int64)
    mask = tok != padding_idx
    np.cumsum(mask, axis=-1, dtype=np.int64, out=out)
    out += offset
    out *= mask
    out += padding_idx
    return out


def fairseq_embedding(tokens, d_model: int, padding_idx: int, *, dtype=None, out: np.ndarray | None = None,
                      backend: str | None = None) -> np.ndarray:
    """fairseq's ``SinusoidalPositionalEmbedding`` of a token array: ``(..., seq, d_model)``
    rows of the ``halves`` / ``half-1`` table at :func:`fairseq_positions`, pad tokens all
    zero.  ``dtype`` and ``out`` as in :func:`table` (``out`` must not share memory with
    ``tokens``)."""
    pos = fairseq_positions(tokens, padding_idx)
    if pos.size and int(pos.max()) >= 1 << 32:
        raise ValueError("tokens: positions would reach 2**32")
    config = PosEncConfig(d_model, 1, layout="halves", denominator="half-1")
    out = output_array(out, pos.shape + (d_model,), dtype, [("tokens", tokens)])
    _, module = _backends.resolve(backend)
    flat = out.reshape(-1, d_model)
    fill_rows(module, config.frequencies, "halves", pos.reshape(-1).astype(np.uint32), 0, flat)
    flat[pos.reshape(-1) == padding_idx] = 0
    return out


# --------------------------------------------------------------------------- relative sinusoids


def transformer_xl_embedding(klen: int, d_model: int, *, clamp_len: int | None = None, dtype=None,
                             out: np.ndarray | None = None, backend: str | None = None) -> np.ndarray:
    """Transformer-XL's relative ``PositionalEmbedding``: ``(klen, d_model)`` rows for the
    positions ``klen-1, klen-2, ..., 0``, each ``[sin(p w) | cos(p w)]`` with
    ``w = 1 / 10000 ** (arange(0, d_model, 2) / d_model)`` (kimiyoung/transformer-xl,
    ``pytorch/mem_transformer.py``, and HF's former ``TransfoXLModel``; their ``klen`` is
    ``mlen + qlen``).  ``clamp_len > 0`` clamps the positions to at most ``clamp_len``, as
    their ``if self.clamp_len > 0: pos_seq.clamp_(max=self.clamp_len)`` does (``None``, 0 or a
    negative value: no clamping).  Their batch axis is left out: ``out[:, None]`` broadcasts.

    Every value is exact as :func:`table`'s are (the rows are ``table(d_model, klen,
    layout="halves", start=klen - 1, step=-1)``, clamped rows copies of the row of
    ``clamp_len``).  ``d_model`` is even, 2 .. 65536; ``klen`` 1 .. 2**32; ``dtype`` and
    ``out`` as in :func:`table`.
    """
    klen = check_int("klen", klen, low=1, high=POSITION_LIMIT)
    d_model = check_int("d_model", d_model, low=2, high=MAX_D_MODEL)
    if d_model % 2:
        raise ValueError(f"d_model must be even (a sine and a cosine per frequency), got {d_model}")
    if clamp_len is not None:
        clamp_len = check_int("clamp_len", clamp_len)
    out = output_array(out, (klen, d_model), dtype)
    clamp = klen - 1 if clamp_len is None or clamp_len <= 0 else min(clamp_len, klen - 1)
    first = klen - 1 - clamp  # rows before it hold positions above clamp_len: clamped
    table(d_model, clamp + 1, layout="halves", start=clamp, step=-1, out=out[first:], backend=backend)
    if first:
        out[:first] = out[first]
    return out


#: :func:`conformer_embedding`'s conventions
CONFORMER_CONVENTIONS = ("nemo", "espnet", "espnet_legacy")


def conformer_embedding(length: int, d_model: int, *, convention: str = "nemo", dtype=None,
                        out: np.ndarray | None = None, backend: str | None = None) -> np.ndarray:
    """A Conformer's relative positional encoding of a sequence of ``length`` frames.

    ``convention="nemo"`` (the default): NeMo's ``RelPositionalEncoding``
    (``nemo/collections/asr/parts/submodules/multi_head_attention.py``), ``(2 * length - 1,
    d_model)`` rows for the positions ``length-1, ..., 1, 0, -1, ..., -(length-1)`` -- the
    slice its ``forward`` takes of the table ``extend_pe`` builds -- each row the classic
    interleaved ``sin, cos, sin, cos, ...`` of :func:`table` (``w_i = 10000 ** (-2i/d_model)``).
    ``"espnet"``: ESPnet's ``RelPositionalEncoding`` (``espnet/nets/pytorch_backend/
    transformer/embedding.py``): its positive half flipped, then its negative half without
    position 0 -- the same positions and the same values as NeMo's (it is the same
    encoding; the name is accepted so a port reads as its source).  ``"espnet_legacy"``:
    ESPnet's ``LegacyRelPositionalEncoding``, the plain table of positions ``0 .. length-1``
    (``length`` rows).

    Exact as :func:`table` (a negative position's row is its magnitude's with the sines
    negated, bit for bit).  ``length`` 1 .. 2**31, ``d_model`` 1 .. 65536 (an odd one ends
    with a lone sine, as :func:`table`; NeMo and ESPnet need it even); ``dtype``, ``out`` as
    in :func:`table`.
    """
    length = check_int("length", length, low=1, high=POSITION_LIMIT // 2)
    d_model = check_d_model(d_model)
    convention = check_choice("convention", convention, CONFORMER_CONVENTIONS)
    if convention == "espnet_legacy":
        return table(d_model, length, dtype=dtype, out=out, backend=backend)
    return table(d_model, 2 * length - 1, start=length - 1, step=-1, dtype=dtype, out=out, backend=backend)
