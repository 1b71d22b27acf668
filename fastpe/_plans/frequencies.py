"""Geometric frequency sets: the one description behind every sinusoid family.

Every sinusoidal convention fastpe knows -- the spec's table, its ``halves`` layout, the
``half-1`` denominator of fairseq / M2M100 / tensor2tensor with its timescales, MAE and timm
grids, diffusion timesteps -- uses frequencies in a geometric progression::

    w_k = (scale / lo) * (hi / lo) ** (-k / n),   k = 0, 1, ..., count - 1

with (the names users know):

=====================  =========  ==================  ============  =========
convention             count      n                   hi / lo       scale
=====================  =========  ==================  ============  =========
spec, ``denominator=d``  ceil(d/2)  d / 2               base / 1      1
``half-1`` (t2t)        d // 2     max(d // 2 - 1, 1)  max_ts/min_ts  1
grid axis (MAE, timm)  dim / 4    dim / 4             base / 1      1
timestep (diffusers)   dim // 2   dim // 2 - shift    max_period/1  scale
=====================  =========  ==================  ============  =========

Every parameter is a double taken at its exact value, so ``w_k`` is a well-defined real
number: the kernels compute ``sin(t * w_k)`` and ``cos(t * w_k)`` of *that* number (never of
a rounded ``w_k``), which is what makes every family exact at large positions.

:func:`turns` builds the split words the fast kernels read (see :mod:`fastpe._plans.words`) by a
power chain; the reference (:mod:`fastpe._exact.sincos`) computes each ``w_k`` on its
own from :func:`log_terms`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from decimal import Decimal, localcontext

import numpy as np

from .._exact.constants import decimal_pi
from .words import PLAN_PREC, chain_turns

__all__ = ["Geometric", "turns", "MAX_FREQUENCY", "DEFAULT_BASE"]

#: the classic Transformer base, ``10000``: the default of every sinusoid and RoPE family
DEFAULT_BASE = 10000.0

#: the largest frequency (radians per position) the kernels' error analysis covers
MAX_FREQUENCY = 1024.0


@dataclass(frozen=True)
class Geometric:
    """``count`` frequencies ``w_k = (scale / lo) * (hi / lo) ** (-k / n)``.

    Hashable, so plans are cached per frequency set.  Arguments are assumed validated
    (``count >= 0``; ``n``, ``lo``, ``scale`` > 0, ``hi >= lo``; ``scale / lo <= 1024``).
    """

    count: int
    n: float
    hi: float
    lo: float = 1.0
    scale: float = 1.0

    @classmethod
    def spec(cls, d_model: int, base: float) -> Geometric:
        """The spec's frequencies ``base ** (-2i / d_model)``."""
        return cls((d_model + 1) // 2, d_model / 2, base)


def log_terms(freqs: Geometric) -> tuple[Decimal, Decimal]:
    """``(ln(scale / lo), ln(hi / lo) / n)`` in the current decimal context:
    ``ln w_k = first - k * step``."""
    lo = Decimal(freqs.lo)
    first = Decimal(freqs.scale).ln() - lo.ln()
    step = (Decimal(freqs.hi).ln() - lo.ln()) / Decimal(freqs.n)
    return first, step


@functools.lru_cache(maxsize=64)
def turns(freqs: Geometric) -> np.ndarray:
    """Split words of ``w_k / (2*pi)``, shape ``(4, count)``; read-only, cached.

    ``w_0`` by one exponential and ``r = exp(-step)``, at 80 digits, then ``w_{k+1} = w_k * r``
    on 256-bit integer significands (:func:`fastpe._plans.words.chain_turns`: the chain's relative
    error after 65,536 steps is below ``2**-238``, far under the 2**-116 the words keep).
    """
    with localcontext() as ctx:
        ctx.prec = PLAN_PREC + 20
        inv_two_pi = 1 / (2 * decimal_pi(PLAN_PREC + 30))
        first, step = log_terms(freqs)
        out = chain_turns(first.exp() * inv_two_pi, (-step).exp(), freqs.count)
    out.setflags(write=False)
    return out
