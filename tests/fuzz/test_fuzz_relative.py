"""Property-based fuzzing of the DeBERTa buckets and Shaw's clipped positions (fastpe.relative).

* **good input**: drawn configurations (small and large bucket sizes, odd ones, max_position
  just above bucket_size // 2 or huge) and relative positions (edges, huge values of both
  signs, every integer dtype in either byte order, lists, views, read-only arrays, a CPU
  tensor): every backend writes the same bits, equal to the exact reference (HF's float32
  formula emulated in fractions, or tensor2tensor's formula); where torch's float32 log does
  not decide (no distance of the draw past 2**18), equal to HF's own function;
* **bad input**: one argument of a valid call replaced by a drawn bad value (floats, NaN,
  bools, -2**63, values past int64, ragged lists, bad sizes, dtypes and outs): a
  ``TypeError`` or ``ValueError`` naming the argument, every argument as it was.

Reproducible: a fixed seed, no example database (``support.strategies.fuzz``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastpe import relative
from conftest import AVAILABLE
from support.strategies import (BAD_BACKENDS, BAD_BOOLS, BAD_INTS, HUGE, REJECT, SAME, bits, fuzz, int_array_form,
                                judge)

torch = pytest.importorskip("torch")
deb = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")

pytestmark = pytest.mark.any_backend  # every test names the backends it calls

FAST = [b for b in AVAILABLE if b != "python"]
EDGES = (0, 1, -1, 127, -128, 128, 129, -129, 511, 512, -513, 2**24 + 1, 2**31, -(2**31), 2**53 + 1, 2**62,
         -(2**62), 2**63 - 1, -(2**63 - 1))


@st.composite
def deberta_config(draw):
    bucket_size = draw(st.one_of(st.sampled_from((256, 2, 3, 4, 17, 255, 257, 4096)), st.integers(2, 600)))
    mid = bucket_size // 2
    max_position = draw(st.one_of(st.sampled_from((512, mid + 2, mid + 3, 2 * bucket_size, 2**40, 2**62)),
                                  st.integers(mid + 2, 1 << 20)))
    return {"bucket_size": bucket_size, "max_position": max(max_position, mid + 2)}


def _fits(cfg, values) -> bool:
    from fastpe._plans.deberta import MAX_STARTS, plan_size

    reach = max((abs(v) for v in values), default=0)
    return plan_size(cfg["bucket_size"], cfg["max_position"], reach) <= MAX_STARTS


def hf(rel, cfg) -> np.ndarray:
    out = deb.make_log_bucket_position(torch.as_tensor(np.asarray(rel, dtype=np.int64)), cfg["bucket_size"],
                                       cfg["max_position"])
    return out.to(torch.long).numpy()


@fuzz(150)
@given(cfg=deberta_config(), data=st.data())
def test_deberta_buckets_agree(cfg, data):
    values = data.draw(st.lists(st.one_of(st.sampled_from(EDGES), st.integers(-3000, 3000),
                                          st.integers(-(2**63 - 1), 2**63 - 1)), min_size=1, max_size=24))
    if not _fits(cfg, values):
        values = [v % 4096 - 2048 for v in values]
    rel, form = data.draw(int_array_form(values, allow_float=False))
    if data.draw(st.integers(0, 5)) == 0:
        rel, form = torch.tensor(values, dtype=torch.int64), "tensor"
    dtype = data.draw(st.sampled_from((None, np.int64, np.int32, "int32")))
    got = {b: relative.deberta_bucket(rel, **cfg, dtype=dtype, backend=b) for b in AVAILABLE}
    first = next(iter(got.values()))
    assert all(bits(a) == bits(first) for a in got.values()), (cfg, values, form)
    assert first.shape == (len(values),) and (first.dtype == np.int32) == (dtype in (np.int32, "int32"))
    small = [v for v in values if abs(v) < 2**18]
    if small:  # far below any fragile argument of the draw: HF's own values
        mine = relative.deberta_bucket(small, **cfg, backend=FAST[0] if FAST else "python")
        assert np.array_equal(mine, hf(small, cfg)), (cfg, small)
    q_len, k_len = data.draw(st.integers(1, 40)), data.draw(st.integers(1, 40))
    mats = {b: relative.deberta_bucket_matrix(q_len, k_len, **cfg, backend=b) for b in AVAILABLE}
    m0 = next(iter(mats.values()))
    assert all(bits(a) == bits(m0) for a in mats.values())
    rel_m = np.arange(q_len)[:, None] - np.arange(k_len)[None, :]
    assert np.array_equal(m0, relative.deberta_bucket(rel_m, **cfg)), "the matrix is the buckets of i - j"


@fuzz(150)
@given(data=st.data())
def test_shaw_positions_agree(data):
    k_len = data.draw(st.integers(1, 300))
    q_len = data.draw(st.integers(1, k_len))
    m = data.draw(st.one_of(st.sampled_from((0, 1, 16, 20, 2**30, 2**31 - 1, 2**62)), st.integers(0, 400)))
    cache = data.draw(st.booleans())
    dtype = "int64" if m + (0 if cache else min(m, q_len - 1)) > 2**31 - 1 else data.draw(
        st.sampled_from((None, "int64", np.int32)))
    got = {b: relative.shaw_positions(q_len, k_len, max_relative_position=m, cache=cache, dtype=dtype, backend=b)
           for b in AVAILABLE}
    first = next(iter(got.values()))
    assert all(bits(a) == bits(first) for a in got.values())
    # tensor2tensor's formula, in Python integers
    rows = [k_len - 1] if cache else [i + k_len - q_len for i in range(q_len)]
    want = [[min(max(j - p, -m), m) + m for j in range(k_len)] for p in rows]
    assert first.tolist() == want


@fuzz(200)
@given(cfg=deberta_config(), data=st.data())
def test_refuses_bad_arguments(cfg, data):
    fn = data.draw(st.sampled_from((relative.deberta_bucket, relative.deberta_bucket_matrix, relative.shaw_positions)))
    pools = {"backend": BAD_BACKENDS,
             "dtype": ("float32", np.float64, np.uint64, np.dtype(">i8"), np.dtype(">i4"), np.int16, "i8 ", 3,
                       object, "bfloat16", "int128", [np.int64])}
    if fn is relative.shaw_positions:
        call = {"q_len": 3, "k_len": 4, "max_relative_position": 2}
        pools.update(q_len=BAD_INTS + (0, -1, 2**32 + 1, 5), k_len=BAD_INTS + (0, -1, 2**32 + 1, 2),
                     max_relative_position=BAD_INTS + (-1, 2**62 + 1), cache=BAD_BOOLS)
        shape = (3, 4)
    else:
        call = dict(cfg)
        pools.update(bucket_size=tuple(v for v in BAD_INTS if not isinstance(v, bool)) + (1, 2**16 + 2),
                     max_position=tuple(v for v in BAD_INTS if not isinstance(v, bool)) + (2**62 + 1,))
        if fn is relative.deberta_bucket:
            call["relative_position"] = [0, -3, 900]
            pools["relative_position"] = ([1.5], [True], "12", np.array([-(2**63)], dtype=np.int64),
                                          np.array([2**63], dtype=np.uint64), [HUGE], [[1], [1, 2]],
                                          np.array([1.0]), np.array([math.nan]), [None], np.array([1 + 1j]),
                                          np.array([True, False]))
            shape = (3,)
        else:
            call.update(q_len=3, k_len=4)
            pools.update(q_len=BAD_INTS + (0, -1, 2**32 + 1), k_len=BAD_INTS + (0, -1, 2**32 + 1))
            shape = (3, 4)
    pools["out"] = tuple(np.empty(shape, dtype=d) for d in (np.float32, np.int16, np.uint64, ">i8")) + (
        np.empty(shape[:-1] + (shape[-1] + 1,), np.int64), np.empty(shape + (2,), np.int64)[..., 0],
        np.empty(shape, np.int64).tolist())
    name = data.draw(st.sampled_from(sorted(pools)))
    value = data.draw(st.sampled_from(pools[name]))
    blame = {name}
    if name == "bucket_size":
        blame = {name, "max_position"}  # a smaller mid can make max_position the one too small
    if name == "q_len" and fn is relative.shaw_positions:
        blame = {name, "k_len"}
    if name == "dtype" and fn is relative.shaw_positions:
        blame = {name}
    judge(fn, {**call, name: value}, blame=blame, expect=REJECT)


@fuzz(60)
@given(cfg=deberta_config(), data=st.data())
def test_deberta_out_and_views(cfg, data):
    """``out=`` of either dtype is filled and returned; a view of relative positions with any
    strides means the same positions."""
    values = data.draw(st.lists(st.integers(-5000, 5000), min_size=1, max_size=30))
    view = np.repeat(np.array(values, dtype=np.int64), 2)[::2]  # a stride of two
    want = relative.deberta_bucket(np.array(values), **cfg)
    out = np.full(len(values), -7, dtype=data.draw(st.sampled_from((np.int64, np.int32))))
    ok, got = judge(relative.deberta_bucket, dict(relative_position=view, out=out, **cfg), blame={"out"},
                    expect=SAME, inplace=("out",))
    assert ok and got is out and np.array_equal(out, want)
    assert np.array_equal(relative.deberta_bucket(np.array(values)[::-1], **cfg), want[::-1])  # negative stride
