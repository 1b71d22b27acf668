"""fastpe.relative's DeBERTa buckets equal to Hugging Face's, on every backend.

The truth is HF's own ``make_log_bucket_position`` and ``build_relative_position``
(transformers.models.deberta_v2), run here on the same relative positions.  Where only the
last bit of torch's float32 log decides (the divisor, or a fragile argument; see
:mod:`fastpe._plans.deberta`), fastpe takes the correctly rounded log: plugging this
machine's torch log into the plan reproduces HF everywhere, and every difference from HF
without it is one of those places.
"""

from __future__ import annotations

import numpy as np
import pytest

from fastpe import relative
from fastpe._exact import relative as exact
from fastpe._plans import deberta as plan
from conftest import FAST
from support.inputs import check_out_contract

torch = pytest.importorskip("torch")
deb = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")

BIG = np.array([2**24 + 1, 2**31, 10**9, 2**40, 2**53 + 1, 2**62, 2**63 - 1], dtype=np.int64)


def hf(rel, bucket_size, max_position) -> np.ndarray:
    out = deb.make_log_bucket_position(torch.as_tensor(np.asarray(rel, dtype=np.int64)), bucket_size, max_position)
    assert out.dtype == torch.float32
    return out.to(torch.long).numpy()


def hf_matrix(q_len, k_len, bucket_size, max_position) -> np.ndarray:
    out = deb.build_relative_position(torch.zeros(q_len, 1), torch.zeros(k_len, 1), bucket_size, max_position)
    assert out.shape == (1, q_len, k_len) and out.dtype == torch.long
    return out[0].numpy()


def torch_log32(y: np.ndarray) -> np.ndarray:
    """torch's float32 log here (the vectorised path; its 0-d path, HF's divisor, agrees)."""
    with torch.no_grad():
        return torch.log(torch.from_numpy(np.ascontiguousarray(y, dtype=np.float32))).numpy()


@pytest.fixture
def torch_log(monkeypatch):
    plan._plan.cache_clear()
    monkeypatch.setattr(plan, "_hf_log", torch_log32)
    yield
    plan._plan.cache_clear()


