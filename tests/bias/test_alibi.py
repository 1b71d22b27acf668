"""fastpe.alibi: slopes and biases against mpmath, the exact reference, HF's BLOOM and MPT.

Exact values come from mpmath at ~300 bits, rounded to each format by the oracle's
:func:`~support.oracle.mp_round` (from mpmath's binary form, half-to-even): independent of
:mod:`fastpe._exact.bias`, which brackets the slope in :mod:`decimal`.  Sizes stay small
where the python backend runs; the large cases use the compiled backends only.
"""

from __future__ import annotations

import importlib.util
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from fastpe import _backends, _dtypes, alibi
from fastpe._plans import alibi as aplan
from fastpe._exact.bias import alibi_distance, alibi_value
from conftest import AVAILABLE, FAST
from support.cli import same_bits
from support.inputs import check_out_contract, near_midpoints
from support.oracle import alibi_bias, alibi_slope, mp_round

mpmath.mp.prec = 300

FORMS = alibi.FORMS
F32 = _dtypes.FORMATS["float32"]


def k_for(form: str, q_len: int) -> int:
    """A key length for ``form``: longer than the queries, or shorter where the form allows."""
    return q_len + 3 if form in ("symmetric", "causal") else max(1, q_len - 2)


# ------------------------------------------------------------------------------ slopes


@pytest.mark.any_backend
def test_slopes_of_twelve_heads_follow_the_paper():
    want = [2.0**-k for k in range(1, 9)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]
    got = alibi.slopes(12)
    assert got.dtype == np.float32 and got.shape == (12,)
    np.testing.assert_array_equal(got[:8], np.array(want[:8], dtype=np.float32))  # exact powers
    for h in range(8, 12):  # irrational: the float32 nearest the real value
        assert float(got[h]) == mp_round(mpmath.power(2, -mpmath.mpf(2 * (h - 8) + 1) / 2), "float32")
    np.testing.assert_allclose(got, want, rtol=2**-24)


@pytest.mark.any_backend
@pytest.mark.parametrize("max_bias", [8.0, 7.3, 0.1, 16.0, 64.0])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_slopes_are_correctly_rounded(max_bias, dtype):
    for n_heads in [1, 2, 3, 5, 8, 12, 24, 40, 64, 71]:
        got = alibi.slopes(n_heads, max_bias, dtype=dtype)
        assert got.dtype == np.dtype(dtype)
        want = [mp_round(alibi_slope(n_heads, max_bias, h), dtype) for h in range(n_heads)]
        np.testing.assert_array_equal(got.astype(np.float64), want)


@pytest.mark.any_backend
def test_slopes_bfloat16():
    pytest.importorskip("ml_dtypes")
    got = alibi.slopes(24, dtype="bfloat16")
    want = [mp_round(alibi_slope(24, 8.0, h), "bfloat16") for h in range(24)]
    np.testing.assert_array_equal(got.astype(np.float64), want)


@pytest.mark.any_backend
@pytest.mark.parametrize("n_heads, max_bias", [(65535, 8.0), (65536, 64.0), (40000, 7.3), (65535, alibi.MIN_BIAS)])
def test_slopes_of_the_most_heads(n_heads, max_bias):
    """The largest head counts (one decimal exponential and a chain of 2**17 products, where
    a decimal power per head took seconds): a sample of heads, the exact ones among them, in
    every dtype, against mpmath; the split words within 2**-114 of the slope."""
    dtypes = ["float32", "float64", "float16"] + (["bfloat16"] if importlib.util.find_spec("ml_dtypes") else [])
    got = {name: alibi.slopes(n_heads, max_bias, dtype=name) for name in dtypes}
    words = aplan.slope_words(n_heads, max_bias)
    m = 1 << (n_heads.bit_length() - 1)
    exact = [h for h in range(n_heads) if (Fraction(max_bias) * (h + 1) / m if h < m else 0).denominator == 1]
    rng = np.random.default_rng(n_heads)
    for h in sorted(set(rng.integers(0, n_heads, 40).tolist()) | {0, m - 1, n_heads - 1} | set(exact[:5])):
        s = alibi_slope(n_heads, max_bias, h)
        for name in dtypes:
            assert float(got[name][h]) == mp_round(s, name), (h, name)
        total = sum(mpmath.mpf(float(w)) for w in words[:, h])
        assert abs(total / s - 1) <= mpmath.mpf(2) ** -114


@pytest.mark.any_backend
def test_slopes_undecided_by_the_chain_take_the_reference(monkeypatch):
    """A head whose bracket straddles a rounding boundary (forced here by a huge radius:
    float16's subnormal slopes take the bracket) is the reference's."""
    want = [mp_round(alibi_slope(40, 30.3, h), "float16") for h in range(40)]
    import fastpe._exact.bias as ref

    asked = []
    slope = ref.slope
    monkeypatch.setattr(alibi, "_RADIUS_SHIFT", 1)
    monkeypatch.setattr(ref, "slope", lambda *a: (asked.append(a), slope(*a))[1])
    np.testing.assert_array_equal(alibi.slopes(40, 30.3, dtype="float16").astype(np.float64), want)
    assert len(asked) >= 5


# ------------------------------------------------------------------- values, every backend


