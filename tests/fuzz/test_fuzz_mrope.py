"""Property-based fuzzing of the M-RoPE position ids (fastpe.rope._mrope), hypothesis.

* **bad input**: one argument of a valid call replaced by a drawn bad value (wrong shapes,
  dtypes, signs, grids that do not fit the token runs, unknown models, bad configs): a
  ``TypeError`` or ``ValueError`` naming the argument, every argument as it was;
* **good input**: long drawn prompts (many runs, large grids, holes in the mask): the C and
  numba kernels and their pure-Python twins give the same bits, and the positions keep the
  invariants of the layout (text runs step by one; a vision run's height and width axes span
  its merged grid; the delta is ``max + 1 - attended``).

Reproducible: a fixed seed, no example database (``support.strategies.fuzz``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastpe.rope._mrope import MODELS, mrope_next_positions, mrope_positions, positions_from_cu_seqlens
from conftest import AVAILABLE
from support.strategies import ANY, REJECT, bits, fuzz, judge

IMAGE, VIDEO, START, END = 151655, 151656, 151652, 151653


def valid_call(model):
    ids = np.array([[3, 4, START] + [IMAGE] * 6 + [END, 5, START] + [VIDEO] * 8 + [END, 6],
                    [0, 0, START] + [IMAGE] * 6 + [END, 5, START] + [VIDEO] * 8 + [END, 6]], dtype=np.int64)
    mask = np.ones_like(ids)
    mask[1, :2] = 0
    videos = [[2, 4, 4], [2, 4, 4]] if model != "qwen3_vl" else [[1, 8, 4], [1, 8, 4]]
    kwargs = dict(input_ids=ids, image_grid_thw=np.array([[1, 4, 6], [1, 4, 6]]),
                  video_grid_thw=np.array(videos), attention_mask=mask, model=model)
    if model == "qwen2_5_vl":
        kwargs["second_per_grid_ts"] = np.array([0.5, 1 / 3], dtype=np.float32)
    return kwargs


BAD = {
    "input_ids": [np.zeros((2,), np.int64), np.zeros((2, 3, 4), np.int64), np.zeros((2, 20)), "ids",
                  np.zeros((2, 20), bool), np.zeros((0, 5), np.int64)],
    "image_grid_thw": [np.array([[1, 4]]), np.array([[1, 4, 6]]), np.array([[1, 4, 6]] * 3),
                       np.array([[1.0, 4.0, 6.0]] * 2), np.array([[0, 4, 6]] * 2), np.array([[1, 5, 6]] * 2),
                       np.array([[1, -4, 6]] * 2), np.array([[1, 4, 8]] * 2), np.zeros((2, 3, 1), np.int64), "grid"],
    "video_grid_thw": [np.array([[2, 4, 4]]), np.array([[2, 4, 4]] * 3), np.array([[3, 4, 4]] * 2),
                       np.array([[2, 4]] * 2), np.array([[2.5, 4, 4]] * 2), np.array([[2, 0, 4]] * 2)],
    "attention_mask": [np.ones((2, 5), np.int64), np.ones((3, 22), np.int64), np.full((2, 22), 2),
                       np.full((2, 22), 0.5), np.zeros((2, 22), np.int64), "mask"],
    "model": ["qwen2", "", 7, None, "qwen2_5_omni"],
    "config": [3, [1, 2], {"vision_config": {"spatial_merge_size": 0}},
               {"vision_config": {"spatial_merge_size": 2.0}}, {"image_token_id": "x"},
               {"image_token_id": VIDEO}, {"vision_config": 5}, "/nonexistent/config.json"],
}


#: the arguments an error about a bad value of each argument may name
BLAME = {
    "input_ids": {"input_ids"},
    "image_grid_thw": {"image_grid_thw"},
    "video_grid_thw": {"video_grid_thw", "second_per_grid_ts"},  # one time value per video
    "attention_mask": {"attention_mask"},
    "model": {"model"},
    "config": {"config"},
}


def call(**kwargs):
    return mrope_positions(kwargs.pop("input_ids"), **kwargs)


@pytest.mark.parametrize("model", MODELS)
def test_valid_call_accepted(model):
    pos, delta = call(**valid_call(model))
    assert pos.shape == (3, 2, 22) and delta.shape == (2, 1)


@pytest.mark.parametrize("model", MODELS)
@fuzz(60)
@given(data=st.data())
def test_bad_argument_refused(model, data):
    kwargs = valid_call(model)
    name = data.draw(st.sampled_from(sorted(BAD)))
    kwargs[name] = data.draw(st.sampled_from(BAD[name]))
    accepted, _ = judge(call, kwargs, blame=BLAME[name], expect=REJECT)
    assert not accepted


@fuzz(40)
@given(seconds=st.sampled_from([[float("inf"), 1.0], [-0.5, 1.0], [1.0], [1.0, 2.0, 3.0], ["a", "b"],
                                 np.array([1.0, 2.0], np.float16), np.array([[1.0, 2.0]]), [True, False],
                                 [1e30, 1e30]]))
def test_bad_seconds_refused(seconds):
    kwargs = valid_call("qwen2_5_vl")
    kwargs["second_per_grid_ts"] = seconds
    accepted, _ = judge(lambda **kw: mrope_positions(kw.pop("input_ids"), **kw), kwargs,
                        blame={"second_per_grid_ts"}, expect=REJECT)
    assert not accepted


GOOD_DELTAS = np.array([[3], [-2]], np.int64)


@fuzz(60)
@given(deltas=st.sampled_from([GOOD_DELTAS, np.zeros((2, 2), np.int64), np.zeros((2, 1)), np.zeros((0, 1), np.int64), "d"]),
       start=st.sampled_from([0, 5, -1, 1.5, 2 ** 63]), count=st.sampled_from([0, 3, -2, 2.0]))
def test_bad_next_positions_refused(deltas, start, count):
    good = deltas is GOOD_DELTAS and start in (0, 5) and isinstance(count, int) and count >= 0
    accepted, result = judge(mrope_next_positions, dict(rope_deltas=deltas, start=start, count=count),
                             blame={"rope_deltas", "start", "count"}, expect=ANY if good else REJECT)
    assert accepted == good
    if good:
        assert result.shape == (3, 2, count)
        np.testing.assert_array_equal(result[2], start + np.arange(count) + GOOD_DELTAS)


@fuzz(30)
@given(cu=st.sampled_from([[], [1, 2], [0, 3, 1], [0.0, 1.0], np.zeros((2, 2), np.int64), "cu"]))
def test_bad_cu_seqlens_refused(cu):
    accepted, _ = judge(positions_from_cu_seqlens, dict(cu_seqlens=cu), blame={"cu_seqlens"}, expect=REJECT)
    assert not accepted


# ----------------------------------------------------------------------------- good input


@st.composite
def long_prompts(draw, model):
    merge = draw(st.sampled_from([1, 2]))
    batch = draw(st.integers(1, 4))
    rows, images, videos = [], [], []
    for _ in range(batch):
        row = []
        for _ in range(draw(st.integers(0, 6))):
            row += draw(st.lists(st.integers(0, 150000), max_size=40))
            t = draw(st.integers(1, 4))
            h, w = merge * draw(st.integers(1, 12)), merge * draw(st.integers(1, 12))
            plane = (h // merge) * (w // merge)
            if draw(st.booleans()):
                images.append((1, h, w))
                row += [START] + [IMAGE] * plane + [END]
            else:
                videos.append((t, h, w))
                if model == "qwen3_vl":
                    for _ in range(t):
                        row += [7, START] + [VIDEO] * plane + [END]
                else:
                    row += [START] + [VIDEO] * (t * plane) + [END]
        row += draw(st.lists(st.integers(0, 150000), min_size=1, max_size=40))
        rows.append(row)
    seq = max(map(len, rows)) + draw(st.integers(0, 5))
    ids = np.zeros((batch, seq), np.int64)
    mask = np.zeros((batch, seq), np.int8)
    for b, row in enumerate(rows):
        # left padding, and holes at some plain text tokens (dropped before the runs are cut,
        # as HF drops them; never a vision-start/end token, which would join two runs)
        ids[b, seq - len(row):] = row
        mask[b, seq - len(row):] = 1
        plain = np.flatnonzero((ids[b] < 150001) & (mask[b] == 1))
        holes = draw(st.lists(st.sampled_from(plain.tolist()), max_size=3, unique=True)) if len(plain) > 1 else []
        mask[b, holes[: len(plain) - 1]] = 0
    seconds = None
    if model == "qwen2_5_vl" and videos and draw(st.booleans()):
        seconds = draw(st.lists(st.floats(0, 4, allow_nan=False), min_size=len(videos), max_size=len(videos)))
    config = {"vision_config": {"spatial_merge_size": merge}}
    return ids, mask, np.array(images, np.int64).reshape(-1, 3), np.array(videos, np.int64).reshape(-1, 3), seconds, config


@pytest.mark.any_backend
@pytest.mark.parametrize("model", MODELS)
@fuzz(40)
@given(data=st.data())
def test_backends_agree_and_layout_holds(model, data):
    ids, mask, images, videos, seconds, config = data.draw(long_prompts(model))
    got = {b: mrope_positions(ids, image_grid_thw=images, video_grid_thw=videos, second_per_grid_ts=seconds,
                              attention_mask=mask, model=model, config=config, backend=b)
           for b in AVAILABLE}
    pos_ref, delta_ref = got["python"]
    for b, (pos, delta) in got.items():
        assert bits(pos) == bits(pos_ref) and bits(delta) == bits(delta_ref), b
    pos, delta = got[AVAILABLE[0]]
    keep = mask.astype(bool)
    assert (pos[:, ~keep] == 0).all()
    n_att = keep.sum(1)
    for b in range(ids.shape[0]):
        row = pos[:, b, keep[b]]
        assert int(delta[b, 0]) == int(row.max()) + 1 - int(n_att[b])
        text = ~np.isin(ids[b, keep[b]], [IMAGE, VIDEO])
        assert (row[0, text] == row[1, text]).all() and (row[1, text] == row[2, text]).all()
        tv = row[0, text]
        assert (np.diff(tv) >= 1).all()
        # the decoding continuation starts right after the prompt's largest position
        nxt = mrope_next_positions(delta[b:b + 1], int(n_att[b]), 2)
        assert int(nxt[0, 0, 0]) == int(row.max()) + 1