#: small and large bucket sizes, odd ones, max_position just above bucket_size // 2 (+2, +3),
#: DeBERTa-v3's, and huge
CONFIGS = [(bs, mp) for bs in (2, 3, 4, 16, 17, 64, 255, 256, 257, 1024, 4096)
           for mp in sorted({bs // 2 + 2, bs // 2 + 3, bs, 512, 1000, 2**20, 2**62}) if mp >= bs // 2 + 2]


def positions(bucket_size, max_position) -> np.ndarray:
    """Every relative position up to 4 * max_position (20,000 at most), both sides of every
    plan start, the int64 extremes where the plan stays small."""
    reach = min(4 * max_position + 5, 20000)
    full = plan.plan_size(bucket_size, max_position, 2**63 - 1) <= 50000
    p = plan.bucket_plan(bucket_size, max_position, 2**63 - 1 if full else reach)
    near = (p.starts[:, None] + np.arange(-1, 2)).reshape(-1)
    big = BIG if full else BIG[:0]
    d = np.unique(np.concatenate([np.arange(reach + 1), near, big]))
    d = d[d <= p.reach]
    return np.concatenate([d, -d[d > 0]])


def _scan(backend):
    """(config, positions, fastpe's, HF's) over the grid; every fast backend's buckets are
    the first's."""
    for bs, mp in CONFIGS:
        rel = positions(bs, mp)
        ours = relative.deberta_bucket(rel, bs, mp, backend=backend)
        for other in FAST:
            assert (relative.deberta_bucket(rel, bs, mp, backend=other) == ours).all()
        yield (bs, mp), rel, ours, hf(rel, bs, mp)


pytestmark = pytest.mark.skipif(not FAST, reason="no compiled backend")
backend = FAST[0] if FAST else None


@pytest.mark.any_backend
def test_equal_to_hf_with_its_log(torch_log):
    """With torch's log plugged in (divisor and fragile arguments), HF to the bit everywhere."""
    for config, rel, ours, theirs in _scan(backend):
        bad = np.flatnonzero(ours != theirs)
        assert not bad.size, (config, rel[bad][:5], ours[bad][:5], theirs[bad][:5])


@pytest.mark.any_backend
def test_differs_from_hf_only_where_the_log_decides(monkeypatch):
    """With the correctly rounded log, every difference from HF is a position whose bucket
    torch's log changes (the plan with its log gives HF's value there); far below the
    extremes there are none."""
    plan._plan.cache_clear()
    scans = list(_scan(backend))
    monkeypatch.setattr(plan, "_hf_log", torch_log32)
    plan._plan.cache_clear()
    differing = 0
    for (bs, mp), rel, ours, theirs in scans:
        bad = ours != theirs
        differing += int(bad.sum())
        if bad.any():
            hooked = relative.deberta_bucket(rel[bad], bs, mp, backend=backend)
            assert (hooked == theirs[bad]).all(), (bs, mp)
    monkeypatch.undo()
    plan._plan.cache_clear()
    # DeBERTa-v3's own: equal to HF through every distance up to 400,000 (its first
    # difference from this build is at 403,269)
    rel = np.arange(-400000, 400001)
    assert (relative.deberta_bucket(rel, backend=backend) == hf(rel, 256, 512)).all()
    assert differing  # the huge distances do reach torch's last bit


@pytest.mark.any_backend
def test_reference_equal_to_hf(torch_log):
    """The python reference (HF's float32 formula in exact fractions) on a smaller scan."""
    for bs, mp in [(256, 512), (3, 4), (17, 10), (257, 1000), (4096, 2050), (64, 2**62)]:
        p = plan.bucket_plan(bs, mp, 2**20)
        near = (p.starts[:200, None] + np.arange(-1, 2)).reshape(-1)
        rel = np.unique(np.concatenate([np.arange(-300, 301), near, -near]))
        ours = relative.deberta_bucket(rel, bs, mp, backend="python")
        assert (ours == hf(rel, bs, mp)).all(), (bs, mp)


@pytest.mark.any_backend
def test_plan_is_the_formula():
    """The plan's starts are where the vectorised emulation changes value, and its values the
    exact reference's."""
    for bs, mp in [(256, 512), (17, 10), (4096, 4096)]:
        p = plan.bucket_plan(bs, mp, 2**63 - 1)
        assert p.starts[0] == bs // 2 + 1 and (np.diff(p.starts) > 0).all() and (np.diff(p.values) > 0).all()
        got = plan.bucket_values(bs, mp, p.starts)
        assert (got == p.values).all() and (plan.bucket_values(bs, mp, p.starts[1:] - 1) == p.values[:-1]).all()
        for s, v in zip(p.starts[::97].tolist(), p.values[::97].tolist()):
            assert exact.deberta_bucket_value(s, bs, mp) == v


@pytest.mark.any_backend
@pytest.mark.parametrize("backend", FAST + ["python"])
def test_matrix_equal_to_build_relative_position(backend):
    shapes = [(1, 1), (7, 5), (5, 7), (64, 64), (3, 300)] if backend == "python" else \
        [(1, 1), (7, 5), (5, 7), (512, 512), (33, 700), (700, 33), (1, 2000)]
    for bs, mp in [(256, 512), (16, 10), (3, 4), (0, 0), (-1, 512), (256, -1)]:
        for q, k in shapes:
            got = relative.deberta_bucket_matrix(q, k, bucket_size=bs, max_position=mp, backend=backend)
            assert got.dtype == np.int64 and (got == hf_matrix(q, k, bs, mp)).all(), (bs, mp, q, k)
            got32 = relative.deberta_bucket_matrix(q, k, bucket_size=bs, max_position=mp, dtype="int32",
                                                   backend=backend)
            assert got32.dtype == np.int32 and (got32 == got).all()


def test_defaults_and_shapes():
    rel = np.array([[-1000, -129, -128, -1], [0, 1, 128, 129]])
    got = relative.deberta_bucket(rel)
    assert got.shape == rel.shape and got.dtype == np.int64
    assert (got == hf(rel, 256, 512)).all()
    assert relative.deberta_bucket([]).shape == (0,)
    assert relative.deberta_bucket(np.int64(200)).shape == ()
    assert relative.deberta_bucket(torch.tensor([5, -300])).tolist() == hf([5, -300], 256, 512).tolist()
    m = relative.deberta_bucket_matrix(4, 6)
    assert m.shape == (4, 6) and (m == np.arange(4)[:, None] - np.arange(6)[None, :]).all()


@pytest.mark.any_backend
@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(bucket_size=1), ValueError, "bucket_size"),
    (dict(bucket_size=2**16 + 2), ValueError, "bucket_size"),
    (dict(bucket_size=256.0), TypeError, "bucket_size"),
    (dict(bucket_size=True), TypeError, "bucket_size"),
    (dict(max_position=129), ValueError, "max_position"),
    (dict(max_position=2**62 + 1), ValueError, "max_position"),
    (dict(max_position="512"), TypeError, "max_position"),
    (dict(bucket_size=4096, max_position=2050), ValueError, "max_position"),  # a plan of ~1.5e8 values
])
def test_bad_configuration(kwargs, exc, match):
    out = np.full(3, -7, dtype=np.int64)
    with pytest.raises(exc, match=match):
        relative.deberta_bucket([1, 2**62, -5], **kwargs, out=out)
    assert (out == -7).all()