@pytest.mark.any_backend
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("n_heads, q_len, max_bias", [(5, 6, 8.0), (12, 4, 7.3), (1, 3, 0.5), (16, 5, 64.0)])
def test_every_backend_matches_mpmath(form, n_heads, q_len, max_bias, backend):
    k_len = k_for(form, q_len)
    for name in ("float32", "float64"):
        got = alibi.bias(n_heads, q_len, k_len, form=form, max_bias=max_bias, dtype=name, backend=backend)
        want = alibi_bias(n_heads, q_len, k_len, form, max_bias, name)
        assert got.shape == (n_heads, q_len, k_len) and got.dtype == np.dtype(name)
        np.testing.assert_array_equal(got.astype(np.float64), want)
        # a zero distance is +0.0 (never -0.0)
        assert not np.signbit(got[got == 0]).any()


@pytest.mark.any_backend
@pytest.mark.parametrize("form", FORMS)
def test_backends_write_the_same_bits_as_the_reference(form, backend):
    q_len = 7
    k_len = k_for(form, q_len)
    for dtype in ("float32", "float64"):
        want = alibi.bias(13, q_len, k_len, form=form, max_bias=5.5, dtype=dtype, backend="python")
        got = alibi.bias(13, q_len, k_len, form=form, max_bias=5.5, dtype=dtype, backend=backend)
        assert same_bits(got, want)


@pytest.mark.any_backend
def test_defaults_and_forms_by_definition(backend):
    """k_len defaults to q_len; causal = symmetric below the diagonal and -inf above;
    mpt = bloom shifted by the last key; symmetric is -|i - j| times the slope."""
    sym = alibi.bias(6, 5, backend=backend)
    assert sym.shape == (6, 5, 5)
    causal = alibi.bias(6, 5, form="causal", backend=backend)
    lower = np.tril(np.ones((5, 5), bool))
    np.testing.assert_array_equal(causal[:, lower], sym[:, lower])
    assert np.isneginf(causal[:, ~lower]).all()
    s = alibi.slopes(6).astype(np.float64)
    i, j = np.indices((5, 5))
    np.testing.assert_array_equal(sym, (-s[:, None, None] * np.abs(i - j)).astype(np.float32))  # exact: powers of 2
    bloom = alibi.bias(6, 2, 9, form="bloom", backend=backend)
    np.testing.assert_array_equal(bloom[:, 0], bloom[:, 1])
    mpt = alibi.bias(6, 1, 9, form="mpt", backend=backend)
    np.testing.assert_array_equal(mpt[:, 0, -1], 0.0)
    np.testing.assert_array_equal(mpt[:, 0, :], (s[:, None] * (np.arange(9) - 8)).astype(np.float32))


@pytest.mark.any_backend
def test_queries_sit_at_the_end_of_the_keys(backend):
    """q_len < k_len: query i is key position i + k_len - q_len (decoding with a cache)."""
    full = alibi.bias(5, 9, form="causal", backend=backend)
    tail = alibi.bias(5, 3, 9, form="causal", backend=backend)
    np.testing.assert_array_equal(tail, full[:, 6:, :])
    step = alibi.bias(5, 1, 9, form="symmetric", backend=backend)
    np.testing.assert_array_equal(step[:, 0], alibi.bias(5, 9, backend=backend)[:, 8])


# -------------------------------------------------------------------------- hard cases


