"""fastpe.relative.sandwich_bias against NeMo's published formula (written out in float64:
NeMo does not install here; nemo/collections/nlp/modules/common/megatron/position_embedding/
sandwich_relative_position_embedding.py and build_relative_position of
alibi_relative_position_embedding.py) and against mpmath, on every backend."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

from fastpe import _dtypes
from fastpe.relative import sandwich_bias
from conftest import FAST
from support.oracle import mp_round

mpmath.mp.prec = 200


def nemo_formula(n_heads, q_len, k_len, hidden, bidirectional):
    m = max(q_len, k_len)
    rel = -np.arange(1 - m, 1)[None, :]
    mem = -np.arange(1 - m, 1)[:, None]
    relative_position = np.abs(mem - rel)[-q_len:, -k_len:]
    if not bidirectional:
        relative_position = np.tril(relative_position)
    inv_freq = 1.0 / (10000 ** (2 * np.arange(1, hidden / 2 + 1) / hidden))
    bias = np.cos(relative_position[:, :, None] * inv_freq).sum(axis=2)
    scales = np.arange(1, n_heads + 1)[:, None, None] * 8 / n_heads
    return (bias[None] - hidden / 2) / scales


@pytest.mark.any_backend
@pytest.mark.parametrize("n_heads, q_len, k_len, hidden, bidirectional",
                         [(4, 7, 7, 16, True), (3, 5, 9, 8, False), (2, 9, 4, 64, False), (8, 33, 40, 128, True),
                          (1, 1, 1, 2, True), (16, 3, 70, 1024, True)])
def test_nemo_formula(backend, n_heads, q_len, k_len, hidden, bidirectional):
    got = sandwich_bias(n_heads, q_len, k_len, hidden_size=hidden, bidirectional=bidirectional, dtype="float64",
                        backend=backend)
    want = nemo_formula(n_heads, q_len, k_len, hidden, bidirectional)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-12 * max(1.0, np.abs(want).max())
    assert np.all(got <= 0) and not np.signbit(got[got == 0]).any()  # zeros are +0.0


def _mp_value(d, h, n, hidden):
    s = mpmath.fsum(mpmath.cos(d * mpmath.power(10000, -mpmath.mpf(2 * k) / hidden)) for k in range(1, hidden // 2 + 1))
    return (s - mpmath.mpf(hidden) / 2) / (mpmath.mpf(8 * (h + 1)) / n)


@pytest.mark.any_backend
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_against_mpmath(backend, dtype):
    n, q, hidden = 3, 6, 16
    got = sandwich_bias(n, q, hidden_size=hidden, dtype=dtype, backend=backend).astype(np.float64)
    for h in range(n):
        for d in range(q):
            want = mp_round(_mp_value(d, h, n, hidden), dtype)
            g = got[h, 0, d]
            if backend == "python" or dtype == "float16":
                assert g == want, (h, d)
            else:
                assert abs(g - want) <= float(np.spacing(np.float32(abs(want)))), (h, d)


@pytest.mark.any_backend
def test_long_distances_compiled_vs_reference():
    if not FAST:
        pytest.skip("no compiled backend")
    ref = sandwich_bias(2, 1, 3000, hidden_size=32, backend="python")
    for b in FAST:
        got = sandwich_bias(2, 1, 3000, hidden_size=32, backend=b)
        assert np.max(np.abs(got.astype(np.float64) - ref) / np.spacing(np.abs(ref))) <= 1


@pytest.mark.any_backend
def test_compiled_backends_same_bits():
    if len(FAST) < 2:
        pytest.skip("needs two compiled backends")
    for dtype in ("float32", "float64", "float16"):
        a, b = (sandwich_bias(16, 200, 300, hidden_size=256, bidirectional=False, dtype=dtype, backend=x) for x in FAST)
        assert np.array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))


def test_validation_and_out():
    for args, kwargs, exc, name in (((0, 4), dict(hidden_size=8), ValueError, "n_heads"),
                                    ((2, 4), dict(hidden_size=7), ValueError, "hidden_size"),
                                    ((2, 4), dict(hidden_size=8.0), TypeError, "hidden_size"),
                                    ((2, 4), dict(hidden_size=8, bidirectional=1), TypeError, "bidirectional"),
                                    ((2, 0), dict(hidden_size=8), ValueError, "q_len"),
                                    ((2, 4, 0), dict(hidden_size=8), ValueError, "k_len"),
                                    ((2, 4), dict(hidden_size=8, dtype="int8"), TypeError, "dtype")):
        with pytest.raises(exc, match=name):
            sandwich_bias(*args, **kwargs)
    out = np.full((2, 3, 5), 7.0, np.float32)
    with pytest.raises(ValueError, match="out"):
        sandwich_bias(2, 3, 4, hidden_size=8, out=out)
    assert np.all(out == 7.0)
    assert sandwich_bias(2, 3, 5, hidden_size=8, out=out) is out
    assert np.array_equal(out, sandwich_bias(2, 3, 5, hidden_size=8))
    assert _dtypes.resolve("float64") == sandwich_bias(1, 2, hidden_size=2, dtype="float64").dtype


@pytest.mark.any_backend
def test_sixteen_threads_at_once():
    from support.threads import failures_at_once

    jobs = []
    for b in FAST:
        for k in range(8):
            shape = (4, 150 + k, 200)
            want = sandwich_bias(*shape, hidden_size=8 * (k + 1), bidirectional=bool(k % 2), backend=b)
            jobs.append((b, shape, 8 * (k + 1), bool(k % 2), want))

    def right(job):
        b, shape, hidden, bidirectional, want = job
        got = sandwich_bias(*shape, hidden_size=hidden, bidirectional=bidirectional, backend=b)
        return np.array_equal(got.view(np.uint32), want.view(np.uint32))

    assert not failures_at_once(jobs, right)


@pytest.mark.any_backend
def test_c_line_copies_and_parts_agree():
    """The Sandwich line's baseline and AVX2 copies (csrc/fastpe_sandwich.h), numba's serial and
    parallel kernels, and any cut into parts: the same bits."""
    try:
        from fastpe._backends.cython import _ext
    except ImportError:
        pytest.skip("the compiled extension is not built")
    from fastpe._backends import _sandwich as plan

    turns = plan.half_turns(600)  # 300 frequencies: a full chunk of 256 and a partial one
    lines = []
    for wide, parts in ((False, 1), (True, 1), (True, 6)):
        d = np.full(777, np.nan)
        _ext.sandwich_line(turns, d, wide=wide, parts=parts)
        lines.append(d.view(np.uint64))
    if "numba" in FAST:
        from fastpe._backends.numba import sandwich as ks

        for fn in (ks.sandwich_line_serial, ks.sandwich_line_parallel):
            d = np.full(777, np.nan)
            fn(turns, d)
            lines.append(d.view(np.uint64))
    assert all(np.array_equal(x, lines[0]) for x in lines)
