"""Sinusoid families: layouts, the half-1 denominator, timescales, dtypes, add_, fairseq.

Every backend is checked against the exact reference (fastpe._exact.sincos), the
reference against mpmath, and the conventions against the peers' published formulas
(HF Marian / M2M100 / DistilBERT, tensor2tensor) within those peers' own float error.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

import fastpe
from fastpe import _dtypes
from fastpe._plans.frequencies import Geometric

from conftest import FAST
from support.inputs import POSITION_LIMIT, check_out_contract, octave_positions
from support.oracle import geometric_frequency, mp_round, sin_cos, ulp_distance

ml_dtypes = pytest.importorskip("ml_dtypes")

LAYOUTS = ("interleaved", "halves")
DENOMINATORS = ("d", "half-1")


# ------------------------------------------------------------------ published reference values


@pytest.mark.any_backend
def test_reference_values_from_the_issue(backend):
    """The values the published formulas give, as printed (8 significant digits at most:
    0.003 stands for sin(0.003) = 0.0029999955), so compared to 2e-6."""
    got = fastpe.table(5, 2, backend=backend)[1]
    want = [0.84147096, 0.54030228, 0.025116222, 0.99968451, 6.3095731e-4]
    np.testing.assert_allclose(got, want, rtol=2e-6)
    got = fastpe.table(8, 4, layout="halves", backend=backend)[3]
    want = [0.14112001, 0.29552021, 0.0299955, 0.003, -0.9899925, 0.95533649, 0.99955003, 0.9999955]
    np.testing.assert_allclose(got, want, rtol=2e-6)
    got = fastpe.table(8, 4, layout="halves", denominator="half-1", backend=backend)[3]
    want = [0.14112, 0.1387981, 0.0064632599, 2.9999996e-4, -0.9899925, 0.99032068, 0.99997914, 0.99999994]
    np.testing.assert_allclose(got, want, rtol=2e-6)


def _mp_sin_cos(p, freqs: Geometric, k: int):
    """The oracle's sine and cosine of ``p`` times frequency ``k`` of ``freqs``, at 60 digits."""
    with mpmath.workdps(60):
        return sin_cos(p, geometric_frequency(freqs, k))


@pytest.mark.any_backend
@pytest.mark.parametrize("fmt", ["float32", "float16", "bfloat16", "float64"])
def test_reference_against_mpmath(fmt):
    """The reference's values are mpmath's, correctly rounded into every format."""
    from fastpe._exact import sincos as ref

    cases = [
        (Geometric(4, 3.0, 10000.0), [1, 3, 1000, 123456789, POSITION_LIMIT - 1]),
        (Geometric(5, 2.5, 1e6, 0.5), [2, 77, 2**31 + 5]),
        (Geometric(3, 1.0, 10000.0, 1.0, 3.0), [0.5, -2.25, 999.123, 3e9 + 0.5]),  # real positions
    ]
    for freqs, xs in cases:
        for x in xs:
            for k in range(freqs.count):
                s, c = ref.sin_cos(x, freqs, k, _dtypes.FORMATS[fmt])
                ms, mc = _mp_sin_cos(x, freqs, k)
                assert s == mp_round(ms, fmt)
                assert c == mp_round(mc, fmt)


# ------------------------------------------------------------------ backends against the reference


def _positions():
    return np.array(octave_positions(2, seed=5)[::3] + [POSITION_LIMIT - 1], dtype=np.uint32)


@pytest.mark.any_backend
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("denominator", DENOMINATORS)
@pytest.mark.parametrize("d_model", [2, 5, 8, 13])
def test_forward_agrees_with_reference(backend, layout, denominator, d_model):
    config = fastpe.PosEncConfig(d_model, layout=layout, denominator=denominator, base=500000.0)
    pos = _positions()
    ref = fastpe.forward(pos, config, np.empty((pos.size, d_model), np.float32), backend="python")
    got = fastpe.forward(pos, config, np.empty((pos.size, d_model), np.float32), backend=backend)
    assert ulp_distance(got, ref).max() <= 1
    ref64 = fastpe.forward(pos, config, np.empty((pos.size, d_model)), backend="python")
    got64 = fastpe.forward(pos, config, np.empty((pos.size, d_model)), backend=backend)
    assert np.abs(got64 - ref64).max() <= 2.0**-45
    for dt in ("float16", "bfloat16"):
        want = fastpe.forward(pos, config, np.empty((pos.size, d_model), _dtypes.resolve(dt)), backend="python")
        out = fastpe.forward(pos, config, np.empty((pos.size, d_model), _dtypes.resolve(dt)), backend=backend)
        assert np.array_equal(out.view(np.uint16), want.view(np.uint16)), dt