def _line(backend: str, words, dtype, first: int, length: int) -> np.ndarray:
    """The line kernel of a compiled backend, for distances ``first .. first + length - 1``."""
    line = np.empty((words.shape[1], length), dtype=dtype)
    if backend == "numba":
        from fastpe._backends.numba import bias

        bias.alibi_line_serial(words, line.dtype == np.float32, first, 1 + (length - 1) // bias.LINE_BLOCK, line)
    else:
        from fastpe._backends.cython import _ext_bias

        _ext_bias.alibi_line(words, line, 0, -1, first)
    return line


COMPILED = [b for b in ("numba", "cython") if b in AVAILABLE]


@pytest.mark.any_backend
@pytest.mark.skipif(not COMPILED, reason="no compiled backend")
@pytest.mark.parametrize("name, bits", [("float32", 24), ("float64", 53)])
def test_products_nearest_a_midpoint_are_correctly_rounded(name, bits):
    """For irrational slopes, distances below 2**32 whose product lies nearest a rounding
    midpoint (convergents): float32(double(slope) * n) is wrong on some, fastpe on none."""
    naive_wrong = 0
    cases = 0
    # 2**-16 (the least max_bias): slopes within 2**-17 of 1
    for n_heads, max_bias in [(12, 8.0), (12, 7.3), (6, 5.0), (24, 6.5), (3, alibi.MIN_BIAS)]:
        words = aplan.slope_words(n_heads, max_bias)
        for h in range(n_heads):
            s = alibi_slope(n_heads, max_bias, h)
            if mpmath.isint(mpmath.log(s, 2)):
                continue
            for n in near_midpoints(s, bits):
                want = mp_round(s * n, name)
                assert alibi_value(n_heads, max_bias, h, n, _dtypes.FORMATS[name]) == want
                for backend in COMPILED:
                    got = _line(backend, words[:, h:h + 1].copy(), name, n, 1)[0, 0]
                    assert float(got) == want, (backend, n_heads, max_bias, h, n)
                if name == "float32":
                    naive_wrong += float(np.float32(float(s) * n)) != want
                cases += 1
    assert cases > 300
    if name == "float32":
        assert naive_wrong > 0  # the cases are hard: one double product does not do


@pytest.mark.any_backend
@pytest.mark.skipif(not COMPILED, reason="no compiled backend")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_largest_distances(dtype):
    """Distances just below 2**31 and 2**32, 13 heads (not a power of two), against the
    reference; numba and cython identical."""
    words = aplan.slope_words(13, 8.0)
    fmt = _dtypes.FORMATS[dtype]
    for first in (2**31 - 40, 2**32 - 80):
        lines = [_line(b, words, dtype, first, 80) for b in COMPILED]
        assert all(same_bits(lines[0], other) for other in lines[1:])
        for h in range(13):
            for k in range(0, 80, 7):
                assert float(lines[0][h, k]) == alibi_value(13, 8.0, h, first + k, fmt)
        assert float(lines[0][0, -1]) == mp_round(alibi_slope(13, 8.0, 0) * (first + 79), dtype)


@pytest.mark.any_backend
@pytest.mark.skipif(len(COMPILED) < 2, reason="needs both compiled backends")
def test_lines_of_many_slopes_are_the_same_bits_on_both_backends():
    """The C float32 line rounds one double product where it is sure of the result and
    takes the double-double path (numba's, for every value) where it is not: 77 slopes of
    several plans, 20,000 distances from 0, from 2**24 (float32 midpoints among the
    products) and just below 2**32, bit for bit; and at the convergents, where the first
    pass must hand the value on, the test above."""
    plans = [(64, 8.0), (12, 7.3), (1, 0.5)]
    for n_heads, max_bias in plans:
        words = aplan.slope_words(n_heads, max_bias)
        for first in (0, 2**24 - 7, 2**32 - 20_000):
            lines = [_line(b, words, "float32", first, 20_000) for b in COMPILED]
            assert same_bits(lines[0], lines[1]), (n_heads, max_bias, first)


# ---------------------------------------------------------------- parallel, numba vs C


@pytest.mark.any_backend
@pytest.mark.skipif(len(FAST) < 1, reason="no compiled backend")
@pytest.mark.parametrize("form", FORMS)
def test_large_output_takes_the_parallel_path(form, monkeypatch):
    """8 x 300 x 1024 values: the parallel kernels (numba) and several threads (cython)
    run; both backends give the same bits, checked against the reference on a sample."""
    calls = []
    expected = set(FAST)
    if "numba" in FAST:
        import numba

        from fastpe._backends.numba import bias as nb

        if numba.get_num_threads() == 1:
            expected.discard("numba")  # one thread: numba always runs the serial twin

        fill = nb.alibi_fill_parallel
        monkeypatch.setattr(nb, "alibi_fill_parallel", lambda *a: (calls.append("numba"), fill(*a)))
    if "cython" in FAST:
        from fastpe._backends import cython as _cython

        run_blocks = _cython._run_blocks
        monkeypatch.setattr(_cython, "threads", lambda: 2)
        monkeypatch.setattr(_cython, "_run_blocks", lambda run, blocks: (calls.append("cython"), run_blocks(run, blocks)))
    k_len = 1024
    q_len = 300 if form in ("symmetric", "causal") else 1100
    results = [alibi.bias(8, q_len, k_len, form=form, max_bias=7.0, backend=b) for b in FAST]
    assert all(same_bits(results[0], r) for r in results[1:])
    assert set(calls) == expected
    rng = np.random.default_rng(3)
    got = results[0]
    for h, i, j in zip(rng.integers(0, 8, 60), rng.integers(0, q_len, 60), rng.integers(0, k_len, 60)):
        n = alibi_distance(form, q_len, k_len, int(i), int(j))
        want = -math.inf if n is None else alibi_value(8, 7.0, int(h), n, F32)
        assert float(got[h, i, j]) == want


# --------------------------------------------------------------------- narrow dtypes


def _tie_cases(name: str, n_keys: int):
    """A bloom row of 12 heads long enough to hold float32 values that are ties in ``name``;
    returns the float32 bias, the narrow one, and the flat indices of the ties."""
    x32 = alibi.bias(12, 1, n_keys, form="bloom", max_bias=7.3, backend=FAST[0])
    got = alibi.bias(12, 1, n_keys, form="bloom", max_bias=7.3, dtype=name, backend=FAST[0])
    return x32, got, _dtypes.narrow_ties(x32, _dtypes.FORMATS[name])


@pytest.mark.any_backend
@pytest.mark.skipif(not FAST, reason="needs a compiled backend for the long rows")
@pytest.mark.parametrize("name, n_keys", [("float16", 20000), ("bfloat16", 200000)])
def test_narrow_dtypes_resolve_ties_by_the_exact_value(name, n_keys):
    if name == "bfloat16":
        pytest.importorskip("ml_dtypes")
    x32, got, ties = _tie_cases(name, n_keys)
    assert ties.size >= 8
    flat32 = x32.reshape(-1)
    flat = got.reshape(-1).astype(np.float64)
    naive = flat32.astype(got.dtype).astype(np.float64)
    differ = 0
    for idx in ties.tolist():
        h, j = divmod(idx, n_keys)
        want = mp_round(alibi_slope(12, 7.3, h) * j, name)
        assert flat[idx] == want
        differ += naive[idx] != want
    assert differ > 0  # round-half-even of the float32 would have been wrong there
    # and everywhere else the plain narrowing of the (correctly rounded) float32
    rest = np.ones(flat.size, bool)
    rest[ties] = False
    np.testing.assert_array_equal(flat[rest], naive[rest])


@pytest.mark.any_backend
@pytest.mark.parametrize("form", FORMS)
def test_float16_every_backend(form, backend):
    k_len = k_for(form, 5)
    got = alibi.bias(7, 5, k_len, form=form, dtype="float16", max_bias=3.3, backend=backend)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got.astype(np.float64), alibi_bias(7, 5, k_len, form, 3.3, "float16"))


