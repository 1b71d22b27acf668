"""The ``python`` backend: the reference (:mod:`fastpe._reference`) behind the backend API.

Slow -- every value is computed with :mod:`decimal` -- but exact: it is the oracle the fast
backends are checked against, and the fall-back that always loads.
"""

from __future__ import annotations

import numpy as np

from . import _reference

__all__ = ["sinusoid_forward", "sinusoid_range"]


def sinusoid_forward(positions, d_model, base, out) -> None:
    rows = _reference.sinusoid(positions.tolist(), d_model, base)
    if rows:
        out[...] = np.array(rows, dtype=np.float64).astype(np.float32)


def sinusoid_range(start, d_model, base, out) -> None:
    rows = _reference.sinusoid(range(int(start), int(start) + out.shape[0]), d_model, base)
    if rows:
        out[...] = np.array(rows, dtype=np.float64).astype(np.float32)
