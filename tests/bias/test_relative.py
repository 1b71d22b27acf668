"""fastpe.relative: T5 buckets equal to Hugging Face's, on every backend.

The truth is HF's own ``T5Attention._relative_position_bucket`` (and ``compute_bias``), run
here on the same relative positions.  At the rare "fragile" configurations, whose buckets
depend on the last bit of a float32 log (see :mod:`fastpe.relative`), fastpe uses the
correctly rounded log; plugging this machine's torch log into the plan reproduces HF there
too, which shows the rest of the emulation is exact.
"""

from __future__ import annotations

import numpy as np
import pytest

from fastpe import relative
from fastpe._plans import t5 as t5plan
from conftest import AVAILABLE, FAST
from support.inputs import check_out_contract

torch = pytest.importorskip("torch")
t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
hf_bucket = t5.T5Attention._relative_position_bucket

#: (buckets per direction, max_distance) pairs where torch's float32 log differs from the
#: correctly rounded one at an argument that decides a bucket (found by a scan of 35,520
#: configurations; none of them is T5's)
FRAGILE = [(17, 27), (19, 25), (36, 50), (48, 81), (51, 81), (54, 125), (55, 75), (65, 108), (72, 100),
           (73, 294), (91, 125), (96, 162), (99, 121), (100, 162), (108, 150), (108, 250), (113, 189),
           (127, 175)]

GRID_BUCKETS = [4, 5, 8, 10, 16, 19, 32, 33, 64, 100, 256]
GRID_DISTANCES = [3, 9, 20, 27, 64, 100, 128, 129, 1000, 65536, 10**6]


def hf(rel, bidirectional, num_buckets, max_distance) -> np.ndarray:
    out = hf_bucket(torch.as_tensor(np.asarray(rel, dtype=np.int64)), bidirectional=bidirectional,
                    num_buckets=num_buckets, max_distance=max_distance)
    return out.numpy()


def torch_log32(y: float) -> float:
    """torch's float32 ``log(y)`` here (its vectorised path, which fills HF's matrices)."""
    with torch.no_grad():
        return float(torch.log(torch.full((64,), y, dtype=torch.float32))[0])


@pytest.fixture
def torch_log(monkeypatch):
    """Plans built with torch's log at fragile arguments, dropped after the test."""
    t5plan._plan.cache_clear()
    monkeypatch.setattr(t5plan, "_hf_log", torch_log32)
    yield
    t5plan._plan.cache_clear()


def configs(fragile: bool):
    """(bidirectional, num_buckets, max_distance) for the grid, or for the fragile pairs."""
    if fragile:
        return [c for n, d in FRAGILE for c in ((False, n, d), (True, 2 * n, d))]
    found = []
    for bidirectional in (True, False):
        for num_buckets in GRID_BUCKETS:
            n = num_buckets // 2 if bidirectional else num_buckets
            for max_distance in GRID_DISTANCES:
                if n // 2 >= 1 and max_distance > n // 2:
                    found.append((bidirectional, num_buckets, max_distance))
    return found


def positions(bidirectional, num_buckets, max_distance) -> np.ndarray:
    """Every relative position up to 3 * max_distance (4,000 at most), both sides of every
    plan threshold, and the extremes."""
    n = num_buckets // 2 if bidirectional else num_buckets
    reach = min(3 * max_distance + 5, 4000)
    thresholds = t5plan._plan(n, max_distance)[0]
    near = (thresholds[:, None] + np.arange(-2, 3)).reshape(-1)
    big = np.array([2**31, 10**9, 2**40, 2**53 + 1, 2**62, 2**63 - 1], dtype=np.int64)
    return np.unique(np.concatenate([np.arange(-reach, reach + 1), near, -near, big, -big]))


@pytest.fixture
def fresh_plans():
    """Plans built inside the test (and dropped after it, whatever it changed)."""
    t5plan._plan.cache_clear()
    yield
    t5plan._plan.cache_clear()


