"""numba's RoPE apply cut into work items: (batch, 4 heads of q's then k's, 256 rows) where a
head's rows are adjacent, (batch, 16 tokens) otherwise.  Shapes that cut those items unevenly
(sequences not a multiple of 256, head counts not a multiple of 4, q and k head counts that
differ, several batches, per-batch positions, partial rotary_dim, both layouts and both array
forms) must give the cython backend's bits (the C kernel's own items) and, on small ones, the
exact reference's; the parallel twin must give the serial one's."""

from __future__ import annotations

import numpy as np
import pytest

from fastpe.rope._core import apply_qk_from_inv_freq

pytestmark = pytest.mark.any_backend

kernels = pytest.importorskip("fastpe._backends.numba.kernels")
numba_backend = pytest.importorskip("fastpe._backends.numba.backend")
try:
    from fastpe._backends import cython as _cython  # noqa: F401
except ImportError:  # the extension is not built
    HAVE_CYTHON = False
else:
    HAVE_CYTHON = True

from fastpe._backends._walk import table_args  # noqa: E402


def _inv_freq(n_freq: int, head_dim: int) -> np.ndarray:
    return 1.0 / (10000.0 ** (np.arange(0, 2 * n_freq, 2, dtype=np.float64) / head_dim))


def _inputs(form, batch, hq, hk, seq, head_dim, per_batch, seed):
    rng = np.random.default_rng(seed)
    if form == "bhsd":
        q = rng.standard_normal((batch, hq, seq, head_dim), dtype=np.float32)
        k = rng.standard_normal((batch, hk, seq, head_dim), dtype=np.float32)
    else:  # (tokens, heads, head_dim): one batch
        q = rng.standard_normal((seq, hq, head_dim), dtype=np.float32)
        k = rng.standard_normal((seq, hk, head_dim), dtype=np.float32)
    if per_batch and form == "bhsd":
        pos = rng.integers(0, 1 << 20, size=(batch, seq), dtype=np.uint32)
    else:
        pos = (np.arange(seq, dtype=np.uint32) * 7 + 3).astype(np.uint32)
    return q, k, pos


def _apply(backend, q, k, pos, inv_freq, layout):
    q, k = q.copy(), k.copy()
    apply_qk_from_inv_freq(q, k, pos, inv_freq, 1.0, layout=layout, rotary_dim=2 * len(inv_freq),
                           backend=backend)
    return q, k


# (form, batch, hq, hk, seq, head_dim, n_freq, per_batch): large enough for the parallel kernel
CASES = [
    ("bhsd", 1, 32, 8, 300, 64, 32, False),    # seq past one run, GQA heads 40 = 10 groups
    ("bhsd", 3, 6, 3, 257, 64, 32, True),      # 9 heads: a group of one; runs of 256 and 1
    ("bhsd", 2, 5, 2, 513, 80, 24, False),     # partial rotary_dim 48 of 80; groups straddle q/k
    ("bhsd", 2, 7, 0, 600, 64, 32, True),      # no k's heads (hk = 0 case of the groups)
    ("bhsd", 4, 3, 1, 100, 128, 64, False),    # 4 heads: one group; seq below one run
    ("bhsd", 2, 2, 3, 1, 64, 32, True),        # one position: rows of a head also adjacent
    ("thd", 1, 7, 3, 301, 64, 32, False),      # tokens form: items of 16 tokens, every head
    ("thd", 1, 1, 1, 700, 64, 20, False),      # one head: head-major walk in the tokens form
    ("thd", 1, 1, 3, 500, 64, 32, False),      # q's rows adjacent, k's not: the token walk
]