def _narrow16(backend: str):
    """The backend's narrow16 operation (float32 bits to 16-bit bits, flagging the ties)."""
    return _backends.resolve(backend)[1].narrow16


@pytest.mark.any_backend
@pytest.mark.skipif(not COMPILED, reason="no compiled backend")
@pytest.mark.parametrize("name, bits", [("float16", 11), ("bfloat16", 8)])
def test_narrow_products_nearest_a_tie_are_correctly_rounded(name, bits):
    """The distances whose products come nearest a float16 (bfloat16) midpoint -- the
    float32 there is a tie, the exact value a hair off it -- through each compiled line
    kernel and the narrowing: every value the mpmath rounding of the exact product, where
    round-half-even of the float32 is wrong on some."""
    if name == "bfloat16":
        pytest.importorskip("ml_dtypes")
    dtype = _dtypes.resolve(name)
    fmt = _dtypes.FORMATS[name]
    half_even_wrong = cases = 0
    for n_heads, max_bias in [(12, 8.0), (12, 7.3), (6, 5.0), (24, 6.5)]:
        words = aplan.slope_words(n_heads, max_bias)
        for h in range(n_heads):
            s = alibi_slope(n_heads, max_bias, h)
            if mpmath.isint(mpmath.log(s, 2)):
                continue
            for n in near_midpoints(s, bits):
                if s * n > 2**16:  # float16 past its largest midpoint (65520): inf either way
                    break
                want = mp_round(s * n, name)
                assert alibi_value(n_heads, max_bias, h, n, fmt) == want
                got = []
                for backend in COMPILED:
                    line = _line(backend, words, "float32", n, 1)
                    narrowed = aplan.narrow_line(_narrow16(backend), alibi_value, n_heads, max_bias, line, dtype, first=n)
                    got.append(float(narrowed[h:h + 1, 0].view(dtype)[0]))
                assert got == [want] * len(COMPILED), (n_heads, max_bias, h, n)
                with np.errstate(over="ignore"):  # 65520 and up: inf
                    half_even_wrong += float(line[h, 0].astype(dtype)) != want
                cases += 1
    assert cases > 300
    assert half_even_wrong > 0  # the float32 was a tie there, and the exact value decided


@pytest.mark.any_backend
@pytest.mark.skipif(not FAST, reason="needs a compiled backend")
def test_narrow_ties_too_near_to_call_go_to_the_reference(monkeypatch):
    """A tie the double-double cannot settle (forced here: every one) is decided by the exact
    reference, with the same values as the double-double's."""
    want = alibi.bias(12, 1, 20000, form="bloom", max_bias=7.3, dtype="float16", backend=FAST[0])
    import fastpe._exact.bias as ref

    asked = []
    value = ref.alibi_value
    monkeypatch.setattr(aplan, "_TIE_MARGIN", 1.0)
    monkeypatch.setattr(ref, "alibi_value", lambda *a: (asked.append(a), value(*a))[1])
    got = alibi.bias(12, 1, 20000, form="bloom", max_bias=7.3, dtype="float16", backend=FAST[0])
    assert len(asked) >= 8 and same_bits(got, want)


@pytest.mark.any_backend
@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_narrow_exact_slopes_round_true_ties_to_even(name, fast_backend):
    """Slopes that are powers of two: a product that is a 16-bit midpoint *is* the exact
    value, so round-half-even is right there; float32 values rounded from a longer exact
    product (distances beyond 2**24 in bfloat16's range) go the exact value's way."""
    if name == "bfloat16":
        pytest.importorskip("ml_dtypes")
    n_keys = 5000 if fast_backend == "python" else 70000
    got = alibi.bias(8, 1, n_keys, form="bloom", max_bias=8.0, dtype=name, backend=fast_backend)
    j = np.arange(n_keys)
    for h in range(8):  # slope 2**-(h + 1): the product is exact in float64
        exact = np.ldexp(j.astype(np.float64), -(h + 1))
        np.testing.assert_array_equal(got[h, 0].astype(np.float64), exact.astype(got.dtype).astype(np.float64))
    ties = _dtypes.narrow_ties(alibi.bias(8, 1, n_keys, form="bloom", max_bias=8.0, backend=fast_backend), _dtypes.FORMATS[name])
    assert ties.size > 100


