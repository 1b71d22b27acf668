"""The numba backend's float32 -> float16 / bfloat16 narrowing kernels (branch-free integer
selects, fastpe._backends.numba.kernels) against NumPy's float16 cast and ml_dtypes' bfloat16
cast (the bits) and an exact midpoint test (the tie flags), on every exponent and the edges of
both formats plus a few million random patterns; and the parallel kernel against the serial one.
"""

from __future__ import annotations

import numpy as np
import pytest

from fastpe import _backends

ml_dtypes = pytest.importorskip("ml_dtypes")

pytestmark = pytest.mark.any_backend

TARGETS = ["float16", "bfloat16"]


@pytest.fixture(scope="module")
def kernels():
    why = _backends.unavailable_reason("numba")
    if why is not None:
        pytest.skip(f"numba backend not available: {why}")
    from fastpe._backends.numba import kernels

    return kernels


def _u32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).astype(np.float32).view(np.uint32)


def _edges() -> np.ndarray:
    """Named edge patterns, each with both signs."""
    e = np.arange(256, dtype=np.uint32) << np.uint32(23)
    sigs = np.array([0, 1, 2, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x7FFF, 0x8000, 0x8001,
                     0x18000, 0x400000, 0x7F7FFF, 0x7F8000, 0x7FFFFE, 0x7FFFFF], np.uint32)
    every_exponent = (e[:, None] | sigs[None, :]).reshape(-1)  # each boundary and around it
    k = np.arange(2048, dtype=np.float64)
    sub16 = np.concatenate([_u32(k * 2.0**-24), _u32((k + 0.5) * 2.0**-24)])  # float16 subnormals, midpoints
    named = np.concatenate([
        _u32([0.0, 65504.0, 65520.0, 65536.0, 2.0**-14, 2.0**-24, 2.0**-25, 3 * 2.0**-25, 2.0**-149, 2.0**-126]),
        np.array([0x477FEFFF, 0x477FF001,  # either side of 65520, the midpoint to 2**16
                  0x7F7F7FFF, 0x7F7F8000, 0x7F7F8001,  # bfloat16's: the midpoint to 2**128
                  0x7F7FFFFF, 0x007FFFFF, 0x00800000,  # max float32, the largest subnormal, min normal
                  0x7F800000,  # inf
                  0x7F800001, 0x7F801000, 0x7F802000, 0x7F808000, 0x7F810000, 0x7FA00000,  # NaNs with payloads
                  0x7FBFFFFF, 0x7FC00000, 0x7FC00001, 0x7FE00000, 0x7FFFFFFF], np.uint32),
    ])
    around = np.concatenate([sub16, named])
    around = np.concatenate([around - np.uint32(1), around, around + np.uint32(1)])
    out = np.concatenate([every_exponent, around])
    return np.concatenate([out, out ^ np.uint32(0x80000000)])