@pytest.mark.skipif(not HAVE_CYTHON, reason="the cython extension is not built")
@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_numba_apply_equals_cython_bit_for_bit(case, layout):
    form, batch, hq, hk, seq, head_dim, n_freq, per_batch = case
    q, k, pos = _inputs(form, batch, hq, hk, seq, head_dim, per_batch, seed=hq * 1000 + seq)
    inv_freq = _inv_freq(n_freq, head_dim)
    if hk == 0:  # apply_qk_ wants a k: rotate q alone through the backend operation
        qn, qc = q.copy(), q.copy()
        numba_backend.rope_apply(qn, None, pos, tuple(inv_freq.tolist()), 1.0, layout)
        _cython.rope_apply(qc, None, pos, tuple(inv_freq.tolist()), 1.0, layout)
        assert qn.tobytes() == qc.tobytes()
        assert not np.array_equal(qn, q)
        return
    qn, kn = _apply("numba", q, k, pos, inv_freq, layout)
    qc, kc = _apply("cython", q, k, pos, inv_freq, layout)
    assert qn.tobytes() == qc.tobytes()
    assert kn.tobytes() == kc.tobytes()
    tail = 2 * n_freq  # columns past rotary_dim are untouched
    assert np.array_equal(qn[..., tail:], q[..., tail:]) and np.array_equal(kn[..., tail:], k[..., tail:])
    assert not np.array_equal(qn[..., :tail], q[..., :tail])


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("case", [
    ("bhsd", 2, 5, 3, 259, 16, 6, True),
    ("bhsd", 1, 4, 1, 9, 8, 4, False),
    ("thd", 1, 3, 2, 33, 16, 8, False),
], ids=lambda c: "-".join(map(str, c)))
def test_numba_apply_equals_exact_reference(case, layout):
    form, batch, hq, hk, seq, head_dim, n_freq, per_batch = case
    q, k, pos = _inputs(form, batch, hq, hk, seq, head_dim, per_batch, seed=seq)
    inv_freq = _inv_freq(n_freq, head_dim)
    qn, kn = _apply("numba", q, k, pos, inv_freq, layout)
    qr, kr = _apply("python", q, k, pos, inv_freq, layout)
    assert qn.tobytes() == qr.tobytes()
    assert kn.tobytes() == kr.tobytes()


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_parallel_kernel_equals_serial(case, layout):
    form, batch, hq, hk, seq, head_dim, n_freq, per_batch = case
    q, k, pos = _inputs(form, batch, hq, hk, seq, head_dim, per_batch, seed=seq + hk)
    inv_freq = tuple(_inv_freq(n_freq, head_dim).tolist())
    rows = pos.size
    table = np.empty((rows, 2, n_freq))
    numba_backend.rope_table(pos.reshape(-1), inv_freq, 1.0, table)
    stride = seq if pos.ndim == 2 else 0
    neox = layout == "neox"
    out = []
    for run in (kernels.rope_apply_serial, kernels.rope_apply_parallel):
        qx, kx = q.copy(), k.copy()
        args, _, _ = table_args(qx, kx if hk else None, table, stride, 0, seq)
        run(*args, neox)
        out.append((qx, kx))
    (qs, ks), (qp, kp) = out
    assert qs.tobytes() == qp.tobytes() and ks.tobytes() == kp.tobytes()
    assert not np.array_equal(qs, q)
    # a sub-range of the sequence: items cut from s_begin, table rows from 0
    lo, hi = seq // 3, seq - seq // 5
    if hi > lo:
        sub = np.ascontiguousarray(pos[..., lo:hi]).reshape(-1)
        table = np.empty((sub.size, 2, n_freq))
        numba_backend.rope_table(sub, inv_freq, 1.0, table)
        res = []
        for run in (kernels.rope_apply_serial, kernels.rope_apply_parallel):
            qx, kx = q.copy(), k.copy()
            args, _, _ = table_args(qx, kx if hk else None, table, (hi - lo) if pos.ndim == 2 else 0, lo, hi)
            run(*args, neox)
            res.append((qx, kx))
        (qs2, ks2), (qp2, kp2) = res
        assert qs2.tobytes() == qp2.tobytes() and ks2.tobytes() == kp2.tobytes()
        # rows outside [lo, hi) untouched; inside, the full call's rows
        seq_axis = 2 if q.ndim == 4 else 0
        inside = [slice(None)] * q.ndim
        inside[seq_axis] = slice(lo, hi)
        inside = tuple(inside)
        assert qs2[inside].tobytes() == qs[inside].tobytes()
        assert ks2[inside].tobytes() == ks[inside].tobytes()
        mask = np.ones(q.shape[seq_axis], bool)
        mask[lo:hi] = False
        assert np.array_equal(np.compress(mask, qs2, axis=seq_axis), np.compress(mask, q, axis=seq_axis))
