"""xPos's per-frequency step powers, shared by the compiled backends' ``rope_xpos_table``.

The kernels write each power ``zeta ** (n / sb)`` (``n`` the centred position, an integer)
as the product of an anchor's power and a step's: ``n = a + d`` with ``d = n mod STEP`` (in
``[0, STEP)``, for negative ``n`` too) and ``a = n - d``, so that a run of positions needs one
``pow`` per frequency and ``STEP`` rows, and the step powers ``zeta ** (d / sb)`` -- these
tables -- once per frequency set and scale base.  Each entry is the C library's ``pow`` of the
double ``fl(d / sb)`` (Python's ``math.pow`` calls it for finite positive arguments, the
kernels call it for the anchors): the same numbers on both backends.  Scale bases below
:data:`MIN_ANCHORED` take ``pow`` at every value instead (a step's power could leave the
doubles' range there); see :mod:`fastpe.rope._xpos` for the error bound of both.
"""

from __future__ import annotations

import functools
import math

import numpy as np

__all__ = ["STEP", "MIN_ANCHORED", "xpos_steps", "steps_of", "NO_STEPS"]

#: positions per anchor (a power of two: ``d = n & (STEP - 1)``)
STEP = 64
#: the smallest scale base the anchored product serves: ``|ln zeta| (STEP - 1) / sb <= 40``
#: for every zeta >= 2/7, so a step's power stays within ``e**+-40``
MIN_ANCHORED = 2.0


@functools.lru_cache(maxsize=64)
def xpos_steps(zeta: tuple, scale_base: float) -> tuple[np.ndarray, np.ndarray]:
    """``(up, down)``, C-contiguous float64 ``(len(zeta), STEP)``, read-only: ``up[i, d] =
    pow(zeta[i], fl(d / sb))``, ``down[i, d] = pow(zeta[i], -fl(d / sb))``."""
    up = np.empty((len(zeta), STEP), dtype=np.float64)
    down = np.empty_like(up)
    for d in range(STEP):
        e = d / scale_base
        for i, z in enumerate(zeta):
            up[i, d] = math.pow(z, e)
            down[i, d] = math.pow(z, -e)
    up.flags.writeable = False
    down.flags.writeable = False
    return up, down


#: the step tables of a direct (not anchored) call: empty, read-only, as the real ones
NO_STEPS = np.empty((0, STEP), dtype=np.float64)
NO_STEPS.flags.writeable = False


def steps_of(zeta, scale_base) -> tuple[np.ndarray, np.ndarray]:
    """The step tables of a call (``(NO_STEPS, NO_STEPS)`` below :data:`MIN_ANCHORED`)."""
    sb = float(scale_base)
    if sb < MIN_ANCHORED:
        return NO_STEPS, NO_STEPS
    return xpos_steps(tuple(zeta), sb)