@pytest.mark.any_backend
@pytest.mark.skipif(not FAST, reason="needs a compiled backend")
@pytest.mark.parametrize("name", ["float16", "bfloat16"])
@pytest.mark.parametrize("form", FORMS)
def test_narrow_large_output_every_compiled_backend(name, form):
    """6 x 300 x 1500 values (the parallel paths): numba and cython give the same bits, each
    the reference's value on a sample; a zero distance is +0.0, and a non-zero one whose
    value rounds to zero keeps its sign (float16 at max_bias 64)."""
    if name == "bfloat16":
        pytest.importorskip("ml_dtypes")
    q_len, k_len = (300, 1500) if form in ("symmetric", "causal") else (1500, 300)
    fmt = _dtypes.FORMATS[name]
    for max_bias in (7.0, 64.0):
        results = [alibi.bias(6, q_len, k_len, form=form, max_bias=max_bias, dtype=name, backend=b) for b in FAST]
        assert all(same_bits(results[0], r) for r in results[1:])
        got = results[0]
        rng = np.random.default_rng(11)
        for h, i, j in zip(rng.integers(0, 6, 80), rng.integers(0, q_len, 80), rng.integers(0, k_len, 80)):
            n = alibi_distance(form, q_len, k_len, int(i), int(j))
            want = -math.inf if n is None else alibi_value(6, max_bias, int(h), n, fmt)
            assert float(got[h, i, j]) == want
            assert bool(np.signbit(got[h, i, j])) == (math.copysign(1.0, want) < 0)
        for i in (0, q_len - 1):
            distance = np.array([alibi_distance(form, q_len, k_len, i, j) or 0 for j in range(k_len)])
            zero = got[:, i] == 0  # (heads, keys)
            assert zero.any()
            np.testing.assert_array_equal(np.signbit(got[:, i][zero]), np.broadcast_to(distance < 0, zero.shape)[zero])


@pytest.mark.any_backend
def test_narrow_output_needs_no_scratch_of_its_size(fast_backend):
    """float16 and bfloat16 are spread from one narrowed line per head: the memory a call
    takes is the output and little more (it was a float32 copy, its flags and more: 10x)."""
    import tracemalloc

    for name in ("float16", "bfloat16"):
        if name == "bfloat16" and importlib.util.find_spec("ml_dtypes") is None:
            continue
        shape = (4, 256, 256) if fast_backend != "python" else (2, 16, 64)
        alibi.bias(*shape, dtype=name, backend=fast_backend)  # compiled, plans cached
        tracemalloc.start()
        try:
            out = alibi.bias(*shape, dtype=name, backend=fast_backend)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 1.5 * out.nbytes + 65536, (name, peak, out.nbytes)


# ---------------------------------------------------------------------------- HF parity


def _hf_slope_powers(n_heads: int) -> np.ndarray:
    """The integer power of its float32 base BLOOM raises for each head's slope."""
    closest = 2 ** int(math.floor(math.log2(n_heads)))
    powers = list(range(1, closest + 1)) + list(range(1, 2 * (n_heads - closest), 2))
    return np.array(powers, dtype=np.float64)


@pytest.mark.any_backend
@pytest.mark.parametrize("n_heads", [1, 2, 3, 5, 8, 12, 16, 30, 32, 48, 64, 71])
def test_bloom_parity(n_heads, fast_backend):
    """HF's build_alibi_tensor: float32 ``base ** k`` (the base rounded once: relative error
    up to ``k * 2**-24`` plus pow's own ULP) times the position, rounded once more."""
    torch = pytest.importorskip("torch")
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    length = 1500
    hf = bloom.build_alibi_tensor(torch.ones(1, length, dtype=torch.long), n_heads, torch.float32).numpy()
    ours = alibi.bias(n_heads, 1, length, form="bloom", backend=fast_backend)
    assert hf.shape == (n_heads, 1, length)
    bound = (_hf_slope_powers(n_heads)[:, None] + 3) * 2.0**-24 * np.abs(ours[:, 0].astype(np.float64))
    assert (np.abs(hf[:, 0].astype(np.float64) - ours[:, 0]) <= bound).all()


@pytest.mark.any_backend
@pytest.mark.parametrize("n_heads", [1, 2, 3, 5, 8, 12, 16, 30, 32, 48, 64, 71])
def test_mpt_parity(n_heads, fast_backend):
    """HF's build_mpt_alibi_tensor: ``1 / 2**x`` and the product in float32, a few ULPs; the
    same slope order as the paper's for any head count."""
    pytest.importorskip("torch")
    mpt = pytest.importorskip("transformers.models.mpt.modeling_mpt")
    length = 1500
    hf = mpt.build_mpt_alibi_tensor(n_heads, length, 8).numpy()
    ours = alibi.bias(n_heads, 1, length, form="mpt", backend=fast_backend)
    assert hf.shape == (n_heads, 1, length)
    err = np.abs(hf.astype(np.float64) - ours)
    assert (err <= 4 * 2.0**-24 * np.abs(ours.astype(np.float64))).all()


# ---------------------------------------------------------------------------- out= and errors


@pytest.mark.any_backend
def test_out_is_filled_in_place(backend):
    for dtype in ("float32", "float64", "float16"):
        out = np.full((3, 4, 6), np.nan, dtype=dtype)
        got = alibi.bias(3, 4, 6, form="causal", dtype=dtype, out=out, backend=backend)
        assert got is out
        assert same_bits(out, alibi.bias(3, 4, 6, form="causal", dtype=dtype, backend="python"))


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "out, error, match",
    [
        (np.empty((3, 4, 5), np.float32), ValueError, r"out must have shape \(3, 4, 6\)"),
        (np.empty((3, 4, 6), np.int8), TypeError, "out must have dtype float32, float64, float16"),
        (np.empty((3, 6, 4), np.float32).transpose(0, 2, 1), ValueError, "C-contiguous"),
        ([[[0.0]]], TypeError, "out must be a numpy.ndarray"),
    ],
)
def test_bad_out(out, error, match):
    with pytest.raises(error, match=match):
        alibi.bias(3, 4, 6, out=out)