def test_fast_configuration_needs_small_positions():
    """max_position barely above mid: fine for a matrix, refused for distances whose plan
    would be huge, with the reason."""
    m = relative.deberta_bucket_matrix(600, bucket_size=4096, max_position=2050)
    assert (m == hf_matrix(600, 600, 4096, 2050)).all()
    with pytest.raises(ValueError, match="distinct buckets"):
        relative.deberta_bucket([2**40], bucket_size=4096, max_position=2050)


@pytest.mark.any_backend
@pytest.mark.parametrize("value, exc, match", [
    ([1.5], TypeError, "relative_position"),
    ([True], TypeError, "relative_position"),
    (np.array([-(2**63)]), ValueError, "relative_position"),
    (np.array([2**63], dtype=np.uint64), ValueError, "relative_position"),
    ("12", TypeError, "relative_position"),
    ([[1, 2], [3]], ValueError, "relative_position"),
])
def test_bad_relative_position(value, exc, match):
    with pytest.raises(exc, match=match):
        relative.deberta_bucket(value)


@pytest.mark.any_backend
def test_matrix_bad_arguments():
    for kwargs, exc, match in [(dict(q_len=0), ValueError, "q_len"), (dict(q_len=4, k_len=0), ValueError, "k_len"),
                               (dict(q_len=2**21, k_len=2**21), ValueError, "2\\*\\*40"),
                               (dict(q_len=3, bucket_size=None), TypeError, "bucket_size"),
                               (dict(q_len=3, bucket_size=2000), ValueError, "max_position"),
                               (dict(q_len=3, dtype="float32"), TypeError, "dtype")]:
        with pytest.raises(exc, match=match):
            relative.deberta_bucket_matrix(**kwargs)


def test_out_contract():
    rel = np.arange(-600, 603).reshape(3, 401)
    check_out_contract(lambda **kw: relative.deberta_bucket(rel, **kw), other_dtype="int32",
                       alias=lambda out: relative.deberta_bucket(out, out=out),
                       bad_input=lambda out: relative.deberta_bucket(rel, bucket_size=1, out=out))
    check_out_contract(lambda **kw: relative.deberta_bucket_matrix(9, 13, **kw), other_dtype="int32",
                       bad_input=lambda out: relative.deberta_bucket_matrix(9, 13, max_position=3, out=out))


# ------------------------------------------------------------------ threads and fork