@pytest.mark.any_backend
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("denominator", DENOMINATORS)
def test_table_rows_equal_forward(backend, layout, denominator):
    """A table row is bit-identical to forward of its position, in every dtype."""
    for dt in ("float32", "float64", "float16"):
        t = fastpe.table(7, 70, layout=layout, denominator=denominator, dtype=dt, backend=backend)
        config = fastpe.PosEncConfig(7, layout=layout, denominator=denominator)
        pos = [0, 1, 63, 64, 69]
        f = fastpe.forward(pos, config, np.empty((5, 7), t.dtype), backend=backend)
        assert np.array_equal(t[pos], f)
        rows = fastpe.sinusoid.table_rows(config, 60, np.empty((10, 7), t.dtype), backend=backend)
        assert np.array_equal(rows, t[60:70])


@pytest.mark.any_backend
@pytest.mark.skipif(len(FAST) < 2, reason="needs both compiled backends")
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_compiled_backends_write_identical_bits(layout, dt):
    """Large enough for every parallel path; numba and C share one definition."""
    rng = np.random.default_rng(1)
    pos = rng.integers(0, POSITION_LIMIT, 3000, dtype=np.uint64).astype(np.uint32)
    config = fastpe.PosEncConfig(255, layout=layout, denominator="half-1", min_timescale=0.5, max_timescale=1e5)
    a = fastpe.forward(pos, config, np.empty((pos.size, 255), dt), backend="numba")
    b = fastpe.forward(pos, config, np.empty((pos.size, 255), dt), backend="cython")
    assert np.array_equal(a, b)
    t = rng.uniform(-1e6, 1e6, 2000)
    a = fastpe.timestep(t, 300, dtype=dt, backend="numba", scale=7.5)
    b = fastpe.timestep(t, 300, dtype=dt, backend="cython", scale=7.5)
    assert np.array_equal(a, b)


@pytest.mark.any_backend
def test_float32_exact_against_mpmath_at_large_positions(fast_backend):
    config = fastpe.PosEncConfig(6, layout="halves", denominator="half-1", min_timescale=2.0, max_timescale=1e4)
    pos = [3, 2**20 + 1, 2**31 + 12345, POSITION_LIMIT - 1]
    got = fastpe.forward(pos, config, np.empty((4, 6), np.float32), backend=fast_backend)
    freqs = config.frequencies
    for r, p in enumerate(pos):
        for k in range(3):
            ms, mc = _mp_sin_cos(p, freqs, k)
            assert got[r, k] == mp_round(ms, "float32")
            assert got[r, 3 + k] == mp_round(mc, "float32")


def test_half_minus_one_odd_width_has_a_zero_last_column(backend):
    t = fastpe.table(7, 5, denominator="half-1", layout="halves", backend=backend)
    assert (t[:, 6] == 0).all() and np.array_equal(t[:, :6], fastpe.table(6, 5, denominator="half-1", layout="halves"))
    t = fastpe.table(7, 5, denominator="half-1", backend=backend)  # interleaved too
    assert (t[:, 6] == 0).all()


@pytest.mark.any_backend
def test_halves_odd_width_sine_block_is_wider(backend):
    t = fastpe.table(5, 3, layout="halves", backend=backend)
    inter = fastpe.table(5, 3, backend=backend)
    assert np.array_equal(t[:, :3], inter[:, 0::2])  # sines: the first ceil(5/2) columns
    assert ulp_distance(t[:, 3:], inter[:, 1::2]).max() <= 1  # cosines


# ------------------------------------------------------------------ peers


