"""Distances in units in the last place between float32 arrays."""

from __future__ import annotations

import numpy as np

__all__ = ["ulp_distance"]


def _ordinal(a: np.ndarray) -> np.ndarray:
    """Map float32 bit patterns to integers that are consecutive along the real line.

    ``-0.0`` and ``+0.0`` both map to 0, so they are 0 ULP apart.
    """
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.int32).astype(np.int64)
    return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)


def ulp_distance(a, b) -> np.ndarray:
    """``|a - b|`` counted in float32 ULPs (how many representable floats lie between)."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    if np.isnan(a).any() or np.isnan(b).any():
        raise ValueError("ulp_distance: NaN has no distance")
    return np.abs(_ordinal(a) - _ordinal(b))