@pytest.mark.any_backend
def test_threads_at_once_get_the_serial_bits():
    """Sixteen callers at once, each large enough for the parallel paths, plans built
    concurrently (a configuration not seen before): every result the one computed alone."""
    from support.threads import failures_at_once

    rel = np.random.default_rng(5).integers(-(1 << 20), 1 << 20, 300_000)
    jobs = [(b, cfg) for b in FAST for cfg in ((256, 512), (97, 300), (256, 512), (40, 22))] * 2
    grid = np.arange(700)[:, None] - np.arange(900)[None, :]
    # the truth by the plan's vectorised evaluator of HF's formula (no plan, no kernel)
    want = {cfg: (plan.bucket_values(*cfg, grid), plan.bucket_values(*cfg, rel)) for _, cfg in jobs}
    plan._plan.cache_clear()  # the threads build the plans, several at once

    def right(job):
        backend, (bs, mp) = job
        m = relative.deberta_bucket_matrix(700, 900, bucket_size=bs, max_position=mp, backend=backend)
        v = relative.deberta_bucket(rel, bs, mp, backend=backend)
        return np.array_equal(m, want[bs, mp][0]) and np.array_equal(v, want[bs, mp][1])

    assert not failures_at_once(jobs, right)


def _child(conn, backend):
    m = relative.deberta_bucket_matrix(700, 900, backend=backend)
    s = relative.shaw_positions(700, 900, max_relative_position=16, backend=backend)
    conn.send((m.tobytes(), s.tobytes()))
    conn.close()


@pytest.mark.any_backend
@pytest.mark.parametrize("backend", FAST)
def test_fork_after_parallel_fill(backend):
    """A child forked after parallel fills of both matrices computes the parent's bits."""
    import multiprocessing as mp

    m = relative.deberta_bucket_matrix(700, 900, backend=backend)
    s = relative.shaw_positions(700, 900, max_relative_position=16, backend=backend)
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(child, backend))
    proc.start()
    assert parent.poll(120), "the forked child did not answer"
    got = parent.recv()
    proc.join(30)
    assert proc.exitcode == 0
    assert got == (m.tobytes(), s.tobytes())


@pytest.mark.any_backend
@pytest.mark.parametrize("bs, mp", [(256, 512), (17, 10), (257, 1000), (256, 2**62), (512, 512), (64, 34)])
def test_direct_table_is_the_plan(bs, mp):
    """Where the plan has a direct table, its (t, v0, v1) of each slot give the plan's own
    value (last start at or below d) at every distance of the plan, both sides of every
    start and at random ones; plans with a slot of two starts past its first have none."""
    p = plan.bucket_plan(bs, mp, 2**20)
    table = plan.direct_table(p.starts, p.values)
    inside = np.diff(np.searchsorted(p.starts, plan._SLOT_STARTS, side="right"))
    assert (table.size == 0) == bool((inside > 1).any())
    assert (p.direct == table).all()
    if not table.size:
        return
    rng = np.random.default_rng(bs * 7 + 1)
    d = np.concatenate([np.arange(p.mid + 1, min(p.reach, 70000) + 1), (p.starts[:, None] + np.arange(-1, 2)).ravel(),
                        rng.integers(p.mid + 1, p.reach, 100000, endpoint=True)])
    d = d[(d > p.mid) & (d <= p.reach)]
    want = p.values[np.searchsorted(p.starts, d, side="right") - 1]
    slot = table.reshape(-1, 3)[plan.slot_of(d)]
    assert (np.where(d >= slot[:, 0], slot[:, 2], slot[:, 1]) == want).all()


@pytest.mark.any_backend
@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_random_positions_on_each_backend(fast_backend, dtype):
    """The bench's workload (random positions in (-2**18, 2**18), DeBERTa-v3's plan: its
    direct table) and a plan without one, large enough for the parallel kernels, against the
    formula (HF's float32 operations emulated; HF itself in the tests above)."""
    rng = np.random.default_rng(3)
    rel = rng.integers(-(2**18) + 1, 2**18, 300_000)
    rel[:600] = np.arange(-300, 300)
    for bs, mp in ((256, 512), (512, 512)):
        assert plan.bucket_plan(bs, mp, 2**18).direct.size == (3 * plan.INDEX_SLOTS if bs == 256 else 0)
        want = plan.bucket_values(bs, mp, rel)
        got = relative.deberta_bucket(rel, bs, mp, dtype=dtype, backend=fast_backend)
        assert got.dtype == np.dtype(dtype) and (got == want).all()