# ------------------------------------------------------------------------------ values


@pytest.mark.any_backend
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_reference_values(backend, dtype):
    rel = [-200, -20, -8, -1, 0, 1, 7, 8, 20, 127, 1000]
    got = relative.t5_bucket(rel, dtype=dtype, backend=backend)
    assert got.dtype == dtype
    assert got.tolist() == [15, 10, 8, 1, 0, 17, 23, 24, 26, 31, 31]
    causal = relative.t5_bucket([-200, -20, -8, -1, 0, 5], bidirectional=False, dtype=dtype, backend=backend)
    assert causal.tolist() == [31, 17, 8, 1, 0, 0]


def _equal_to_hf(backend, fragile):
    for bidirectional, num_buckets, max_distance in configs(fragile):
        rel = positions(bidirectional, num_buckets, max_distance)
        got = relative.t5_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets,
                                 max_distance=max_distance, backend=backend)
        want = hf(rel, bidirectional, num_buckets, max_distance)
        bad = np.flatnonzero(got != want)
        assert not bad.size, (bidirectional, num_buckets, max_distance, rel[bad[:5]], got[bad[:5]], want[bad[:5]])
        assert got.dtype == want.dtype == np.int64


@pytest.mark.any_backend
def test_equal_to_hf_everywhere(fast_backend):
    """Every relative position in a wide range, over a grid of configurations."""
    _equal_to_hf(fast_backend, fragile=False)


@pytest.mark.any_backend
def test_fragile_configurations_equal_to_hf_with_its_log(fast_backend, torch_log):
    """With torch's float32 log at the fragile arguments, the plan is HF's to the bit."""
    _equal_to_hf(fast_backend, fragile=True)


@pytest.mark.any_backend
def test_reference_equal_to_hf(torch_log):
    """The python reference (HF's float32 formula emulated exactly) on a smaller scan."""
    picked = [(True, 32, 128), (False, 32, 128), (True, 8, 20), (False, 19, 10), (True, 33, 100)]
    picked += [(False, n, d) for n, d in FRAGILE[:4]] + [(True, 2 * n, d) for n, d in FRAGILE[4:7]]
    for bidirectional, num_buckets, max_distance in picked:
        rel = np.arange(-2 * max_distance - 3, 2 * max_distance + 4)
        got = relative.t5_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets,
                                 max_distance=max_distance, backend="python")
        np.testing.assert_array_equal(got, hf(rel, bidirectional, num_buckets, max_distance))


def test_fragile_arguments_take_the_correctly_rounded_log(monkeypatch, fresh_plans):
    """By default fragile arguments take the correctly rounded float32 log, the same on every
    machine: at num_buckets=36, max_distance=50 (unidirectional), distance 30 (exactly 27 in
    real arithmetic) lands in 26.  A float32 log one ULP above the correctly rounded one (as
    some torch builds compute it; others, e.g. with AVX-512, round it correctly) puts it in
    27, and with the plan's log hook fastpe reproduces whichever log it is given -- this
    machine's torch included, so fastpe equals HF here whatever its build computes."""
    kwargs = dict(bidirectional=False, num_buckets=36, max_distance=50)
    for backend in AVAILABLE:
        assert relative.t5_bucket([-30], backend=backend, **kwargs).tolist() == [26]
    y = float(np.float32(np.float32(30) / np.float32(18)))

    def one_ulp_high(v):  # a misrounding log, written out: no dependence on the torch build
        return float(np.nextafter(np.float32(t5plan._log32(v)), np.float32(np.inf)))

    t5plan._plan.cache_clear()
    monkeypatch.setattr(t5plan, "_hf_log", one_ulp_high)
    assert relative.t5_bucket([-30], **kwargs).tolist() == [27]
    t5plan._plan.cache_clear()
    monkeypatch.setattr(t5plan, "_hf_log", torch_log32)
    assert relative.t5_bucket([-30], **kwargs).tolist() == hf([-30], False, 36, 50).tolist()
    # whatever this build computes, it is a float32 log within one ULP of the correct one
    got = np.float32(torch.log(torch.tensor([y]))[0])
    assert abs(int(got.view(np.int32)) - int(np.float32(t5plan._log32(y)).view(np.int32))) <= 1


