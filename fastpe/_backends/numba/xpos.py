"""Numba kernel of xPos's scaling (:meth:`fastpe._backends.registry.Backend.rope_xpos_table`).

The table of ``C, S`` doubles is :func:`rope_table`'s; this multiplies each row by the power
of ``zeta`` at its centred position ``n = p - center`` (an exact integer), for queries, and by
the inverse power for keys, into a second table.  The twin of ``csrc/fastpe_xpos.h``,
operation for operation:

* anchored (``scale_base >= 2``): ``n = a + d``, ``d = n & 63``; the anchor's powers
  ``pow(zeta, fl(a / sb))`` and ``pow(zeta, -fl(a / sb))`` (computed once per anchor and run
  of rows: the same numbers whichever rows share them) times the step's
  (:func:`fastpe._backends._xpos.xpos_steps`), one double multiplication each;
* direct (smaller scale bases): ``pow(zeta, fl(n / sb))`` and ``pow(zeta, -fl(n / sb))``;

then the clamp to ``[2**-600, 2**600]`` and one double multiplication per value.  numba's
``**`` on doubles calls the C library's ``pow``; no fastmath, so nothing is contracted or
vectorised differently.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..._exact.rope import XPOS_CLAMP
from .._xpos import STEP
from ._jit import kernel

__all__ = ["xpos_scale_parallel", "xpos_scale_serial", "COST", "ROWS"]

#: work units of one value against a table value, for the serial threshold
COST = 2
#: rows per work item of the parallel twin (their anchors are shared within it)
ROWS = 256
_HI = 2.0 ** XPOS_CLAMP
_LO = 2.0 ** -XPOS_CLAMP
_MASK = STEP - 1


def _xpos_scale(positions, zeta, scale_base, center, anchored, steps_up, steps_down, out_q, out_k):
    n = positions.shape[0]
    n_freq = zeta.shape[0]
    hi = _HI
    lo = _LO
    for b in prange((n + ROWS - 1) // ROWS):
        sq = np.empty(n_freq)
        sk = np.empty(n_freq)
        aq = np.empty(n_freq)
        ak = np.empty(n_freq)
        last = np.int64(0)
        have = False
        for r in range(b * ROWS, min(n, (b + 1) * ROWS)):
            m = np.int64(positions[r]) - center
            if anchored:
                d = m & _MASK
                a = m - d
                if not have or a != last:
                    ea = np.float64(a) / scale_base
                    for i in range(n_freq):
                        aq[i] = zeta[i] ** ea
                        ak[i] = zeta[i] ** (-ea)
                    last = a
                    have = True
                for i in range(n_freq):
                    sq[i] = aq[i] * steps_up[i, d]
                    sk[i] = ak[i] * steps_down[i, d]
            else:
                e = np.float64(m) / scale_base
                for i in range(n_freq):
                    sq[i] = zeta[i] ** e
                    sk[i] = zeta[i] ** (-e)
            for i in range(n_freq):
                s = sq[i]
                t = sk[i]
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
