"""Sin-cos position grids for vision transformers: 2-D (images) and 3-D (video).

Tokens are in row-major order (frame ``t``, then row ``y``, then column ``x``); every axis
gets ``q`` channels of sines and ``q`` of cosines of ``coord * w_k``, ``w_k = base ** (-k / q)``,
``q = d_model / 4`` (2-D) or ``d_model / 6`` (3-D).  ``order`` picks the channel order:

``"mae"`` (MAE's ``get_2d_sincos_pos_embed``)
    ``[sin(x w) | cos(x w) | sin(y w) | cos(y w)]``; 3-D appends ``[sin(t w) | cos(t w)]``
    (the fastest axis first, each as ``[sin | cos]``).
``"timm"`` (timm's ``build_sincos2d_pos_embed`` default)
    ``[sin y | sin x | cos y | cos x]``; 3-D ``[sin t | sin y | sin x | cos t | cos y | cos x]``.

``cls_token=True`` prepends an all-zero row, as MAE does.  Each axis's values are computed
once (exact, like every fastpe value), then copied into place by a parallel gather.
``dtype`` and ``out`` as in :func:`fastpe.table`.
"""

from __future__ import annotations

import math

import numpy as np

from . import _backends
from .sinusoid import fill_rows, output_array
from ._plans.frequencies import DEFAULT_BASE, Geometric
from ._validate import MAX_D_MODEL, POSITION_LIMIT, check_base, check_choice, check_int

__all__ = ["sincos_2d", "sincos_3d", "ORDERS"]

ORDERS = ("mae", "timm")

#: the most tokens a grid may have (rows of one array)
MAX_TOKENS = 1 << 31

_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def _grid(sizes, names, d_model, base, order, cls_token, dtype, out, backend) -> np.ndarray:
    n_axes = len(sizes)
    sizes = tuple(check_int(n, s, low=1, high=POSITION_LIMIT) for n, s in zip(names, sizes))
    d_model = check_int("d_model", d_model, low=1, high=MAX_D_MODEL)
    if d_model % (2 * n_axes):
        raise ValueError(f"d_model must be divisible by {2 * n_axes} for a {n_axes}-D grid, got {d_model}")
    base = check_base(base)
    order = check_choice("order", order, ORDERS)
    if not isinstance(cls_token, (bool, np.bool_)):
        raise TypeError(f"cls_token must be a bool, got {type(cls_token).__name__}")
    n_tok = math.prod(sizes)
    if n_tok > MAX_TOKENS:
        raise ValueError(f"the grid has {n_tok} tokens, more than {MAX_TOKENS}")
    first = int(bool(cls_token))
    out = output_array(out, (first + n_tok, d_model), dtype)
    dt = out.dtype
    _, module = _backends.resolve(backend)

    q = d_model // (2 * n_axes)
    table = np.empty((max(sizes), 2 * q), dtype=dt)  # [sin | cos] of each coordinate
    fill_rows(module, Geometric(q, float(q), base), "halves", None, 0, table)
    if order == "mae":  # blocks of the fastest axis first
        sin_off = [(n_axes - 1 - a) * 2 * q for a in range(n_axes)]
        cos_off = [s + q for s in sin_off]
    else:
        sin_off = [a * q for a in range(n_axes)]
        cos_off = [(n_axes + a) * q for a in range(n_axes)]
    if first:
        out[0] = 0
    u = _UINT[dt.itemsize]
    module.grid_gather(table=table.view(u), sizes=np.array(sizes, dtype=np.int64),
                       sin_off=np.array(sin_off, dtype=np.int64), cos_off=np.array(cos_off, dtype=np.int64),
                       first_row=first, out=out.view(u))
    return out


def sincos_2d(height: int, width: int, d_model: int, *, base: float = DEFAULT_BASE, order: str = "mae",
              cls_token: bool = False, dtype=None, out: np.ndarray | None = None,
              backend: str | None = None) -> np.ndarray:
    """The ``(height * width [+ 1], d_model)`` 2-D sin-cos embedding (``d_model`` divisible
    by 4); any ``height x width``.  ``out``, if given, is filled and returned."""
    return _grid((height, width), ("height", "width"), d_model, base, order, cls_token, dtype, out, backend)


def sincos_3d(frames: int, height: int, width: int, d_model: int, *, base: float = DEFAULT_BASE,
              order: str = "mae", cls_token: bool = False, dtype=None, out: np.ndarray | None = None,
              backend: str | None = None) -> np.ndarray:
    """The ``(frames * height * width [+ 1], d_model)`` 3-D sin-cos embedding (``d_model``
    divisible by 6).  ``out``, if given, is filled and returned."""
    return _grid((frames, height, width), ("frames", "height", "width"), d_model, base, order, cls_token, dtype,
                 out, backend)