@pytest.mark.any_backend
def test_common_configurations_consult_no_log(monkeypatch, fresh_plans):
    """T5's own configurations have no fragile argument: their plans never ask torch."""

    def refuse(y):
        raise AssertionError(f"asked for the log of {y}")

    monkeypatch.setattr(t5plan, "_hf_log", refuse)
    for n, max_distance in [(16, 128), (32, 128), (16, 256), (32, 256), (64, 128)]:
        thresholds, logs = t5plan._plan(n, max_distance)
        assert not logs
        assert thresholds.shape == (n - n // 2 - 1,)
        assert (np.diff(thresholds) >= 0).all() and thresholds[0] > n // 2


@pytest.mark.any_backend
def test_widest_configurations(fast_backend, fresh_plans, monkeypatch):
    """num_buckets=4096 and max_distance=2**32, the largest allowed, where each float32
    argument stands for up to 256 distances.  Without the log hook the plan never scans for
    fragile distances (that scan took seconds here); its thresholds are where HF's formula,
    emulated by the python reference, puts them, and HF's own function agrees wherever the
    log's last bit does not decide."""
    monkeypatch.setattr(t5plan._Chain, "fragile", lambda self, d: pytest.fail("scanned for fragile distances"))
    cases = []
    for bidirectional, n in ((True, 2048), (False, 4096)):
        thresholds = t5plan._plan(n, 2**32)[0]
        assert thresholds.shape == (n - n // 2 - 1,) and n // 2 < thresholds[0] and thresholds[-1] < 2**32
        near = np.concatenate([thresholds - 1, thresholds])
        cases.append((bidirectional, n, near, np.concatenate([near, -near]) if bidirectional else -near))
    monkeypatch.undo()
    for bidirectional, n, near, rel in cases:
        kwargs = dict(bidirectional=bidirectional, num_buckets=4096, max_distance=2**32)
        got = relative.t5_bucket(rel, backend=fast_backend, **kwargs)
        np.testing.assert_array_equal(got, relative.t5_bucket(rel, backend="python", **kwargs))
        chain = t5plan._Chain(n, 2**32)
        sure = ~np.array([chain.fragile(int(d)) for d in np.abs(rel)])
        assert sure.sum() > 1000  # near a threshold the last bit often decides
        np.testing.assert_array_equal(got[sure], hf(rel[sure], bidirectional, 4096, 2**32))


@pytest.mark.any_backend
def test_shapes_and_input_forms(backend):
    rel = np.arange(-6, 6).reshape(3, 4)
    want = relative.t5_bucket(rel.reshape(-1), backend=backend).reshape(3, 4)
    for form in (rel, rel.astype(np.int8), rel.astype(np.int32), rel.tolist(), torch.from_numpy(rel), rel.T.copy().T):
        got = relative.t5_bucket(form, backend=backend)
        assert got.shape == (3, 4)
        np.testing.assert_array_equal(got, want)
    assert relative.t5_bucket(np.array([], dtype=np.int64), backend=backend).shape == (0,)
    # [] is float64 to NumPy; any empty array has no value to refuse
    for empty, shape in (([], (0,)), (np.zeros((0, 3)), (0, 3)), (np.zeros((2, 0), np.int32), (2, 0))):
        got = relative.t5_bucket(empty, dtype=np.int32, backend=backend)
        assert got.shape == shape and got.dtype == np.int32
    scalar = relative.t5_bucket(-20, backend=backend)
    assert scalar.shape == () and int(scalar) == 10
    np.testing.assert_array_equal(relative.t5_bucket(np.array([3, 2**64 - 2**63 - 1], dtype=np.uint64), backend=backend),
                                  hf([3, 2**63 - 1], True, 32, 128))


@pytest.mark.any_backend
def test_backends_agree_on_random_positions(backend):
    rng = np.random.default_rng(7)
    rel = np.concatenate([rng.integers(-300, 300, 500), rng.integers(-(2**62), 2**62, 50),
                          [2**63 - 1, -(2**63) + 1, 0, 1, -1]])
    for kwargs in (dict(), dict(bidirectional=False), dict(num_buckets=36, max_distance=50, bidirectional=False),
                   dict(num_buckets=64, max_distance=1000)):
        got = relative.t5_bucket(rel, backend=backend, **kwargs)
        want = relative.t5_bucket(rel, backend="python", **kwargs)
        np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------------------ matrix


def _hf_compute_bias(q_len, k_len, bidirectional, num_buckets, max_distance, past):
    """HF's own compute_bias, its embedding made the identity (bucket b -> value b)."""
    config = t5.T5Config(d_model=8, d_kv=4, num_heads=1, relative_attention_num_buckets=num_buckets,
                         relative_attention_max_distance=max_distance, is_decoder=not bidirectional)
    attention = t5.T5Attention(config, has_relative_attention_bias=True)
    with torch.no_grad():
        attention.relative_attention_bias.weight.copy_(torch.arange(num_buckets, dtype=torch.float32)[:, None])
        values = attention.compute_bias(q_len, k_len, device="cpu", past_seen_tokens=past)
    return values[0, 0].numpy().astype(np.int64)


@pytest.mark.any_backend
@pytest.mark.parametrize("q_len, k_len, bidirectional, offset", [
    (7, 7, True, 0), (5, 9, True, 0), (9, 5, True, 0), (1, 300, False, 299), (4, 200, False, 196), (3, 3, False, 0),
])
def test_matrix_equals_hf_compute_bias(q_len, k_len, bidirectional, offset, backend):
    got = relative.t5_bucket_matrix(q_len, k_len, bidirectional=bidirectional, offset=offset, backend=backend)
    assert got.shape == (q_len, k_len) and got.dtype == np.int64
    np.testing.assert_array_equal(got, _hf_compute_bias(q_len, k_len, bidirectional, 32, 128, offset))


@pytest.mark.any_backend
def test_matrix_equals_buckets_of_the_positions(backend):
    for kwargs in (dict(), dict(bidirectional=False, offset=40), dict(num_buckets=36, max_distance=50),
                   dict(offset=2**62, bidirectional=False)):
        got = relative.t5_bucket_matrix(6, 11, backend=backend, **kwargs)
        offset = kwargs.pop("offset", 0)
        rel = np.arange(11)[None, :] - (np.arange(6)[:, None] + offset)
        np.testing.assert_array_equal(got, relative.t5_bucket(rel, backend="python", **kwargs))
    small = relative.t5_bucket_matrix(6, dtype=np.int32, backend=backend)
    assert small.dtype == np.int32 and small.shape == (6, 6)


@pytest.mark.any_backend
@pytest.mark.skipif(not FAST, reason="no compiled backend")
def test_large_matrix_takes_the_parallel_path(monkeypatch):
    """1500 x 1600 buckets (2.4M): the parallel twins (numba) and threads (cython) run;
    the same values as HF's bucket function on the explicit positions."""
    calls = []
    if "numba" in FAST:
        import numba

        from fastpe._backends.numba import bias as nb

        fill = nb.t5_fill_parallel
        monkeypatch.setattr(nb, "t5_fill_parallel", lambda *a: (calls.append("numba"), fill(*a)))
    if "cython" in FAST:
        from fastpe._backends import cython as _cython

        run_blocks = _cython._run_blocks
        monkeypatch.setattr(_cython, "threads", lambda: 2)
        monkeypatch.setattr(_cython, "_run_blocks", lambda run, blocks: (calls.append("cython"), run_blocks(run, blocks)))
    want = hf(np.arange(1600)[None, :] - np.arange(1500)[:, None] - 100, True, 32, 128)
    for backend in FAST:
        got = relative.t5_bucket_matrix(1500, 1600, offset=100, backend=backend)
        np.testing.assert_array_equal(got, want)
        flat = relative.t5_bucket(np.arange(1600)[None, :] - np.arange(1500)[:, None] - 100, backend=backend)
        np.testing.assert_array_equal(flat, want)
    expected = set(FAST)
    if "numba" in FAST and numba.get_num_threads() == 1:
        expected.discard("numba")
    assert set(calls) >= expected


# ------------------------------------------------------------------------------ errors


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "rel, kwargs, error, match",
    [
        ([1.0, 2.0], {}, TypeError, "relative_position must hold integers, got dtype float64"),
        ([True, False], {}, TypeError, "relative_position must hold integers, got booleans"),
        ("12", {}, TypeError, "relative_position must be an array of integers"),
        ([[1, 2], [3]], {}, ValueError, "relative_position must be an array of integers"),
        (np.array([-(2**63)]), {}, ValueError, r"relative_position must be in \(-2\*\*63, 2\*\*63\)"),
        (np.array([2**63], dtype=np.uint64), {}, ValueError, r"relative_position must be in"),
        ([2**70], {}, ValueError, r"relative_position must be in"),
        ([1, "a"], {}, TypeError, "relative_position must hold integers"),
        ([1], dict(bidirectional=1), TypeError, "bidirectional must be True or False"),
        ([1], dict(num_buckets=3), ValueError, "num_buckets must be >= 4"),
        ([1], dict(num_buckets=1, bidirectional=False), ValueError, "num_buckets must be >= 2"),
        ([1], dict(num_buckets=4097), ValueError, "num_buckets must be <= 4096"),
        ([1], dict(num_buckets=32.0), TypeError, "num_buckets must be an integer"),
        ([1], dict(max_distance=8), ValueError, "max_distance must be greater than max_exact = 8"),
        ([1], dict(max_distance=16, bidirectional=False), ValueError, "max_distance must be greater than max_exact = 16"),
        ([1], dict(max_distance=2**32 + 1), ValueError, "max_distance must be <= 4294967296"),
        ([1], dict(dtype=np.float32), TypeError, "dtype must be int64 or int32"),
        ([1], dict(dtype="int16"), TypeError, "dtype must be int64 or int32"),
        ([1], dict(dtype=">i8"), TypeError, r"dtype must be int64 or int32, got '>i8' \(not in native byte order\)"),
        ([1], dict(dtype={"names": ["a"], "formats": ["i4", "i8"]}), TypeError, "dtype must be int64 or int32"),
        ([-(10**400)], {}, ValueError, r"relative_position must be in \(-2\*\*63, 2\*\*63\), got -1\.000e\+400$"),
        ([1], dict(num_buckets=10**400), ValueError, "num_buckets must be <="),
        ([1], dict(max_distance=-(10**400)), ValueError, "max_distance must be greater than max_exact"),
        ([1], dict(bidirectional=np.array(True)), TypeError, "bidirectional must be True or False"),
        (np.array([1.5]), {}, TypeError, "relative_position must hold integers, got dtype float64"),
        (np.array([1], dtype="m8[s]"), {}, TypeError, "relative_position must hold integers"),
        ([None], {}, TypeError, "relative_position must hold integers, got NoneType"),
        ([1], dict(backend="tpu"), ValueError, "backend 'tpu' is not a fastpe backend"),
    ],
)
def test_bad_bucket_arguments(rel, kwargs, error, match):
    with pytest.raises(error, match=match):
        relative.t5_bucket(rel, **kwargs)


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        ((0,), {}, ValueError, "q_len must be >= 1"),
        ((4, 0), {}, ValueError, "k_len must be >= 1"),
        ((4.0,), {}, TypeError, "q_len must be an integer"),
        ((4,), dict(offset=-1), ValueError, "offset must be >= 0"),
        ((4,), dict(offset=2**62 + 1), ValueError, "offset must be <="),
        ((4,), dict(offset=True), TypeError, "offset must be an integer"),
        ((2**21, 2**20), {}, ValueError, r"q_len \* k_len must be <= 2\*\*40"),
        ((4,), dict(num_buckets=2), ValueError, "num_buckets must be >= 4"),
        ((4,), dict(dtype=bool), TypeError, "dtype must be int64 or int32"),
    ],
)
def test_bad_matrix_arguments(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        relative.t5_bucket_matrix(*args, **kwargs)


# ------------------------------------------------------------------------------ out= and the keywords


@pytest.mark.any_backend
def test_bucket_out_contract(backend):
    rel = np.arange(-300, 300, 6).reshape(4, -1)
    for kwargs in (dict(), dict(bidirectional=False, num_buckets=36, max_distance=50)):
        want = check_out_contract(
            lambda **kw: relative.t5_bucket(rel, backend=backend, **kwargs, **kw),
            other_dtype=np.int32, bad_dtype=np.float32,
            alias=lambda out: relative.t5_bucket(out, out=out),
            bad_input=lambda out: relative.t5_bucket(rel.astype(np.float64), out=out),
        )
        assert want.dtype == np.int64
    # any shape, 0-d included; the input is never modified
    zero_d = np.empty((), np.int32)
    assert relative.t5_bucket(np.int64(-5), out=zero_d, backend=backend) is zero_d
    assert zero_d == relative.t5_bucket(-5, backend=backend)
    flat = np.arange(20, dtype=np.int64)
    with pytest.raises(ValueError, match="out must not share memory with relative_position"):
        relative.t5_bucket(flat[:10], out=flat[5:15])
    assert np.array_equal(flat, np.arange(20))


@pytest.mark.any_backend
def test_matrix_out_contract(backend):
    for kwargs in (dict(), dict(bidirectional=False, offset=40), dict(offset=2**62, bidirectional=False)):
        check_out_contract(
            lambda **kw: relative.t5_bucket_matrix(5, 9, backend=backend, **kwargs, **kw),
            other_dtype="int32", bad_dtype=np.float64,
            bad_input=lambda out: relative.t5_bucket_matrix(5, 9, offset=-1, out=out),
        )


def test_dtype_spellings():
    """dtype is spelled as every fastpe dtype: a name in any case, a NumPy dtype or scalar type."""
    want = relative.t5_bucket_matrix(4, 6, dtype=np.int32)
    for spelling in ("int32", " INT32 ", np.dtype(np.int32), np.int32, "i4"):
        got = relative.t5_bucket_matrix(4, 6, dtype=spelling)
        assert got.dtype == np.int32 and np.array_equal(got, want)
    assert relative.t5_bucket([1], dtype="Int64").dtype == np.int64


@pytest.mark.any_backend
def test_one_vocabulary():
    import inspect

    for fn in (relative.t5_bucket, relative.t5_bucket_matrix):
        params = inspect.signature(fn).parameters
        assert list(params)[-3:] == ["dtype", "out", "backend"]
        assert params["dtype"].default is None and params["out"].default is None
    assert inspect.signature(relative.t5_bucket_matrix).parameters["offset"].default == 0
    with pytest.raises(TypeError, match="unexpected keyword argument 'query_offset'"):
        relative.t5_bucket_matrix(4, query_offset=2)


@pytest.mark.any_backend
def test_lazy_attribute():
    import fastpe

    assert fastpe.relative is relative
