"""The DeBERTa bucket plan: where HF's float32 log-bucket formula changes value, per configuration.

HF's ``make_log_bucket_position`` (deberta_v2) maps a relative position ``rp`` with
``|rp| > mid`` (``mid = bucket_size // 2``) to ``sign(rp) * f(|rp|)``, and every other one to
itself, where for a distance ``d``::

    y = float32(d) / float32(mid)                      # int64 / int, true division: float32
    D = log32(float32((max_position - 1) / mid))       # torch.log of a 0-d float32 tensor
    f(d) = ceil(log32(y) / D * float32(mid - 1)) + float32(mid)    # each operation in float32

``f`` is a non-decreasing step function of ``d`` with no cap (distances past
``max_position`` keep growing), so a configuration is described, up to a reach ``R``, by
the distances where ``f`` takes a new value: :func:`bucket_plan` returns them (``starts``)
with the value taken there (``values``), and a kernel finds the last start at or below
``d``.  The plan is built by emulating HF's float32 operations exactly, vectorised in
NumPy (IEEE quotients, products, ``ceil`` and sums are exact to emulate); the ``log`` is the
correctly rounded float32 one (:func:`log32`: the double ``log`` rounded when every number
within ``2**-40`` of it rounds alike, else :func:`fastpe._plans.t5.log_float32`, exact).

torch's own float32 ``log`` is within one ULP, not correctly rounded, and it decides two
things: the divisor ``D`` (one value per configuration) and, at *fragile* arguments -- where
the two float32 neighbours of the true ``log(y)`` give different buckets -- ``f`` itself.
fastpe takes the correctly rounded log in both places, the same on every machine.  The
``_hf_log`` hook (tests only) plugs in another float32 log (a function of a float32 array)
for the divisor and the fragile arguments, to show the plan then reproduces a particular
build's HF bit for bit; the plan records the hook's values where they differ from the
correctly rounded ones (``logs``), for the reference.
"""

from __future__ import annotations

import functools
import types
from dataclasses import dataclass

import numpy as np

from .t5 import log_float32

__all__ = ["log32", "divisor", "bucket_plan", "bucket_values", "reach_of", "plan_size", "Plan", "slot_of",
           "search_index", "direct_table", "direct_plan", "DIRECT_STARTS", "INDEX_BITS", "INDEX_SLOTS",
           "MAX_BUCKET_SIZE", "MAX_POSITION", "MAX_STARTS", "DEFAULT_BUCKET_SIZE", "DEFAULT_MAX_POSITION"]

#: DeBERTa-v3's configuration (microsoft/deberta-v3-base config.json: "position_buckets": 256,
#: "max_relative_positions": -1, so max_position is its "max_position_embeddings": 512)
DEFAULT_BUCKET_SIZE = 256
DEFAULT_MAX_POSITION = 512

#: bucket_size bound: mid <= 2**15 keeps every float32 of the small range exact and
#: (mid + 1) / mid distinct from 1 in float32
MAX_BUCKET_SIZE = 1 << 16
#: max_position bound
MAX_POSITION = 1 << 62
#: a plan holds at most this many starts (8 MiB of int64 each for starts and values)
MAX_STARTS = 1 << 20
#: the smallest reach a plan is built for; reaches are rounded up to powers of two
MIN_REACH = 1 << 16
#: distances are below 2**63
_TOP = (1 << 63) - 1
#: the largest double below 2**63 (a guess clipped to it converts to int64)
_BELOW_TOP = float((1 << 63) - 1024)

#: where fragile logs come from: ``None`` (the correctly rounded log), or a function of a
#: float32 array giving some float32 log's values there (the tests plug in torch's)
_hf_log = None

_F32 = np.float32
_MARGIN = 2.0**-40


def log32(y: np.ndarray) -> np.ndarray:
    """The correctly rounded float32 ``ln(y)`` of a float32 array (values ``>= 1``)."""
    y = np.asarray(y, dtype=_F32)
    wide = np.log(y.astype(np.float64))
    lo = (wide * (1 - _MARGIN)).astype(_F32)
    hi = (wide * (1 + _MARGIN)).astype(_F32)
    out = lo
    doubt = np.flatnonzero(lo != hi)
    for k in doubt.tolist():  # a margin far beyond any libm's error: rare, decided exactly
        out[k] = _F32(log_float32(float(y.flat[k])))
    return out