@pytest.fixture(scope="module")
def patterns() -> np.ndarray:
    """The edges; every exponent with every pattern of the low 13 significand bits (those
    float16 drops) under four high parts (0x204: bfloat16 ties), random signs; 3M random."""
    r = np.random.default_rng(2026)
    e = np.arange(256, dtype=np.uint32)[:, None, None] << np.uint32(23)
    high = np.array([0, 0x3FF, 0x204, int(r.integers(0, 1 << 10))], np.uint32)[None, :, None] << np.uint32(13)
    low = np.arange(1 << 13, dtype=np.uint32)[None, None, :]
    sweep = (e | high | low).reshape(-1)
    sweep ^= r.integers(0, 2, sweep.size, dtype=np.uint32) << np.uint32(31)
    rand = r.integers(0, 1 << 32, 3_000_000, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([_edges(), sweep, rand])


def _cast(bits: np.ndarray, target: str) -> np.ndarray:
    dtype = np.float16 if target == "float16" else ml_dtypes.bfloat16
    with np.errstate(over="ignore", invalid="ignore"):
        return bits.view(np.float32).astype(dtype).view(np.uint16)


def _exact_ties(bits: np.ndarray, target: str) -> np.ndarray:
    """Whether each float32 lies exactly halfway between two neighbouring numbers of the
    target, or between its largest finite number and the next power of two (the overflow
    midpoint, 65520 for float16): |x| is an odd multiple of half the target's spacing there,
    q = 2**(max(floor(log2|x|), emin) - (p - 1)).  All in float64, exactly: |x| / q is a
    power-of-two scaling of a float32 well inside float64's range, and so is its fraction."""
    p, emin, finfo = ((11, -14, np.finfo(np.float16)) if target == "float16"
                      else (8, -126, ml_dtypes.finfo(ml_dtypes.bfloat16)))
    top = float(finfo.max) + 2.0 ** (finfo.maxexp - 1 - (p - 1)) / 2  # 65504 + 16 for float16
    out = np.empty(bits.size, bool)
    for lo in range(0, bits.size, 1 << 20):
        with np.errstate(invalid="ignore"):  # signalling NaNs
            x = bits[lo:lo + (1 << 20)].view(np.float32).astype(np.float64)
        ax = np.abs(np.where(np.isfinite(x), x, 0.0))
        _, ex = np.frexp(ax)  # ax = m * 2**ex, 1/2 <= m < 1
        y = ax / np.ldexp(1.0, np.maximum(ex - 1, emin) - (p - 1))
        out[lo:lo + x.size] = (y - np.floor(y) == 0.5) & (ax <= top)
    return out


def _run(kernel, bits: np.ndarray, target: str):
    out = np.full(bits.size, 0xAAAA, np.uint16)
    ties = np.ones(bits.size, np.bool_)
    kernel(bits, target == "bfloat16", out, ties)
    return out, ties


def test_the_exact_midpoint_test_finds_the_known_ties():
    bits = np.array([0x3F801000, 0x3F803000, 0x477FF000, 0x33000000, 0x3F808000, 0x7F7F8000, 0x3F800000,
                     0x477FF001, 0x7F800000], np.uint32)
    assert _exact_ties(bits, "float16").tolist() == [True, True, True, True, False, False, False, False, False]
    assert _exact_ties(bits, "bfloat16").tolist() == [False, False, False, False, True, True, False, False, False]


@pytest.mark.parametrize("twin", ["parallel", "serial"])
@pytest.mark.parametrize("target", TARGETS)
def test_bits_are_the_cast_and_ties_the_exact_midpoints(kernels, patterns, target, twin):
    got, ties = _run(getattr(kernels, f"narrow16_{twin}"), patterns, target)
    want = _cast(patterns, target)
    nan = np.isnan(patterns.view(np.float32))
    assert nan.sum() > 1000 and np.array_equal(got[~nan], want[~nan])
    # a NaN stays a NaN of its sign, quiet: float16's one quiet NaN, bfloat16's high half
    # with the quiet bit set (the casts keep other payloads: NumPy's, or none: ml_dtypes')
    sign = (patterns[nan] >> np.uint32(16)) & np.uint32(0x8000)
    quiet = sign | np.uint32(0x7E00) if target == "float16" else (patterns[nan] >> np.uint32(16)) | np.uint32(0x40)
    assert np.array_equal(got[nan], quiet.astype(np.uint16))
    assert np.array_equal(want[nan] & np.uint16(0x8000), got[nan] & np.uint16(0x8000))
    exact = _exact_ties(patterns, target)
    assert exact.sum() > 2000 and np.array_equal(ties, exact)


@pytest.mark.parametrize("target", TARGETS)
def test_the_parallel_kernel_gives_the_serial_bits(kernels, patterns, target):
    for n in (patterns.size, patterns.size - 5, 1_000_003, 4099, 17, 16, 15, 1, 0):
        bits = patterns[patterns.size - n:]  # ends aligned, starts not
        par, ser = _run(kernels.narrow16_parallel, bits, target), _run(kernels.narrow16_serial, bits, target)
        assert np.array_equal(par[0], ser[0]) and np.array_equal(par[1], ser[1]), n


@pytest.mark.parametrize("target", TARGETS)
def test_the_backend_operation_runs_the_kernels(kernels, patterns, target):
    """numba's ``narrow16`` operation (the serial kernel below its size gate, the parallel one
    above) on a few sizes, against the serial kernel's bits and ties."""
    module = _backends.load("numba")
    for n in (5, 100_000, patterns.size):
        bits = patterns[:n]
        got = np.empty(n, np.uint16), np.empty(n, np.bool_)
        module.narrow16(bits, target == "bfloat16", *got)
        want = _run(kernels.narrow16_serial, bits, target)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), n
