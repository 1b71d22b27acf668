"""The T5 bucket plan: where HF's float32 bucket formula changes bucket, per configuration.

HF's ``T5Attention._relative_position_bucket`` computes, for a distance ``d >= max_exact``,
``max_exact + int(log(d / max_exact) / log(max_distance / max_exact) * (n - max_exact))`` in
float32.  Every bucket is therefore decided by a handful of thresholds -- the smallest
distance reaching each bucket -- which :func:`_plan` finds once per ``(n, max_distance)``
(``n`` buckets per direction) by emulating those float32 operations exactly.  The kernels
then count thresholds, in integers.  The one operation whose last bit is not fixed by IEEE
is the float32 ``log``: at the few *fragile* arguments where its two float32 neighbours give
different buckets, fastpe takes the correctly rounded log (:func:`log_float32`), the same on
every machine; the ``_hf_log`` hook (tests only) plugs in another log to reproduce a
particular build's HF bit for bit, and the plan records those logs for the reference.
"""

from __future__ import annotations

import functools
import math
import types
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np

from .._exact.rounding import FORMATS, round_interval, ziv

__all__ = ["log_float32", "bucket_plan"]

_F32 = FORMATS["float32"]
#: a retry past this many digits would mean a bug, not bad luck
_MAX_DIGITS = 2560


@functools.lru_cache(maxsize=1 << 16)
def log_float32(y: float) -> float:
    """The float32 nearest to ``ln(y)`` (``y`` a float32 value, ``y >= 1``), as a float.

    ``Decimal.ln`` is correctly rounded; the result is known to ``10**-digits`` relative and
    rounded by Ziv's test.  ``ln`` of a rational other than 1 is transcendental, never a
    float32 midpoint, so the loop ends.
    """
    if y == 1.0:
        return 0.0

    def attempt(digits: int) -> float | None:
        with localcontext() as ctx:
            ctx.prec = digits + 5
            value = Fraction(Decimal(y).ln())
        radius = abs(value) / 10**digits
        return round_interval(value - radius, value + radius, _F32)

    return ziv(attempt, 30, _MAX_DIGITS, f"log_float32({y!r})", "digits")


#: where fragile logs come from: ``None`` (the correctly rounded log), or a function giving
#: some float32 log's value at ``y`` (the tests plug in torch's to reproduce HF bit for bit)
_hf_log = None


def _log32(y: float) -> np.float32:
    """The correctly rounded float32 ``ln(y)``: from the double ``math.log`` when every
    number within ``2**-40`` of it (a margin far beyond any libm's error) rounds alike,
    else from the exact reference."""
    value = math.log(y)
    lo, hi = np.float32(value * (1 - 2.0**-40)), np.float32(value * (1 + 2.0**-40))
    if lo == hi:
        return lo
    return np.float32(log_float32(y))


class _Chain:
    """HF's float32 bucket formula for distances ``d >= max_exact`` of one configuration."""

    def __init__(self, n: int, max_distance: int):
        self.exact = n // 2
        self.cap = n - 1
        self.exact32 = np.float32(self.exact)
        self.scale = np.float32(n - self.exact)
        self.divisor = np.float32(math.log(max_distance / self.exact))  # as HF's Python float
        self.overrides: dict[float, float] = {}

    def arg(self, d: int) -> np.float32:
        return np.float32(np.float32(d) / self.exact32)

    def from_log(self, log: np.float32) -> int:
        w = np.float32(np.float32(log / self.divisor) * self.scale)
        return min(self.exact + int(w), self.cap)

    def bucket(self, d: int) -> int:
        if d < self.exact:
            return d
        y = float(self.arg(d))
        log = self.overrides.get(y)
        return self.from_log(_log32(y) if log is None else np.float32(log))

    def fragile(self, d: int) -> bool:
        """Whether the two float32 neighbours of the true ``log`` give different buckets."""
        if d < self.exact:
            return False
        y = float(self.arg(d))
        if math.frexp(y)[0] == 0.5:  # a power of two (1 included): every log rounds it right
            return False
        log = _log32(y)
        down = self.from_log(np.nextafter(log, np.float32(-np.inf)))
        up = self.from_log(np.nextafter(log, np.float32(np.inf)))
        return down != up


def _first_reaching(chain: _Chain, b: int, estimate: float) -> int:
    """The smallest distance whose bucket is ``>= b``, searched from ``estimate``."""
    lo, step = max(chain.exact, int(estimate) - 2), 2
    while lo > chain.exact and chain.bucket(lo) >= b:
        lo, step = max(chain.exact, lo - step), step * 2
    hi, step = lo + 1, 4
    while chain.bucket(hi) < b:
        lo, hi, step = hi, hi + step, step * 2
    while hi - lo > 1:  # bucket(lo) < b <= bucket(hi)
        mid = (lo + hi) // 2
        if chain.bucket(mid) >= b:
            hi = mid
        else:
            lo = mid
    return hi


@functools.lru_cache(maxsize=64)
def _plan(n: int, max_distance: int) -> tuple[np.ndarray, types.MappingProxyType]:
    """The thresholds and fragile logs of ``n`` buckets per direction (``num_buckets``, halved
    when bidirectional) and ``max_distance``.

    Returns ``(thresholds, logs)``: ``thresholds[m]`` (int64, read-only, non-decreasing) is
    the smallest distance ``d`` whose bucket is ``>= max_exact + 1 + m``, so the bucket of
    ``d >= max_exact`` is ``max_exact`` plus the number of thresholds ``<= d``; ``logs`` maps
    each fragile float32 argument where the ``_hf_log`` hook's log differs from the correctly
    rounded one to that value (empty unless the hook is set; for the reference, which
    evaluates the formula itself).
    """
    chain = _Chain(n, max_distance)
    exact = chain.exact
    thresholds = []
    for b in range(exact + 1, n):
        estimate = exact * (max_distance / exact) ** ((b - exact) / (n - exact))
        t = _first_reaching(chain, b, estimate)
        if _hf_log is None:
            # with the correctly rounded log everywhere there is nothing to record, and the
            # rescan below would return t itself (the bucket is monotonic): skip it, it walks
            # every fragile distance one by one (up to 2**8 of them per float32 argument at
            # max_distance 2**32)
            thresholds.append(t)
            continue
        # the distances around t whose bucket the log's last bit decides
        run = []
        d = t - 1
        while d >= exact and chain.fragile(d):
            run.append(d)
            d -= 1
        d = t
        while chain.fragile(d):
            run.append(d)
            d += 1
        if run:
            for d in run:
                y = float(chain.arg(d))
                if y not in chain.overrides:
                    theirs = None if _hf_log is None else _hf_log(y)
                    if theirs is not None and theirs != float(_log32(y)):
                        chain.overrides[y] = theirs
            run.sort()
            t = next((d for d in run if chain.bucket(d) >= b), run[-1] + 1)
        thresholds.append(t)
    table = np.array(thresholds, dtype=np.int64)
    table.setflags(write=False)
    return table, types.MappingProxyType(dict(chain.overrides))


def bucket_plan(bidirectional: bool, num_buckets: int,
                max_distance: int) -> tuple[int, np.ndarray, types.MappingProxyType]:
    """``(n, thresholds, logs)`` of a bucket configuration: ``n`` buckets per direction
    (``num_buckets``, halved when bidirectional) and :func:`_plan`'s thresholds and logs."""
    n = num_buckets // 2 if bidirectional else num_buckets
    return (n, *_plan(n, max_distance))