@pytest.mark.any_backend
def test_bias_out_contract(backend):
    """out= as every fastpe out=: filled, returned, the no-out array's bits; dtype=None means
    out's dtype, another dtype beside it is refused; nothing written when refused."""
    for form in ("causal", "mpt"):
        check_out_contract(lambda **kw: alibi.bias(3, 4, 6, form=form, backend=backend, **kw), other_dtype="float64",
                           bad_input=lambda out: alibi.bias(3, 4, 6, form=form, max_bias=0.0, out=out))
    out = np.empty((3, 4, 6), np.float16)
    assert alibi.bias(3, 4, 6, out=out, backend=backend) is out
    assert same_bits(out, alibi.bias(3, 4, 6, dtype="float16", backend=backend))


@pytest.mark.any_backend
def test_slopes_out_contract():
    for n_heads, max_bias in ((1, 8.0), (12, 8.0), (7, 0.5)):
        want = check_out_contract(lambda **kw: alibi.slopes(n_heads, max_bias, **kw), other_dtype="float64",
                                  bad_input=lambda out: alibi.slopes(n_heads, -1.0, out=out))
        assert want.dtype == np.float32 and want.shape == (n_heads,)
    out = np.empty(4, _dtypes.resolve("bfloat16"))
    assert alibi.slopes(4, out=out) is out
    assert same_bits(out, alibi.slopes(4, dtype="bfloat16"))


@pytest.mark.any_backend
def test_one_vocabulary():
    """bias and slopes take dtype=None and out=None; slopes runs no kernel and takes no backend."""
    import inspect

    bias = inspect.signature(alibi.bias).parameters
    assert list(bias)[-3:] == ["dtype", "out", "backend"]
    slopes = inspect.signature(alibi.slopes).parameters
    assert list(slopes) == ["n_heads", "max_bias", "dtype", "out"]
    for params in (bias, slopes):
        assert params["dtype"].default is None and params["out"].default is None
    with pytest.raises(TypeError, match="unexpected keyword argument 'backend'"):
        alibi.slopes(4, backend="python")