def divisor_argument(bucket_size: int, max_position: int) -> np.float32:
    """``float32((max_position - 1) / mid)``: HF's Python float, made a float32 tensor."""
    return _F32((max_position - 1) / (bucket_size // 2))


def divisor(bucket_size: int, max_position: int) -> np.float32:
    """HF's ``torch.log(torch.tensor((max_position - 1) / mid))``: the correctly rounded
    float32 log (the hook's, when set)."""
    x = np.array([divisor_argument(bucket_size, max_position)], dtype=_F32)
    log = log32(x) if _hf_log is None else np.asarray(_hf_log(x), dtype=_F32)
    return _F32(log[0])


class _Formula:
    """HF's float32 formula ``f(d)`` for distances ``d > mid`` of one configuration,
    vectorised; with the hook set, fragile arguments take the hook's log (recorded)."""

    def __init__(self, bucket_size: int, max_position: int):
        self.mid = bucket_size // 2
        self.mid32 = _F32(self.mid)
        self.scale = _F32(self.mid - 1)
        self.divisor = divisor(bucket_size, max_position)
        self.logs: dict[float, float] = {}
        x = divisor_argument(bucket_size, max_position)
        if _hf_log is not None and self.divisor != log32(np.array([x]))[0]:
            self.logs[float(x)] = float(self.divisor)

    def argument(self, d: np.ndarray) -> np.ndarray:
        return (d.astype(_F32) / self.mid32).astype(_F32)

    def from_log(self, log: np.ndarray) -> np.ndarray:
        w = ((log / self.divisor).astype(_F32) * self.scale).astype(_F32)
        return (np.ceil(w) + self.mid32).astype(_F32).astype(np.int64)

    def __call__(self, d: np.ndarray) -> np.ndarray:
        y = self.argument(np.asarray(d, dtype=np.int64))
        log = log32(y)
        if _hf_log is not None:
            down = self.from_log(np.nextafter(log, _F32(-np.inf)))
            up = self.from_log(np.nextafter(log, _F32(np.inf)))
            exponent_only = np.frexp(y)[0] == 0.5  # a power of two: every log rounds it right
            fragile = np.flatnonzero((down != up) & ~exponent_only)
            if fragile.size:
                theirs = np.asarray(_hf_log(y[fragile]), dtype=_F32)
                for k, v in zip(fragile.tolist(), theirs.tolist()):
                    if v != float(log[k]):
                        self.logs[float(y[k])] = v
                        log[k] = v
        return self.from_log(log)


#: the search index cuts each binade of distances into 2**INDEX_BITS slots
INDEX_BITS = 7
#: slots of distances below 2**63, and one past them
INDEX_SLOTS = 63 * (1 << INDEX_BITS) + 1


def slot_of(d: np.ndarray) -> np.ndarray:
    """The index slot of each distance ``d >= 1``: ``e * 2**INDEX_BITS`` plus the
    ``INDEX_BITS`` bits after the leading one, ``e = floor(log2 d)`` (non-decreasing in ``d``;
    the kernels compute it with a count of leading zeros)."""
    d = np.asarray(d, dtype=np.int64)
    e = np.zeros(d.shape, dtype=np.int64)
    for shift in (32, 16, 8, 4, 2, 1):  # floor(log2 d), exactly, in integers
        big = (d >> (e + shift)) > 0
        e = np.where(big, e + shift, e)
    frac = d - (np.int64(1) << e)
    top = np.where(e >= INDEX_BITS, frac >> np.maximum(e - INDEX_BITS, 0), frac << np.maximum(INDEX_BITS - e, 0))
    return e * (1 << INDEX_BITS) + top


def _slot_starts() -> list[int]:
    """The smallest distance of each slot (or of the first non-empty slot after it)."""
    firsts = []
    for s in range(INDEX_SLOTS):
        e, top = divmod(s, 1 << INDEX_BITS)
        if e >= 63:
            firsts.append(_TOP)
        elif e >= INDEX_BITS:
            firsts.append((1 << e) + (top << (e - INDEX_BITS)))
        else:
            d = (1 << e) + -(-top >> (INDEX_BITS - e))  # the first d whose top bits reach top
            firsts.append(min(d, 1 << (e + 1)))
    return firsts


_SLOT_STARTS = np.array(_slot_starts(), dtype=np.int64)


def search_index(starts: np.ndarray) -> np.ndarray:
    """``index[s]``: the plan entry of the smallest distance of slot ``s`` (0 below the first
    start), so the entry of any distance of slot ``s`` lies in ``[index[s], index[s + 1]]``
    and a kernel searches only there."""
    if not starts.size:
        return np.zeros(INDEX_SLOTS, dtype=np.int64)
    return np.maximum(np.searchsorted(starts, _SLOT_STARTS, side="right") - 1, 0).astype(np.int64)


def direct_table(starts: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The one-look-up table of a plan whose every slot holds at most one start after its
    smallest distance, else an empty array: for each slot ``s``, ``[3 s, 3 s + 3)`` holds
    ``(t, v0, v1)``, the bucket of a distance ``d`` of the slot past the plan's first start
    being ``v1`` when ``d >= t`` else ``v0`` (``t = 2**63 - 1`` where the slot holds no start
    but its first); the kernels load one slot's three integers (one cache line, no dependent
    load) instead of the index, then the starts, then the values."""
    if not starts.size:
        return np.zeros(0, dtype=np.int64)
    first = _SLOT_STARTS
    after = np.empty_like(first)  # the largest distance of each slot
    after[:-1] = np.maximum(first[1:] - 1, first[:-1])
    after[-1] = _TOP
    at_first = np.searchsorted(starts, first, side="right")  # starts at or below each slot's first
    inside = np.searchsorted(starts, after, side="right") - at_first
    if (inside > 1).any():
        return np.zeros(0, dtype=np.int64)
    table = np.empty((first.size, 3), dtype=np.int64)
    table[:, 1] = values[np.maximum(at_first - 1, 0)]  # below the first start: never read
    one = inside == 1
    table[:, 0] = np.where(one, starts[np.minimum(at_first, starts.size - 1)], _TOP)
    table[:, 2] = np.where(one, values[np.minimum(at_first, starts.size - 1)], table[:, 1])
    return table.reshape(-1)


@dataclass(frozen=True)
class Plan:
    """Distances ``starts`` (int64, strictly increasing, ``starts[0] = mid + 1``) where HF's
    bucket takes the new value ``values`` (int64, strictly increasing), for distances up to
    ``reach``; ``index`` (:func:`search_index`, :data:`INDEX_SLOTS` int64) narrows the
    search; ``direct``: :func:`direct_table` (empty when some slot holds two starts past its
    first distance); ``logs``: float32 argument -> float32 log wherever the hook's log was used and
    differs from the correctly rounded one (empty without the hook)."""

    mid: int
    reach: int
    starts: np.ndarray
    values: np.ndarray
    index: np.ndarray
    direct: np.ndarray
    logs: types.MappingProxyType

    @property
    def narrow(self) -> bool:
        """Every slot of the index holds at most 4 candidate starts (DeBERTa-v3's plan does):
        a kernel may count them instead of searching."""
        return bool((np.diff(self.index) <= 3).all())


def reach_of(distance: int) -> int:
    """The reach a plan covering ``distance`` is built for: a power of two minus one
    (at least ``MIN_REACH - 1``), or ``2**63 - 1``."""
    if distance < MIN_REACH:
        return MIN_REACH - 1
    if distance.bit_length() >= 63:
        return _TOP
    return (1 << distance.bit_length()) - 1


def plan_size(bucket_size: int, max_position: int, distance: int) -> int:
    """An upper bound of the starts of the plan reaching ``distance``: the values ``f``
    takes up to its reach, at most one per distance."""
    return _plan_size(bucket_size, max_position, reach_of(distance))


@functools.lru_cache(maxsize=256)
def _plan_size(bucket_size: int, max_position: int, reach: int) -> int:
    mid = bucket_size // 2
    if reach <= mid:
        return 0
    first, top = _Formula(bucket_size, max_position)(np.array([mid + 1, reach])).tolist()
    return min(top - first + 1, reach - mid)


#: distances evaluated one by one below the sparse search
_DENSE_MIN = 4096
_CHUNK = 1 << 20


def _dense(f: _Formula, first: int, last: int) -> tuple[np.ndarray, np.ndarray]:
    """The change points of ``f`` over every distance in ``[first, last]``."""
    starts, values = [], []
    prev = None
    for a in range(first, last + 1, _CHUNK):
        d = np.arange(a, min(last, a + _CHUNK - 1) + 1, dtype=np.int64)
        v = f(d)
        keep = np.empty(v.shape, dtype=bool)
        keep[0] = prev is None or v[0] != prev
        keep[1:] = v[1:] != v[:-1]
        starts.append(d[keep])
        values.append(v[keep])
        prev = v[-1]
    return np.concatenate(starts), np.concatenate(values)


def _sparse(f: _Formula, after: int, reach: int, targets: np.ndarray) -> np.ndarray:
    """The smallest distance in ``(after, reach]`` reaching each target value (all reached
    by ``reach``, none by ``after``), by a vectorised bisection from HF's real formula's
    inverse as the first guess."""
    n = targets.size
    lo = np.full(n, after, dtype=np.int64)
    hi = np.full(n, reach, dtype=np.int64)
    # f(d) ~ mid + ceil(scale * ln(d / mid) / divisor): reaching b needs ln(d / mid) just past
    # (b - mid - 1) * divisor / scale; a bracket 2**-12 wide either side holds the float32 answer
    with np.errstate(over="ignore"):
        guess = f.mid * np.exp((targets - f.mid - 1).astype(np.float64) * float(f.divisor) / float(f.scale))
    glo = np.minimum(np.clip(np.floor(guess * (1 - 2.0**-12)) - 2, after, _BELOW_TOP).astype(np.int64), reach)
    ghi = np.minimum(np.clip(np.ceil(guess * (1 + 2.0**-12)) + 2, after, _BELOW_TOP).astype(np.int64), reach)
    below = (glo > after) & (f(glo) < targets)
    lo[below] = glo[below]
    above = f(ghi) >= targets
    hi[above] = ghi[above]
    active = np.flatnonzero(hi - lo > 1)
    while active.size:
        a, b = lo[active], hi[active]
        m = a + (b - a) // 2
        reached = f(m) >= targets[active]
        hi[active[reached]] = m[reached]
        lo[active[~reached]] = m[~reached]
        active = active[hi[active] - lo[active] > 1]
    return hi


@functools.lru_cache(maxsize=64)
def _plan(bucket_size: int, max_position: int, reach: int) -> Plan:
    f = _Formula(bucket_size, max_position)
    mid = f.mid
    if reach <= mid:
        empty = np.zeros(0, dtype=np.int64)
        empty.setflags(write=False)
        index = search_index(empty)
        index.setflags(write=False)
        return Plan(mid, reach, empty, empty, index, empty, types.MappingProxyType(dict(f.logs)))
    # one by one while f climbs at least about once per distance (up to twice
    # scale / divisor, where its slope scale / (divisor * d) falls to 1/2), then by value
    slope_end = 2 * float(f.scale) / max(float(f.divisor), 1e-30)
    dense_last = int(min(reach, mid + max(_DENSE_MIN, min(slope_end, 4 * MAX_STARTS))))
    starts, values = _dense(f, mid + 1, dense_last)
    if dense_last < reach:
        top = int(f(np.array([reach]))[0])
        targets = np.arange(int(values[-1]) + 1, top + 1, dtype=np.int64)
        if targets.size:
            found = _sparse(f, dense_last, reach, targets)  # non-decreasing: a skipped value repeats
            keep = np.ones(found.shape, dtype=bool)
            keep[1:] = found[1:] != found[:-1]  # (not np.unique: it imports numpy.ma, ~20 ms)
            found = found[keep]
            starts = np.concatenate([starts, found])
            values = np.concatenate([values, f(found)])
    index = search_index(starts)
    direct = direct_table(starts, values)
    for a in (starts, values, index, direct):
        a.setflags(write=False)
    return Plan(mid, reach, starts, values, index, direct, types.MappingProxyType(dict(f.logs)))


def bucket_plan(bucket_size: int, max_position: int, distance: int) -> Plan:
    """The plan of a configuration covering every distance up to ``distance`` (built for
    :func:`reach_of` of it, cached)."""
    return _plan(bucket_size, max_position, reach_of(distance))


#: a configuration whose plan over every distance holds at most this many starts is planned
#: whole for the direct table (DeBERTa-v3's: 3,562 starts, built in a few ms, once)
DIRECT_STARTS = 1 << 14


def direct_plan(bucket_size: int, max_position: int) -> Plan | None:
    """The plan over every distance below ``2**63`` when it is small (at most
    :data:`DIRECT_STARTS` starts) and has a direct table, else ``None``: a kernel looking up
    by its table needs no reach of the positions, so no pass over them before (the plan is
    :func:`bucket_plan`'s, cached there)."""
    if _plan_size(bucket_size, max_position, _TOP) > DIRECT_STARTS:
        return None
    p = _plan(bucket_size, max_position, _TOP)
    return p if p.direct.size else None


def bucket_values(bucket_size: int, max_position: int, relative_position: np.ndarray) -> np.ndarray:
    """HF's buckets of an int64 array by the formula itself (vectorised emulation; the
    plan's own evaluator, for checks)."""
    rel = np.asarray(relative_position, dtype=np.int64)
    mid = bucket_size // 2
    out = rel.copy()
    far = np.abs(rel) > mid
    if far.any():
        f = _Formula(bucket_size, max_position)
        out[far] = np.sign(rel[far]) * f(np.abs(rel[far]))
    return out