def test_matches_marian_halves():
    """HF Marian / RoFormer: halves with the spec's denominator (their float64 formula)."""
    d, n = 10, 50
    pos = np.array([[p / np.power(10000, 2 * (j // 2) / d) for j in range(d)] for p in range(n)])
    want = np.concatenate([np.sin(pos[:, 0::2]), np.cos(pos[:, 1::2])], axis=1)
    np.testing.assert_allclose(fastpe.table(d, n, layout="halves"), want, atol=1e-7)


def test_matches_distilbert_interleaved():
    d, n = 10, 50
    pos = np.array([[p / np.power(10000, 2 * (j // 2) / d) for j in range(d)] for p in range(n)])
    want = np.empty_like(pos)
    want[:, 0::2] = np.sin(pos[:, 0::2])
    want[:, 1::2] = np.cos(pos[:, 1::2])
    np.testing.assert_allclose(fastpe.table(d, n), want, atol=1e-7)


def test_matches_m2m100_and_fairseq():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding as M2M

    for d in (8, 9, 64):
        want = M2M.get_embedding(300, d, padding_idx=1).numpy()
        got = fastpe.table(d, 300, layout="halves", denominator="half-1")
        got[1] = 0
        # torch computes the angle in float32: its error grows with the position
        np.testing.assert_allclose(got, want, atol=3e-5)
    tokens = torch.tensor([[1, 1, 5, 6, 7], [5, 6, 1, 7, 8]])
    emb = M2M(20, 8, padding_idx=1)
    want = emb(input_ids=tokens).numpy()
    got = fastpe.fairseq_embedding(tokens.numpy(), 8, 1)
    np.testing.assert_allclose(got, want, atol=1e-6)
    pos = M2M.create_position_ids_from_input_ids(tokens, 1, 3).numpy()
    assert np.array_equal(fastpe.fairseq_positions(tokens.numpy(), 1, offset=3), pos)


def test_matches_tensor2tensor_timescales():
    """tensor2tensor's get_timing_signal_1d (its formula, in float64 here)."""
    channels, length, lo, hi = 12, 40, 2.0, 5e3
    num = channels // 2
    inc = math.log(hi / lo) / max(num - 1, 1)
    inv = lo ** -1 * np.exp(np.arange(num) * -inc)
    scaled = np.arange(length)[:, None] * inv[None, :]
    want = np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1)
    got = fastpe.table(channels, length, layout="halves", denominator="half-1", min_timescale=lo, max_timescale=hi)
    np.testing.assert_allclose(got, want, atol=1e-7)


# ------------------------------------------------------------------ add_


@pytest.mark.any_backend
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_add_equals_numpy_expression(backend, dt):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 9, 6)).astype(dt)
    table = fastpe.table(6, 20, layout="halves", dtype=np.dtype(dt).name, backend=backend)
    y = fastpe.add_(x.copy(), offset=4, scale=math.sqrt(6), layout="halves", backend=backend)
    assert np.array_equal(y, x * math.sqrt(6) + table[4:13])
    y = fastpe.add_(x.copy(), backend=backend)
    assert np.array_equal(y, x + fastpe.table(6, 9, dtype=np.dtype(dt).name, backend=backend))
    pos = rng.integers(0, 20, (2, 9))
    y = fastpe.add_(x.copy(), positions=pos, layout="halves", backend=backend)
    assert np.array_equal(y, x + table[pos])
    pos1 = rng.integers(0, 20, 9)
    config = fastpe.PosEncConfig(6, layout="halves")
    y = fastpe.add_(x.copy(), positions=pos1, config=config, backend=backend)
    assert np.array_equal(y, x + table[pos1])


@pytest.mark.any_backend
def test_add_large_goes_in_blocks(fast_backend):
    x = np.zeros((1, 3000, 512), np.float32)
    fastpe.add_(x, offset=10, backend=fast_backend)
    assert np.array_equal(x[0], fastpe.table(512, 3010, backend=fast_backend)[10:])


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: fastpe.add_(np.zeros(6, np.float32)), ValueError, r"x must have shape \(\.\.\., seq, d_model\)"),
        (lambda: fastpe.add_(np.zeros((3, 6), np.int32)), TypeError, "x must have dtype float32 or float64"),
        (lambda: fastpe.add_([[0.0] * 6]), TypeError, "x must be a numpy.ndarray"),
        (lambda: fastpe.add_(np.zeros((6, 3), np.float32).T), ValueError, "x must be C-contiguous"),
        (lambda: fastpe.add_(np.zeros((3, 6), np.float32), offset=-1), ValueError, "offset must be >= 0"),
        (lambda: fastpe.add_(np.zeros((3, 6), np.float32), offset=2**32 - 2), ValueError, "offset \\+ seq"),
        (lambda: fastpe.add_(np.zeros((3, 6), np.float32), positions=[1, 2]), ValueError, "positions must have shape"),
        # a 2-D x takes positions (seq,): one shape, said once
        (lambda: fastpe.add_(np.zeros((2, 8), np.float32), positions=[0, 1, 2]), ValueError,
         r"^positions must have shape \(2,\), got \(3,\)$"),
        (lambda: fastpe.add_(np.zeros((3, 2, 8), np.float32), positions=[0, 1, 2]), ValueError,
         r"^positions must have shape \(2,\) or \(3, 2\), got \(3,\)$"),
        (lambda: fastpe.add_(np.zeros((3, 6), np.float32), positions=[1, 2, 3], offset=1), ValueError, "offset or positions"),
        (lambda: fastpe.add_(np.zeros((3, 6), np.float32), config=fastpe.PosEncConfig(8)), ValueError, "config.d_model"),
        (lambda: fastpe.add_(np.zeros((3, 6), np.float32), scale=math.nan), ValueError, "scale must be finite"),
        (lambda: fastpe.add_(np.zeros((3, 6), np.float32), layout="rows"), ValueError, "layout must be one of"),
        # keywords beside a config are checked, and refused when they say something
        (lambda: fastpe.add_(np.zeros((3, 6), np.float32), config=fastpe.PosEncConfig(6), layout=3, base=[2.0]),
         TypeError, "base must be a real number"),
        (lambda: fastpe.add_(np.zeros((3, 6), np.float32), config=fastpe.PosEncConfig(6), layout="halves"),
         ValueError, "give config or layout, not both"),
        (lambda: fastpe.add_(np.zeros((3, 0), np.float32)), ValueError, "x must have at least one column"),
        (lambda: fastpe.add_(np.zeros((3, 6), np.float32), positions=[1, True, 2]), TypeError,
         "positions must hold numbers, got a bool"),
    ],
)
def test_add_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.any_backend
def test_add_refuses_positions_inside_x():
    """Positions read from the array being written: the result would depend on the order
    the backend writes rows in (173 of 600 rows differed between backends)."""
    x = np.zeros((4, 8), np.float32)
    x[:, 0] = np.arange(4)
    before = x.copy()
    with pytest.raises(ValueError, match="x must not share memory with positions"):
        fastpe.add_(x, positions=x.view(np.int32)[:, 0])
    assert np.array_equal(x, before)


@pytest.mark.any_backend
def test_add_of_no_rows_returns_x(backend):
    x = np.zeros((2, 0, 6), np.float32)
    assert fastpe.add_(x, backend=backend) is x


@pytest.mark.any_backend
def test_add_leaves_x_untouched_on_bad_input():
    x = np.ones((2, 3, 6), np.float32)
    with pytest.raises(ValueError):
        fastpe.add_(x, scale=2.0, positions=[[1, 2, 3]])
    assert (x == 1).all()


# ------------------------------------------------------------------ config and table input


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(layout="rows"), ValueError, "layout must be one of 'interleaved', 'halves'"),
        (dict(layout=1), TypeError, "layout must be a string"),
        (dict(denominator="half"), ValueError, "denominator must be one of 'd', 'half-1'"),
        (dict(min_timescale=0.0), ValueError, "min_timescale must be > 0"),
        (dict(min_timescale=1e-4), ValueError, "min_timescale must be >= 1/1024"),
        (dict(max_timescale=math.inf), ValueError, "max_timescale must be finite"),
        (dict(max_timescale=0.5), ValueError, "greater than min_timescale"),
        (dict(base=500.0, max_timescale=1000.0), ValueError, "base or max_timescale, not both"),
        (dict(dtype="int8"), TypeError, "dtype must be one of float32, float64, float16, bfloat16"),
        (dict(dtype=np.complex64), TypeError, "dtype must be one of"),
    ],
)
def test_table_bad_input(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        fastpe.table(8, 4, **kwargs)


@pytest.mark.any_backend
def test_half_minus_one_needs_two_columns():
    with pytest.raises(ValueError, match="d_model must be >= 2 with denominator='half-1'"):
        fastpe.PosEncConfig(1, denominator="half-1")


def test_max_timescale_equals_base():
    a = fastpe.table(8, 10, max_timescale=500.0)
    assert np.array_equal(a, fastpe.table(8, 10, base=500.0))


def test_bfloat16_without_ml_dtypes_is_a_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_ml_dtypes(name, *args, **kwargs):
        if name == "ml_dtypes":
            raise ImportError("no ml_dtypes")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ml_dtypes)
    with pytest.raises(TypeError, match="bfloat16.*needs the ml_dtypes package"):
        fastpe.table(8, 4, dtype="bfloat16")


def test_low_precision_is_correctly_rounded_not_double_rounded():
    """float16 ties of the float32 value are decided by the exact value: compare every
    element of a table with mpmath rounded straight to float16."""
    d, n = 16, 600
    got = fastpe.table(d, n, layout="halves", denominator="half-1", dtype="float16")
    f32 = fastpe.table(d, n, layout="halves", denominator="half-1")
    naive = f32.astype(np.float16)
    differ = np.argwhere(got != naive)
    assert differ.size, "expected some float32 values that are float16 ties"
    freqs = fastpe.PosEncConfig(d, denominator="half-1").frequencies
    for r, j in differ:
        k, is_cos = (j, False) if j < 8 else (j - 8, True)
        assert float(got[r, j]) == mp_round(_mp_sin_cos(int(r), freqs, int(k))[is_cos], "float16")


@pytest.mark.any_backend
@pytest.mark.parametrize("target", ["float16", "bfloat16"])
def test_narrow16_agrees_with_numpy_casts_on_every_kind_of_float(backend, target):
    """The narrowing operation: the cast's bits (NumPy's float16, ml_dtypes' bfloat16) and
    the ties (values exactly halfway, found by exact float64 arithmetic) on random bit
    patterns and the edges: subnormal targets, the overflow midpoint, inf, NaN, zeros."""
    from fastpe import _backends

    rng = np.random.default_rng(11)
    n = 3000 if backend == "python" else 400_000
    bits = np.concatenate([
        rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32),
        np.arange(0x33000000 - 3, 0x33000000 + 3000, dtype=np.uint32),  # float16 subnormals
        np.arange(0x38800000 - 3000, 0x38800000 + 3, dtype=np.uint32),
        np.arange(0x477FF000 - 3, 0x477FF000 + 3, dtype=np.uint32),  # 65520, the overflow midpoint
        np.arange(0x7F7F8000 - 3, 0x7F7F8000 + 3, dtype=np.uint32),  # bfloat16's
        np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x00000001, 0x00008000], np.uint32),
        # ties: 1 + 2**-11 and 1 + 3 * 2**-11 (float16), 1 + 2**-8 and 1 + 3 * 2**-8 (bfloat16)
        np.array([0x3F801000, 0x3F803000, 0x3F808000, 0x3F818000], np.uint32),
    ])
    bits = np.concatenate([bits, bits ^ np.uint32(0x80000000)])
    x = bits.view(np.float32)
    dtype = _dtypes.resolve(target)
    out = np.empty(bits.size, np.uint16)
    ties = np.empty(bits.size, np.bool_)
    _backends.load(backend).narrow16(bits, target == "bfloat16", out, ties)
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(dtype).view(np.uint16)
    nan = np.isnan(x)
    assert np.array_equal(out[~nan], want[~nan])
    assert np.isnan(out[nan].view(dtype).astype(np.float32)).all()
    want_ties = np.zeros(bits.size, bool)
    want_ties[_dtypes.narrow_ties(x, _dtypes.FORMATS[target])] = True
    assert np.array_equal(ties, want_ties) and ties.sum() >= 8


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "freqs",
    [Geometric(257, 256.0, 10000.0), Geometric(40, 39.0, 1e300, 1e-3), Geometric(7, 2.5, 1.5, 1.0, 1024.0),
     Geometric(64, 63.0, 10000.0, 1.0, 3.0)],
)
def test_plan_words_equal_a_separate_exponential_per_frequency(freqs):
    """The plans' integer power chain against each ``w_k / (2 pi)`` computed on its own at
    70 digits and cut by the decimal splitter: the same words, bit for bit."""
    from decimal import localcontext

    from fastpe._exact.constants import decimal_pi
    from fastpe._plans.frequencies import log_terms, turns
    from fastpe._plans.words import split_turns

    got = turns(freqs)
    with localcontext() as ctx:
        ctx.prec = 70
        first, step = log_terms(freqs)
        inv_two_pi = 1 / (2 * decimal_pi(80))
        for k in range(freqs.count):
            want = split_turns((first - k * step).exp() * inv_two_pi)
            assert tuple(got[:, k]) == want, k