@pytest.mark.any_backend
def test_read_only_out():
    out = np.empty((2, 3, 3), np.float32)
    out.setflags(write=False)
    with pytest.raises(ValueError, match="out is read-only"):
        alibi.bias(2, 3, out=out)


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(n_heads=0), ValueError, "n_heads must be >= 1"),
        (dict(n_heads=2.0), TypeError, "n_heads must be an integer"),
        (dict(n_heads=True), TypeError, "n_heads must be an integer"),
        (dict(n_heads=65537), ValueError, "n_heads must be <= 65536"),
        (dict(q_len=0), ValueError, "q_len must be >= 1"),
        (dict(q_len="4"), TypeError, "q_len must be an integer"),
        (dict(k_len=2**32 + 1), ValueError, "k_len must be <= 4294967296"),
        (dict(k_len=3), ValueError, "k_len must be >= q_len for form 'symmetric'"),
        (dict(k_len=3, form="causal"), ValueError, "k_len must be >= q_len for form 'causal'"),
        (dict(form="alibi"), ValueError, "form must be one of"),
        (dict(form=None), TypeError, "form must be a string"),
        (dict(max_bias=0.0), ValueError, "max_bias must be > 0"),
        (dict(max_bias=-8), ValueError, "max_bias must be > 0"),
        (dict(max_bias=float("nan")), ValueError, "max_bias must be finite"),
        (dict(max_bias=float("inf")), ValueError, "max_bias must be finite"),
        (dict(max_bias=65.0), ValueError, "max_bias must be <= 64"),
        (dict(max_bias="8"), TypeError, "max_bias must be a real number"),
        (dict(max_bias=np.array(8.0)), TypeError, "max_bias must be a real number"),
        (dict(max_bias=True), TypeError, "max_bias must be a real number"),
        (dict(max_bias=10**400), ValueError, r"max_bias must be <= 64, got 1\.000e\+400$"),
        (dict(max_bias=-(10**400)), ValueError, r"max_bias must be > 0, got -1\.000e\+400$"),
        (dict(max_bias=Fraction(10**400, 3)), ValueError, r"max_bias must be <= 64, got 3\.333e\+399$"),
        (dict(max_bias=Fraction(1, 10**400)), ValueError, r"max_bias must be >= 2\*\*-16 .*got 1\.000e-400$"),
        (dict(max_bias=1e-300), ValueError, r"max_bias must be >= 2\*\*-16"),
        (dict(max_bias=2.0**-16 * (1 - 2**-53)), ValueError, r"max_bias must be >= 2\*\*-16"),
        (dict(max_bias=np.float16("inf")), ValueError, "max_bias must be finite"),
        (dict(dtype="int8"), TypeError, "dtype must be one of"),
        (dict(q_len=2**20, k_len=2**21, n_heads=2**10), ValueError, r"n_heads \* q_len \* k_len must be <= 2\*\*40"),
        (dict(backend="cuda"), ValueError, "backend 'cuda' is not a fastpe backend"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    args = dict(n_heads=4, q_len=5, k_len=None)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        alibi.bias(args.pop("n_heads"), args.pop("q_len"), args.pop("k_len"), **args)


@pytest.mark.any_backend
def test_long_double_beyond_the_float_range():
    big = np.longdouble(2) ** 2000  # inf as a float, where long double is wider than double
    if not np.isfinite(big):
        pytest.skip("long double is double here")
    with pytest.raises(ValueError, match="max_bias must be <= 64"):
        alibi.bias(2, 3, max_bias=big)
    with pytest.raises(ValueError, match="max_bias must be > 0"):
        alibi.slopes(2, -big)


@pytest.mark.any_backend
def test_max_bias_bounds_and_exact_types(backend):
    """2**-16 and 64 are accepted, as are ints, fractions and NumPy scalars (each taken as its
    nearest float)."""
    want = alibi.bias(3, 4, max_bias=8.5, backend=backend)
    for value in (Fraction(17, 2), np.float32(8.5), np.longdouble(8.5)):
        assert same_bits(alibi.bias(3, 4, max_bias=value, backend=backend), want)
    assert same_bits(alibi.bias(3, 4, max_bias=np.uint8(8), backend=backend), alibi.bias(3, 4, backend=backend))
    for edge in (alibi.MIN_BIAS, alibi.MAX_BIAS):
        np.testing.assert_array_equal(alibi.slopes(3, edge, dtype="float64"),
                                      [mp_round(alibi_slope(3, edge, h), "float64") for h in range(3)])


@pytest.mark.any_backend
def test_no_array_argument_can_alias_out():
    """bias(..., out=) takes no input array: every other argument is a number, and a 0-d
    array (a view of ``out``, say) is refused before anything is written."""
    out = np.full((2, 3, 3), np.nan, dtype=np.float32)
    view = out.reshape(-1)[:1].reshape(())
    for kwargs in (dict(max_bias=view), dict(n_heads=view), dict(q_len=np.array(3))):
        args = dict(n_heads=2, q_len=3, max_bias=8.0, out=out)
        args.update(kwargs)
        with pytest.raises(TypeError, match="must be a"):
            alibi.bias(args.pop("n_heads"), args.pop("q_len"), **args)
    assert np.isnan(out).all()


@pytest.mark.any_backend
def test_short_keys_are_fine_where_the_form_ignores_the_query(backend):
    for form in ("bloom", "mpt"):
        got = alibi.bias(3, 5, 2, form=form, backend=backend)
        assert got.shape == (3, 5, 2)
        np.testing.assert_array_equal(got, np.broadcast_to(got[:, :1], got.shape))


@pytest.mark.any_backend
def test_bad_slope_arguments():
    with pytest.raises(ValueError, match="n_heads must be >= 1"):
        alibi.slopes(0)
    with pytest.raises(ValueError, match="max_bias must be > 0"):
        alibi.slopes(4, 0)
    with pytest.raises(ValueError, match="max_bias must be <= 64"):
        alibi.slopes(4, 10**400)
    with pytest.raises(ValueError, match=r"max_bias must be >= 2\*\*-16"):
        alibi.slopes(4, 2**-20)
    with pytest.raises(TypeError, match="dtype must be one of"):
        alibi.slopes(4, dtype="int32")


def test_lazy_attribute():
    import fastpe

    assert fastpe.alibi is alibi
    assert _backends.resolve(None)[0] in AVAILABLE


# --------------------------------------------------------------------------- names in any case


def test_names_in_any_case_are_the_canonical_bits(backend):
    """form and dtype (and backend) names in any case, spaces around them aside, as every
    family takes them; relative's int dtypes too."""
    from fastpe import relative

    for form in aplan.FORMS:
        want = alibi.bias(3, 4, 5, form=form, dtype="float16", backend=backend)
        for spelled in (form.upper(), f" {form.title()} "):
            assert same_bits(alibi.bias(3, 4, 5, form=spelled, dtype=" Float16", backend=backend.upper()), want)
    assert same_bits(alibi.slopes(6, dtype="BFloat16 "), alibi.slopes(6, dtype="bfloat16"))
    with pytest.raises(ValueError, match="form must be one of .*, got 'cau sal'"):
        alibi.bias(2, 3, form="cau sal")
    want = relative.t5_bucket_matrix(4, 6, dtype="int32", backend=backend)
    assert same_bits(relative.t5_bucket_matrix(4, 6, dtype=" INT32 ", backend=backend.title()), want)


@pytest.mark.any_backend
@pytest.mark.skipif(not COMPILED, reason="no compiled backend")
def test_midpoint_products_inside_long_lines():
    """The C float32 line rounds 16 distances a turn in its vector loop and hands a product
    near a float32 midpoint on to the double-double path: each convergent distance sits at
    several places of a 37-value line (in the vector loop and in its scalar tail), and is
    the correctly rounded product there, the whole line the same bits on both compiled
    backends; the one rounded double product is wrong on some of them."""
    length = 37
    one_product_wrong = 0
    cases = 0
    for n_heads, max_bias in [(12, 8.0), (12, 7.3), (24, 6.5)]:
        words = aplan.slope_words(n_heads, max_bias)
        for h in range(n_heads):
            s = alibi_slope(n_heads, max_bias, h)
            if mpmath.isint(mpmath.log(s, 2)):
                continue
            w = words[:, h:h + 1].copy()
            sd = ((w[0, 0] + w[1, 0]) + w[2, 0]) + w[3, 0]
            for n in near_midpoints(s, 24):
                want = mp_round(s * n, "float32")
                one_product_wrong += float(np.float32(float(n) * sd)) != want
                for at in (0, 5, 19, 36):
                    first = n - at
                    if first < 0 or first + length > alibi.MAX_LEN:
                        continue
                    lines = [_line(b, w, "float32", first, length) for b in COMPILED]
                    assert all(same_bits(lines[0], other) for other in lines[1:]), (n_heads, h, n, at)
                    assert float(lines[0][0, at]) == want, (n_heads, max_bias, h, n, at)
                    cases += 1
    assert cases > 600
    assert one_product_wrong > 0


@pytest.mark.any_backend
def test_repeated_plain_calls_are_checked_as_the_first(backend):
    """Plain arguments (ints, a float, strings) take checks remembered per configuration:
    the same bits as NumPy scalars and fractions, which do not, and as the reference; a bad
    plain argument raises on every call, bools stay refused, ``8`` is ``8.0``."""
    want = np.array([[[alibi_value(5, 8.0, h, j, F32) for j in range(40)]] for h in range(5)], dtype=np.float32)
    for _ in range(2):
        plain = alibi.bias(5, 1, 40, form="bloom", backend=backend)
        assert plain.dtype == np.float32 and same_bits(plain, want)
        assert same_bits(alibi.bias(5, 1, 40, form=" BLOOM", max_bias=8, backend=backend), want)
        assert same_bits(alibi.bias(np.int64(5), np.int32(1), np.uint16(40), form="bloom",
                                    max_bias=Fraction(8), backend=backend), want)
        wide = alibi.bias(5, 1, 40, form="bloom", dtype="float64", backend=backend)
        assert wide.dtype == np.float64
        assert wide.tolist() == [[[alibi_value(5, 8.0, h, j, _dtypes.FORMATS["float64"]) for j in range(40)]]
                                 for h in range(5)]
        assert alibi.bias(5, 1, 40, form="bloom", backend=backend) is not plain  # a new array each call
    for _ in range(2):
        with pytest.raises(ValueError, match="n_heads must be >= 1"):
            alibi.bias(0, 1, 40, form="bloom", backend=backend)
        with pytest.raises(TypeError, match="n_heads must be an integer"):
            alibi.bias(True, 1, 40, form="bloom", backend=backend)
        with pytest.raises(TypeError, match="max_bias must be a real number"):
            alibi.bias(5, 1, 40, form="bloom", max_bias=True, backend=backend)
        with pytest.raises(ValueError, match="k_len must be >= q_len"):
            alibi.bias(5, 4, 3, form="causal", backend=backend)
        with pytest.raises(TypeError, match="dtype must be one of"):
            alibi.bias(5, 1, 40, form="bloom", dtype="int8", backend=backend)
        with pytest.raises(ValueError, match="backend 'cuda' is not a fastpe backend"):
            alibi.bias(5, 1, 40, form="bloom", backend="cuda")


@pytest.mark.any_backend
@pytest.mark.skipif("numba" not in COMPILED, reason="needs numba")
def test_numba_line_twins_agree_on_blocks():
    """numba's float32 line, parallel and serial twins, over several blocks of distances
    from 2**24 - 7 (float32 midpoints among the products; blocks below and across 2**24
    for the exact slopes) and from 0: the same bits, the reference's values on a sample,
    and cython's bits where it is built."""
    from fastpe._backends.numba import bias as nb

    length = 3 * nb.LINE_BLOCK + 5
    blocks = -(-length // nb.LINE_BLOCK)
    for n_heads, max_bias in [(13, 7.3), (16, 8.0)]:  # 16 heads at 8: every other slope exact
        words = aplan.slope_words(n_heads, max_bias)
        for first in (0, 2**24 - 7):
            lines = []
            for twin in (nb.alibi_line_parallel, nb.alibi_line_serial):
                line = np.full((n_heads, length), np.nan, dtype=np.float32)
                twin(words, True, first, blocks, line)
                lines.append(line)
            assert same_bits(lines[0], lines[1])
            if "cython" in COMPILED:
                assert same_bits(lines[0], _line("cython", words, "float32", first, length))
            for h in range(0, n_heads, 3):
                for k in (0, 1, 4095, 4096, 8191, 8192, length - 1):
                    assert float(lines[0][h, k]) == alibi_value(n_heads, max_bias, h, first + k, F32)


@pytest.mark.any_backend
@pytest.mark.skipif(not COMPILED, reason="no compiled backend")
@pytest.mark.parametrize("max_bias", [8.0, 64.0, 3.0])
def test_exact_slopes_below_and_across_2_24(max_bias):
    """Heads whose slope is a power of two (all 8 at max_bias 8 or 64, one at 3) multiply
    float32 distances in the C line while every distance is below 2**24, and take the general
    path once one is not: the reference's values either side of 2**24 (the first distance a
    float32 cannot hold, 2**24 + 1), the same bits on both compiled backends."""
    words = aplan.slope_words(8, max_bias)
    for first, length in [(0, 300), (2**24 - 299, 299), (2**24 - 150, 300), (2**24 + 1, 37)]:
        lines = [_line(b, words, "float32", first, length) for b in COMPILED]
        assert all(same_bits(lines[0], other) for other in lines[1:]), (first, length)
        for h in range(8):
            for k in range(0, length, 7):
                assert float(lines[0][h, k]) == alibi_value(8, max_bias, h, first + k, F32), (h, first + k)
