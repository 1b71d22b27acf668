"""Numba kernel of xPos's scaling (:meth:`fastpe._backends.registry.Backend.rope_xpos_table`).

The table of ``C, S`` doubles is :func:`rope_table`'s; this multiplies each row by the power
of ``zeta`` at its centred position, for queries, and by the inverse power for keys, into a
second table.  The twin of ``csrc/fastpe_xpos.h``, operation for operation: the exponent
``(p - center) / scale_base`` is one double division (``p - center`` is exact: both are
integers below ``2**33``), each power one ``pow`` of the C library (numba's ``**`` on doubles
calls it; no fastmath, so nothing is contracted or vectorised differently), the clamp to
``[2**-600, 2**600]`` two comparisons, each product one double multiplication.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..._exact.rope import XPOS_CLAMP
from ._jit import kernel

__all__ = ["xpos_scale_parallel", "xpos_scale_serial", "COST"]

#: work units of one value (two pow calls) against a table value, for the serial threshold
COST = 8
_HI = 2.0 ** XPOS_CLAMP
_LO = 2.0 ** -XPOS_CLAMP


def _xpos_scale(positions, zeta, scale_base, center, out_q, out_k):
    n_freq = zeta.shape[0]
    hi = _HI
    lo = _LO
    for r in prange(positions.shape[0]):
        e = (np.float64(positions[r]) - center) / scale_base
        for i in range(n_freq):
            s = zeta[i] ** e
            t = zeta[i] ** (-e)
            if s > hi:
                s = hi
            elif s < lo:
                s = lo
            if t > hi:
                t = hi
            elif t < lo:
                t = lo
            c = out_q[r, 0, i]
            sn = out_q[r, 1, i]
            out_q[r, 0, i] = c * s
            out_q[r, 1, i] = sn * s
            out_k[r, 0, i] = c * t
            out_k[r, 1, i] = sn * t


xpos_scale_parallel, xpos_scale_serial = kernel(_xpos_scale)