def test_add_gives_ieee_results_without_warnings_on_every_backend(backend):
    """inf * 0 and overflow: NaN and inf, with no RuntimeWarning on any backend (NumPy's
    multiply once warned on two backends of three, an error where warnings are errors)."""
    import warnings

    x = np.array([[np.inf, 3e38, 1.0, -np.inf]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fastpe.add_(x, scale=0.0, backend=backend)
        y = fastpe.add_(np.array([[3e38, 1.0]], np.float32), scale=1e10, backend=backend)
    assert np.isnan(x[0, 0]) and np.isnan(x[0, 3]) and x[0, 1] == 0.0 + fastpe.table(4, 1)[0, 1]
    assert np.isinf(y[0, 0]) and y[0, 1] == np.float32(1e10) + np.float32(1.0)


@pytest.mark.any_backend
def test_fairseq_positions_of_ragged_tokens_names_tokens():
    with pytest.raises(ValueError, match=r"tokens must be an integer array of shape \(\.\.\., seq\)"):
        fastpe.fairseq_positions([[1], [1, 2]], 1)


# ------------------------------------------------------------------ out= and the shared keywords


TOKENS = np.array([[1, 1, 5, 6, 7, 9], [5, 6, 1, 7, 8, 1], [2, 2, 2, 2, 2, 2]])


@pytest.mark.any_backend
def test_fairseq_embedding_out(backend):
    for tokens, d_model in ((TOKENS, 8), (TOKENS[0], 7), (TOKENS[:, :0], 4)):
        want = check_out_contract(
            lambda **kw: fastpe.fairseq_embedding(tokens, d_model, 1, backend=backend, **kw),
            other_dtype="float64",
            bad_input=lambda out: fastpe.fairseq_embedding(tokens, d_model, -1, out=out),
        )
        assert want.shape == tokens.shape + (d_model,) and want.dtype == np.float32
    for dt in ("float16", "bfloat16"):
        out = np.empty(TOKENS.shape + (8,), _dtypes.resolve(dt))
        assert fastpe.fairseq_embedding(TOKENS, 8, 1, out=out, backend=backend) is out
        assert out.tobytes() == fastpe.fairseq_embedding(TOKENS, 8, 1, dtype=dt, backend=backend).tobytes()


@pytest.mark.any_backend
def test_fairseq_embedding_out_must_not_hold_the_tokens():
    buf = np.zeros((2, 3, 4), np.int64)
    tokens = buf.reshape(-1)[:6].reshape(2, 3)
    tokens[...] = [[1, 5, 6], [5, 6, 1]]
    before = buf.copy()
    with pytest.raises(ValueError, match="^out must not share memory with tokens"):
        fastpe.fairseq_embedding(tokens, 4, 1, out=buf.view(np.float64))
    assert np.array_equal(buf, before)


@pytest.mark.any_backend
def test_fairseq_positions_out():
    for tokens, offset in ((TOKENS, 0), (TOKENS, 5), (TOKENS[1], 2**40), (np.ones((2, 0), np.int32), 0)):
        want = check_out_contract(
            lambda **kw: fastpe.fairseq_positions(tokens, 1, offset=offset, **kw),
            bad_dtype=np.int32,
            alias=lambda out: fastpe.fairseq_positions(out, 1, out=out),
            bad_input=lambda out: fastpe.fairseq_positions(tokens, 1, offset=-1, out=out),
        )
        assert want.dtype == np.int64
        np.testing.assert_array_equal(want, (np.cumsum(tokens != 1, axis=-1) + offset) * (tokens != 1) + 1)


@pytest.mark.any_backend
def test_one_vocabulary():
    """The shared keywords of the sinusoid functions: dtype=None, out=None, backend last;
    fairseq_positions runs no kernel and takes no backend; the old names are gone."""
    import inspect

    for fn in (fastpe.table, fastpe.timestep, fastpe.fairseq_embedding):
        params = inspect.signature(fn).parameters
        assert list(params)[-3:] == ["dtype", "out", "backend"], fn.__name__
        assert params["dtype"].default is None and params["out"].default is None
    params = inspect.signature(fastpe.fairseq_positions).parameters
    assert list(params) == ["tokens", "padding_idx", "offset", "out"] and params["offset"].default == 0
    with pytest.raises(TypeError, match="unexpected keyword argument 'backend'"):
        fastpe.fairseq_positions(TOKENS, 1, backend="python")
    for call, name in ((lambda: fastpe.timestep([1.0], 8, max_period=100.0), "max_period"),
                       (lambda: fastpe.timestep([1.0], dim=8), "dim")):
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'"):
            call()
