"""Sin-cos position grids for vision transformers: 2-D (images) and 3-D (video).

Tokens are in row-major order (``t``, then ``y``, then ``x``); every axis gets ``q`` channels
of sines and ``q`` of cosines of ``coord * w_k``, ``w_k = base ** (-k / q)``, ``q = dim / 4``
(2-D) or ``dim / 6`` (3-D).  ``order`` picks the channel order:

``"mae"`` (MAE's ``get_2d_sincos_pos_embed``)
    ``[sin(x w) | cos(x w) | sin(y w) | cos(y w)]``; 3-D appends ``[sin(t w) | cos(t w)]``
    (the fastest axis first, each as ``[sin | cos]``).
``"timm"`` (timm's ``build_sincos2d_pos_embed`` default)
    ``[sin y | sin x | cos y | cos x]``; 3-D ``[sin t | sin y | sin x | cos t | cos y | cos x]``.

``cls_token=True`` prepends an all-zero row, as MAE does.  Each axis's values are computed
once (exact, like every fastpe value), then copied into place by a parallel gather.
"""

from __future__ import annotations

import math

import numpy as np

from . import _backends, _dtypes
from .sinusoid import fill_rows
from ._plans.frequencies import DEFAULT_BASE, Geometric
from ._validate import MAX_D_MODEL, POSITION_LIMIT, check_base, check_choice, check_int

__all__ = ["sincos_2d", "sincos_3d", "ORDERS"]

ORDERS = ("mae", "timm")

#: the most tokens a grid may have (rows of one array)
MAX_TOKENS = 1 << 31

_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def _grid(sizes, names, dim, base, order, cls_token, dtype, backend) -> np.ndarray:
    n_axes = len(sizes)
    sizes = tuple(check_int(n, s, low=1, high=POSITION_LIMIT) for n, s in zip(names, sizes))
    dim = check_int("dim", dim, low=1, high=MAX_D_MODEL)  # as d_model is
    if dim % (2 * n_axes):
        raise ValueError(f"dim must be divisible by {2 * n_axes} for a {n_axes}-D grid, got {dim}")
    base = check_base(base)
    order = check_choice("order", order, ORDERS)
    if not isinstance(cls_token, (bool, np.bool_)):
        raise TypeError(f"cls_token must be a bool, got {type(cls_token).__name__}")
    n_tok = math.prod(sizes)
    if n_tok > MAX_TOKENS:
        raise ValueError(f"the grid has {n_tok} tokens, more than {MAX_TOKENS}")
    dt = _dtypes.resolve(dtype)
    _, module = _backends.resolve(backend)

    q = dim // (2 * n_axes)
    table = np.empty((max(sizes), 2 * q), dtype=dt)  # [sin | cos] of each coordinate
    fill_rows(module, Geometric(q, float(q), base), "halves", None, 0, table)
    if order == "mae":  # blocks of the fastest axis first
        sin_off = [(n_axes - 1 - a) * 2 * q for a in range(n_axes)]
        cos_off = [s + q for s in sin_off]
    else:
        sin_off = [a * q for a in range(n_axes)]
        cos_off = [(n_axes + a) * q for a in range(n_axes)]
    first = int(bool(cls_token))
    out = np.empty((first + n_tok, dim), dtype=dt)
    if first:
        out[0] = 0
    u = _UINT[dt.itemsize]
    module.grid_gather(table=table.view(u), sizes=np.array(sizes, dtype=np.int64),
                       sin_off=np.array(sin_off, dtype=np.int64), cos_off=np.array(cos_off, dtype=np.int64),
                       first_row=first, out=out.view(u))
    return out


def sincos_2d(height: int, width: int, dim: int, *, base: float = DEFAULT_BASE, order: str = "mae",
              cls_token: bool = False, dtype="float32", backend: str | None = None) -> np.ndarray:
    """The ``(height * width [+ 1], dim)`` 2-D sin-cos embedding; any ``height x width``."""
    return _grid((height, width), ("height", "width"), dim, base, order, cls_token, dtype, backend)


def sincos_3d(t: int, h: int, w: int, dim: int, *, base: float = DEFAULT_BASE, order: str = "mae",
              cls_token: bool = False, dtype="float32", backend: str | None = None) -> np.ndarray:
    """The ``(t * h * w [+ 1], dim)`` 3-D sin-cos embedding (``dim`` divisible by 6)."""
    return _grid((t, h, w), ("t", "h", "w"), dim, base, order, cls_token, dtype, backend)
