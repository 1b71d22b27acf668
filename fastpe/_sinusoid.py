"""Sinusoids beyond the table: add-in-place, continuous timesteps, fairseq's position rule.

Each validates once, then calls the registry operations through :mod:`fastpe._api`; every
value is exact in the sense of :func:`fastpe.forward` (float32 within 1 ULP of the correctly
rounded value, in practice correctly rounded; float16/bfloat16 correctly rounded; float64
within ``2**-45``).
"""

from __future__ import annotations

import numpy as np

from . import _backends, _dtypes
from ._api import fill_real, fill_rows, output_array
from ._config import DEFAULT_BASE, PosEncConfig
from ._freq import MAX_FREQUENCY, Geometric
from ._validate import (
    MAX_D_MODEL,
    check_finite_real,
    check_int,
    check_offset,
    check_position_grid,
    check_no_overlap,
    check_positive,
    check_real_positions,
    check_table_out,
)

__all__ = ["add_", "timestep", "fairseq_positions", "fairseq_embedding"]

_INT64_MAX = (1 << 63) - 1

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
    elif keywords != PosEncConfig(d_model, 1):
        given = [k for k, v, default in (("base", base, DEFAULT_BASE), ("layout", layout, "interleaved"),
                                         ("denominator", denominator, "d"),
                                         ("min_timescale", min_timescale, 1.0),
                                         ("max_timescale", max_timescale, None)) if v != default]
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
            module.add_rows(lead[:, r0:r1], part, factor)
    else:  # per-row positions: x as (rows, d_model)
        flat_x = x.reshape(1, -1, d_model)
        flat_p = pos.reshape(-1)
        n = flat_x.shape[1]
        pe = np.empty((min(block, n), d_model), dtype=x.dtype)
        for r0 in range(0, n, block):
            r1 = min(n, r0 + block)
            part = pe[:r1 - r0]
            fill_rows(module, freqs, config.layout, flat_p[r0:r1], 0, part, spec)
            module.add_rows(flat_x[:, r0:r1], part, factor)
    return x


def timestep(
    t,
    dim: int,
    *,
    max_period: float = 10000.0,
    flip_sin_to_cos: bool = False,
    shift: float = 1.0,
    scale: float = 1.0,
    dtype=None,
    backend: str | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Sinusoidal embedding of real timesteps (diffusion models, time series): ``(N, dim)``.

    With ``h = dim // 2`` and ``w_k = max_period ** (-k / (h - shift))``, row ``r`` is
    ``[sin(scale t_r w_k) | cos(scale t_r w_k)]`` (``[cos | sin]`` with
    ``flip_sin_to_cos``), and an odd ``dim`` ends with a zero column -- diffusers'
    ``get_timestep_embedding`` (``shift`` is its ``downscale_freq_shift``: 1 is the fairseq
    form, 0 the halves form).  ``t`` (float64, or anything converting to it; a scalar is one
    row) is taken at its exact value, ``|t| < 2**32``; the angle is never rounded, so large or
    fractional timesteps are as exact as small ones.  Whole-number timesteps (the usual
    0..999) take the table kernels and give the rows of the same frequencies' table.
    ``dim`` is at most 65536, as ``d_model`` is.  ``dtype`` as in :func:`fastpe.table`
    (``None``: float32, or ``out``'s dtype); ``out`` must not share memory with ``t``.
    """
    x = check_real_positions(t, "t")
    dim = check_int("dim", dim, low=2, high=MAX_D_MODEL)
    half = dim // 2
    max_period = check_finite_real("max_period", max_period)
    if max_period < 1.0:
        raise ValueError(f"max_period must be >= 1, got {max_period!r}")
    shift = check_finite_real("shift", shift)
    if half - shift <= 0:
        raise ValueError(f"dim // 2 - shift must be > 0, got {half} - {shift!r}")
    scale = check_positive("scale", scale, high=MAX_FREQUENCY)
    if not isinstance(flip_sin_to_cos, (bool, np.bool_)):
        raise TypeError(f"flip_sin_to_cos must be a bool, got {type(flip_sin_to_cos).__name__}")
    freqs = Geometric(half, half - shift, max(max_period, 1.0), 1.0, scale)
    _, module = _backends.resolve(backend)
    out = output_array(out, (x.shape[0], dim), dtype, [("t", t)])
    fill_real(module, freqs, "halves_cos" if flip_sin_to_cos else "halves", x, out)
    return out


def fairseq_positions(tokens, padding_idx: int, *, offset: int = 0) -> np.ndarray:
    """fairseq's / M2M100's positions of a token array: ``padding_idx + 1, + 2, ...`` along
    the last axis, counting only non-pad tokens, and ``padding_idx`` at pad tokens
    (``(cumsum(tokens != pad) + offset) * mask + padding_idx``; ``offset`` is HF's
    ``past_key_values_length``).  int64, the shape of ``tokens``."""
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
    mask = tok != padding_idx
    return (np.cumsum(mask, axis=-1, dtype=np.int64) + offset) * mask + padding_idx


def fairseq_embedding(tokens, d_model: int, padding_idx: int, *, dtype="float32",
                      backend: str | None = None) -> np.ndarray:
    """fairseq's ``SinusoidalPositionalEmbedding`` of a token array: ``(..., seq, d_model)``
    rows of the ``halves`` / ``half-1`` table at :func:`fairseq_positions`, pad tokens all
    zero."""
    pos = fairseq_positions(tokens, padding_idx)
    if pos.size and int(pos.max()) >= 1 << 32:
        raise ValueError("tokens: positions would reach 2**32")
    config = PosEncConfig(d_model, 1, layout="halves", denominator="half-1")
    dt = _dtypes.resolve(dtype)
    out = np.empty(pos.shape + (d_model,), dtype=dt)
    _, module = _backends.resolve(backend)
    flat = out.reshape(-1, d_model)
    fill_rows(module, config.frequencies, "halves", pos.reshape(-1).astype(np.uint32), 0, flat)
    flat[pos.reshape(-1) == padding_idx] = 0
    return out
