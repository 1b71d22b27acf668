"""The public sinusoidal API: validate once, pick a backend, call its kernel."""

from __future__ import annotations

import numpy as np

from . import _backends
from ._config import DEFAULT_BASE, DEFAULT_MAX_LEN, PosEncConfig
from ._validate import check_no_overlap, check_out, check_positions

__all__ = ["forward", "table"]


def forward(positions, config: PosEncConfig, out: np.ndarray, *, backend: str | None = None):
    """Fill ``out`` with the sinusoidal encoding of ``positions``; return ``out``.

    ``out[r, 2i] = sin(p * w_i)`` and ``out[r, 2i + 1] = cos(p * w_i)`` with
    ``p = positions[r]`` and ``w_i = config.base ** (-2i / config.d_model)``; for an odd
    ``d_model`` the last column is a sine.  Every value is within 1 ULP of the exactly
    rounded float32 of the true value (in practice correctly rounded), for every position.

    Parameters
    ----------
    positions:
        1-D array-like of integers in ``[0, 2**32)``: any integer dtype, a list, or floats
        holding whole numbers.  Never modified.  May be empty.
    config:
        A :class:`PosEncConfig`; ``config.max_len`` does not limit the positions.
    out:
        Writable C-contiguous ``float32`` array of shape ``(len(positions), d_model)``.
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
    pos = check_positions(positions)
    check_out(out, (pos.shape[0], config.d_model))
    check_no_overlap(out, positions)
    _, module = _backends.resolve(backend)
    if pos.shape[0]:
        module.sinusoid_forward(pos, config.d_model, config.base, out)
    return out


def table(
    d_model: int,
    max_len: int = DEFAULT_MAX_LEN,
    *,
    base: float = DEFAULT_BASE,
    backend: str | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The ``(max_len, d_model)`` float32 sinusoidal table for positions ``0 .. max_len-1``.

    Bit-identical to ``forward(np.arange(max_len), PosEncConfig(d_model, max_len, base), out)``
    on the same backend, without building the positions array.  ``out``, if given, is
    filled and returned (same requirements as in :func:`forward`).
    """
    config = PosEncConfig(d_model, max_len, base)
    if out is None:
        _, module = _backends.resolve(backend)
        out = np.empty((config.max_len, config.d_model), dtype=np.float32)
    else:
        check_out(out, (config.max_len, config.d_model))
        _, module = _backends.resolve(backend)
    module.sinusoid_range(0, config.d_model, config.base, out)
    return out
