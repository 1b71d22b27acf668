"""fastpe.relative.shaw_positions equal to tensor2tensor's _generate_relative_positions_matrix.

tensorflow is not installed: the truth is tensor2tensor's published formula
(tensor2tensor/layers/common_attention.py, ``_generate_relative_positions_matrix(length_q,
length_k, max_relative_position, cache=False)``) written out below in NumPy, operation for
operation: ``tf.range`` (int32), the query range the last ``length_q`` of the key range when
the lengths differ, ``k[None, :] - q[:, None]``, ``tf.clip_by_value`` to ``±k`` and ``+ k``;
``cache=True`` is the single row ``tf.range(-length_k + 1, 1, 1)`` clipped and shifted.
"""

from __future__ import annotations

import numpy as np
import pytest

from fastpe import relative
from conftest import AVAILABLE
from support.inputs import check_out_contract


def t2t(length_q, length_k, max_relative_position, cache=False) -> np.ndarray:
    if not cache:
        if length_q == length_k:
            range_vec_q = range_vec_k = np.arange(length_q, dtype=np.int32)
        else:
            range_vec_k = np.arange(length_k, dtype=np.int32)
            range_vec_q = range_vec_k[-length_q:]
        distance_mat = range_vec_k[None, :] - range_vec_q[:, None]
    else:
        distance_mat = np.arange(-length_k + 1, 1, 1, dtype=np.int32)[None, :]
    distance_mat_clipped = np.clip(distance_mat, -max_relative_position, max_relative_position)
    return distance_mat_clipped + max_relative_position


@pytest.mark.any_backend
@pytest.mark.parametrize("backend", AVAILABLE)
def test_equal_to_tensor2tensor(backend):
    shapes = [(1, 1), (3, 5), (5, 5), (1, 40), (17, 33)] + ([] if backend == "python" else [(300, 300), (64, 2048)])
    for m in (0, 1, 2, 3, 16, 20, 64, 1000):
        for q, k in shapes:
            for cache in (False, True):
                got = relative.shaw_positions(q, k, max_relative_position=m, cache=cache, backend=backend)
                want = t2t(q, k, m, cache)
                assert got.dtype == np.int32 and got.shape == want.shape and (got == want).all(), (m, q, k, cache)


def test_defaults_dtype_and_big_values():
    assert relative.shaw_positions(4, max_relative_position=2).tolist() == t2t(4, 4, 2).tolist()
    got = relative.shaw_positions(3, 6, max_relative_position=2**40, dtype="int64")
    assert got.dtype == np.int64 and (got == np.arange(6)[None, :] - np.arange(3, 6)[:, None] + 2**40).all()
    with pytest.raises(ValueError, match="int32"):
        relative.shaw_positions(3, 6, max_relative_position=2**31)
    # the largest value is what counts: k = 2**31 - 1 in the cache row (values up to k) fits
    row = relative.shaw_positions(1, 6, max_relative_position=2**31 - 1, cache=True)
    assert row.dtype == np.int32 and row[0, -1] == 2**31 - 1


@pytest.mark.any_backend
@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(q_len=5, k_len=3, max_relative_position=2), ValueError, "q_len"),
    (dict(q_len=0, max_relative_position=2), ValueError, "q_len"),
    (dict(q_len=3, k_len=0, max_relative_position=2), ValueError, "k_len"),
    (dict(q_len=3, max_relative_position=-1), ValueError, "max_relative_position"),
    (dict(q_len=3, max_relative_position=2.0), TypeError, "max_relative_position"),
    (dict(q_len=3, max_relative_position=2, cache=1), TypeError, "cache"),
    (dict(q_len=3, max_relative_position=2, dtype="uint8"), TypeError, "dtype"),
    (dict(q_len=2**21, max_relative_position=2), ValueError, "2\\*\\*40"),
])
def test_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        relative.shaw_positions(**kwargs)


@pytest.mark.any_backend
def test_max_relative_position_is_required():
    with pytest.raises(TypeError):
        relative.shaw_positions(3)


def test_out_contract():
    check_out_contract(lambda **kw: relative.shaw_positions(9, 13, max_relative_position=4, **kw),
                       other_dtype="int64",
                       bad_input=lambda out: relative.shaw_positions(9, 13, max_relative_position=-4, out=out))


@pytest.mark.any_backend
def test_threads_at_once_get_the_formula():
    """Sixteen callers at once, large enough for the parallel paths: tensor2tensor's values."""
    from support.threads import failures_at_once

    fast = [b for b in AVAILABLE if b != "python"]
    jobs = [(b, m, dt) for b in fast for m in (16, 300) for dt in ("int32", "int64")] * 2
    want = {m: t2t(1500, 2000, m) for m in (16, 300)}

    def right(job):
        backend, m, dt = job
        got = relative.shaw_positions(1500, 2000, max_relative_position=m, dtype=dt, backend=backend)
        return got.dtype == np.dtype(dt) and np.array_equal(got, want[m])

    assert not failures_at_once(jobs, right)
