"""M-RoPE position ids (fastpe.rope._mrope) against HF transformers' own code.

``get_rope_index`` is a method of each Qwen-VL model that reads only ``self.config`` and
``self.get_vision_position_ids``: it is called here on a bare object holding the two (no
weights, no model built), over hypothesis-drawn prompts -- random text, 0-3 images, 0-2
videos of random grids, random left padding, batch 1-3 -- for every model, and every
available backend (the C and numba kernels and their pure-Python twins) must equal it and
each other.
"""

from __future__ import annotations

import types
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastpe.rope._mrope import (
    DEFAULTS,
    MODELS,
    mrope_next_positions,
    mrope_positions,
    positions_from_attention_mask,
    positions_from_cu_seqlens,
)
from conftest import AVAILABLE, FAST
from support.strategies import fuzz

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
qwen2 = pytest.importorskip("transformers.models.qwen2_vl.modeling_qwen2_vl")
qwen25 = pytest.importorskip("transformers.models.qwen2_5_vl.modeling_qwen2_5_vl")
qwen3 = pytest.importorskip("transformers.models.qwen3_vl.modeling_qwen3_vl")

BACKENDS = tuple(AVAILABLE)
MODEL_CLASSES = {
    "qwen2_vl": (qwen2.Qwen2VLModel, transformers.Qwen2VLConfig),
    "qwen2_5_vl": (qwen25.Qwen2_5_VLModel, transformers.Qwen2_5_VLConfig),
    "qwen3_vl": (qwen3.Qwen3VLModel, transformers.Qwen3VLConfig),
}
IMAGE, VIDEO, START, END, PAD = 151655, 151656, 151652, 151653, 151643


def hf_config(model, merge=2, tps=2):
    vision = {"spatial_merge_size": merge}
    if model == "qwen2_5_vl":
        vision["tokens_per_second"] = tps
    return MODEL_CLASSES[model][1](vision_config=vision)


def hf_model(model, config):
    """An object on which the model class's ``get_rope_index`` runs as on the model."""
    cls = MODEL_CLASSES[model][0]
    obj = types.SimpleNamespace(config=config, rope_deltas=None)
    obj.get_vision_position_ids = types.MethodType(cls.get_vision_position_ids, obj)
    obj.get_rope_index = types.MethodType(cls.get_rope_index, obj)
    obj.compute_3d_position_ids = types.MethodType(cls.compute_3d_position_ids, obj)
    return obj


def hf_rope_index(model, config, ids, *, images=None, videos=None, seconds=None, mask=None):
    """HF's answer; the token types as the processors build them (image 1, video 2)."""
    t = torch.as_tensor(ids)
    types_ = torch.zeros_like(t, dtype=torch.int32)
    types_[t == config.image_token_id] = 1
    types_[t == config.video_token_id] = 2
    kwargs = dict(
        image_grid_thw=None if images is None else torch.as_tensor(images),
        video_grid_thw=None if videos is None else torch.as_tensor(videos),
        attention_mask=None if mask is None else torch.as_tensor(mask),
    )
    if seconds is not None:
        kwargs["second_per_grid_ts"] = seconds if isinstance(seconds, torch.Tensor) else torch.as_tensor(seconds)
    pos, deltas = hf_model(model, config).get_rope_index(t, types_, **kwargs)
    return pos.numpy(), deltas.numpy()


def ours(model, config, ids, *, images=None, videos=None, seconds=None, mask=None, backend=None):
    return mrope_positions(ids, image_grid_thw=images, video_grid_thw=videos, second_per_grid_ts=seconds,
                           attention_mask=mask, model=model, config=config, backend=backend)


def assert_equal_all(model, config, ids, **kw):
    want_pos, want_delta = hf_rope_index(model, config, ids, **kw)
    got = {b: ours(model, config, ids, backend=b, **kw) for b in BACKENDS}
    for b, (pos, delta) in got.items():
        assert pos.dtype == np.int64 and delta.dtype == np.int64, b
        assert pos.shape == (3,) + np.shape(ids) and delta.shape == (np.shape(ids)[0], 1), b
        np.testing.assert_array_equal(pos, want_pos, err_msg=f"{model} positions [{b}]")
        np.testing.assert_array_equal(delta, want_delta, err_msg=f"{model} deltas [{b}]")
    return got[BACKENDS[0]]


# ----------------------------------------------------------------------------- prompts


@st.composite
def prompts(draw, model):
    """``(config, ids, mask, images, videos, seconds)``: a left-padded batch of prompts."""
    merge = draw(st.sampled_from([1, 2]))
    tps = draw(st.sampled_from([2, 4, 25]))
    config = hf_config(model, merge, tps)
    batch = draw(st.integers(1, 3))
    rows, images, videos = [], [], []
    text = st.lists(st.integers(0, 151642), max_size=12)
    for _ in range(batch):
        row = list(draw(text))
        n_img, n_vid = draw(st.integers(0, 3)), draw(st.integers(0, 2))
        items = draw(st.permutations(["i"] * n_img + ["v"] * n_vid))
        for item in items:
            h, w = merge * draw(st.integers(1, 4)), merge * draw(st.integers(1, 4))
            plane = (h // merge) * (w // merge)
            if item == "i":
                t = draw(st.sampled_from([1, 1, 2]))
                images.append((t, h, w))
                row += [START] + [IMAGE] * (t * plane) + [END]
            else:
                t = draw(st.integers(1, 3))
                videos.append((t, h, w))
                if model == "qwen3_vl":  # frames separated by their timestamp text
                    for _ in range(t):
                        row += [draw(st.integers(0, 1000)), START] + [VIDEO] * plane + [END]
                else:
                    row += [START] + [VIDEO] * (t * plane) + [END]
            row += draw(text)
        if not row:
            row = [draw(st.integers(0, 1000))]
        rows.append(row)
    extra = draw(st.integers(0, 3))
    seq = max(map(len, rows)) + extra
    pad = draw(st.sampled_from([PAD, PAD, IMAGE]))  # masked pad tokens may even be image ids
    ids = np.full((batch, seq), pad, dtype=np.int64)
    mask = np.zeros((batch, seq), dtype=np.int64)
    for b, row in enumerate(rows):
        ids[b, seq - len(row):] = row
        mask[b, seq - len(row):] = 1
    if mask.all() and draw(st.booleans()):
        mask = None
    seconds = None
    if model == "qwen2_5_vl" and videos and draw(st.booleans()):
        values = draw(st.lists(st.sampled_from([0.5, 2.0, 1 / 3, 1 / 24, 2 / 24, 2 / 25, 2 / 30, 1.0, 0.1, 3.0]),
                               min_size=len(videos), max_size=len(videos)))
        form = draw(st.sampled_from(["float32", "float64", "int"]))
        if form == "int":
            seconds = np.array([max(1, round(v)) for v in values], dtype=np.int64)
        else:
            seconds = np.array(values, dtype=form)
    return (config, ids, mask, np.array(images, dtype=np.int64).reshape(-1, 3) if images else None,
            np.array(videos, dtype=np.int64).reshape(-1, 3) if videos else None, seconds)


@pytest.mark.any_backend
@pytest.mark.parametrize("model", MODELS)
@fuzz(60)
@given(data=st.data())
def test_equals_hf_get_rope_index(model, data):
    config, ids, mask, images, videos, seconds = data.draw(prompts(model))
    assert_equal_all(model, config, ids, images=images, videos=videos, seconds=seconds, mask=mask)


@pytest.mark.any_backend
@pytest.mark.parametrize("model", MODELS)
def test_two_images_in_a_long_padded_prompt(model):
    """The benchmark's shape: two (1, 36, 52) images in ~4k tokens, batch 4 left-padded."""
    config = hf_config(model)
    rng = np.random.default_rng(1)
    n = 36 * 52 // 4
    rows = []
    for b in range(4):
        text = rng.integers(0, 150000, 3000 - 97 * b).tolist()
        rows.append(text[:1000] + [START] + [IMAGE] * n + [END] + text[1000:2000] + [START] + [IMAGE] * n + [END] + text[2000:])
    seq = max(map(len, rows))
    ids = np.full((4, seq), PAD, dtype=np.int64)
    mask = np.zeros((4, seq), dtype=np.int64)
    for b, row in enumerate(rows):
        ids[b, seq - len(row):] = row
        mask[b, seq - len(row):] = 1
    grids = np.array([[1, 36, 52]] * 8)
    pos, delta = assert_equal_all(model, config, ids, images=grids, mask=mask)
    assert (pos[:, mask == 0] == 0).all()
    assert_equal_all(model, config, ids[:1, seq - len(rows[0]):], images=grids[:2])


@pytest.mark.any_backend
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("masked", [False, True])
def test_text_only(model, masked):
    config = hf_config(model)
    ids = np.arange(30, dtype=np.int64).reshape(3, 10)
    mask = None
    if masked:
        mask = np.ones_like(ids)
        mask[1, :4] = 0
        mask[2, :9] = 0
    pos, delta = assert_equal_all(model, config, ids, mask=mask)
    assert (delta == 0).all()


@pytest.mark.any_backend
def test_non_left_padding_follows_hf():
    """A mask with holes: HF drops the masked tokens before cutting runs, so an image run
    may span a hole; the masked tokens get 0."""
    config = hf_config("qwen2_vl")
    ids = np.array([[1, START] + [IMAGE] * 2 + [7] + [IMAGE] * 2 + [END, 3]])
    mask = np.array([[1, 1, 1, 1, 0, 1, 1, 1, 1]])
    assert_equal_all("qwen2_vl", config, ids, images=[[1, 4, 4]], mask=mask)


# ----------------------------------------------------------------------------- Qwen2.5-VL time


TIME_VALUES = [1 / 24, 2 / 24, 0.5, 2.0, 1 / 3, 2 / 25, 2 / 30, 0.1, 0.7]


@pytest.mark.any_backend
@pytest.mark.parametrize("tps", [2, 4, 25])
def test_time_rule_float32_as_hf(tps):
    """``second_per_grid_ts`` as the processor returns it (a float32 tensor): HF's float32
    product, truncated.  Where float32 and exact arithmetic on the given numbers part, HF's
    float32 is what is returned."""
    config = hf_config("qwen2_5_vl", tps=tps)
    t = 48
    videos = np.array([[t, 2, 2]] * len(TIME_VALUES))
    ids = np.array([sum(([START] + [VIDEO] * t + [END, 5] for _ in TIME_VALUES), [])])
    as_list = list(TIME_VALUES)
    pos, _ = assert_equal_all("qwen2_5_vl", config, ids, videos=videos, seconds=np.array(as_list, dtype=np.float32))
    # a list of Python floats is what the processor turns into a float32 tensor
    hf_pos, _ = hf_rope_index("qwen2_5_vl", config, ids, videos=videos, seconds=torch.tensor(as_list))
    for b in BACKENDS:
        np.testing.assert_array_equal(ours("qwen2_5_vl", config, ids, videos=videos, seconds=as_list, backend=b)[0], hf_pos)
    # float64 and exact arithmetic on the same numbers differ somewhere (the test is not vacuous):
    # 1/3 with 25 tokens per second, frame 3: 25 in float32, 24 in float64 and exactly;
    # 0.7 with 2 or 4, frame 45
    exact, double = [], []
    for s in TIME_VALUES:
        exact += [int(i * tps * Fraction(s)) for i in range(t)]
        double += [int(i * (tps * s)) for i in range(t)]
    frames = pos[0, 0][ids[0] == VIDEO].reshape(len(TIME_VALUES), t)
    got = (frames - frames[:, :1]).reshape(-1)
    assert (got != np.array(exact)).any()
    assert (got != np.array(double)).any()


@pytest.mark.any_backend
@pytest.mark.parametrize("dtype", ["float64", "int64"])
@pytest.mark.parametrize("tps", [2, 25])
def test_time_rule_other_dtypes_as_hf(dtype, tps):
    config = hf_config("qwen2_5_vl", tps=tps)
    values = [1, 2, 3] if dtype == "int64" else TIME_VALUES
    t = 40
    videos = np.array([[t, 2, 4]] * len(values))
    ids = np.array([sum(([START] + [VIDEO] * (2 * t) + [END, 9] for _ in values), [])])
    assert_equal_all("qwen2_5_vl", config, ids, videos=videos, seconds=np.array(values, dtype=dtype))


# ----------------------------------------------------------------------------- configs


def test_config_forms_and_defaults(tmp_path):
    config = hf_config("qwen3_vl")
    ids = np.array([[1, START, IMAGE, IMAGE, END]])
    images = [[1, 2, 4]]
    want = ours("qwen3_vl", config, ids, images=images)
    as_dict = config.to_dict()
    path = tmp_path / "config.json"
    path.write_text(config.to_json_string())
    for form in (as_dict, path, str(path)):
        for a, b in zip(ours("qwen3_vl", form, ids, images=images), want):
            np.testing.assert_array_equal(a, b)
    # model taken from the config's model_type
    for a, b in zip(mrope_positions(ids, image_grid_thw=images, config=as_dict), want):
        np.testing.assert_array_equal(a, b)
    # no config: the published values
    for a, b in zip(mrope_positions(ids, image_grid_thw=images, model="qwen3_vl"), want):
        np.testing.assert_array_equal(a, b)
    assert DEFAULTS["qwen2_5_vl"]["tokens_per_second"] == 2


def test_config_token_ids_are_read():
    config = {"model_type": "qwen2_vl", "image_token_id": 7, "video_token_id": 8,
              "vision_config": {"spatial_merge_size": 1}}
    hf = hf_config("qwen2_vl", merge=1)
    hf.image_token_id, hf.video_token_id = 7, 8
    ids = np.array([[1, 7, 7, 2, 8, 8, 8, 8, 3]])
    want = hf_rope_index("qwen2_vl", hf, ids, images=[[1, 1, 2]], videos=[[2, 1, 2]])
    got = mrope_positions(ids, image_grid_thw=[[1, 1, 2]], video_grid_thw=[[2, 1, 2]], config=config)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


# ----------------------------------------------------------------------------- decoding and masks


@pytest.mark.parametrize("start,count", [(0, 1), (17, 5), (4096, 64)])
def test_next_positions_as_hf_decoding(start, count):
    """HF's decoding step (``compute_3d_position_ids`` with a cache of ``start`` tokens and the
    stored deltas) and vLLM's rule (``arange(start, start + count) + delta``)."""
    deltas = np.array([[-9], [0], [1234]], dtype=np.int64)
    obj = hf_model("qwen2_vl", hf_config("qwen2_vl"))
    obj.rope_deltas = torch.as_tensor(deltas)
    cache = types.SimpleNamespace(get_seq_length=lambda: start)
    want = obj.compute_3d_position_ids(input_ids=None, inputs_embeds=torch.zeros(3, count, 1), image_grid_thw=None,
                                       video_grid_thw=None, attention_mask=None, cache=cache)
    got = mrope_next_positions(deltas, start, count)
    assert got.dtype == np.int64 and got.shape == (3, 3, count)
    np.testing.assert_array_equal(got, want.numpy())
    np.testing.assert_array_equal(mrope_next_positions(deltas.reshape(-1), start, count), got)
    vllm = np.stack([np.arange(start + int(d), start + count + int(d)) for d in deltas[:, 0]])
    np.testing.assert_array_equal(got, np.broadcast_to(vllm, (3, 3, count)))


def test_prefill_then_decode_continues_hf():
    """The deltas of a prompt continue it: HF's decoding positions after the prompt."""
    config = hf_config("qwen2_5_vl")
    ids = np.array([[1, 2, START] + [VIDEO] * 8 + [END, 4]])
    _, deltas = ours("qwen2_5_vl", config, ids, videos=[[2, 4, 4]], seconds=[2.0])
    obj = hf_model("qwen2_5_vl", config)
    _, hf_deltas = hf_rope_index("qwen2_5_vl", config, ids, videos=[[2, 4, 4]], seconds=[2.0])
    obj.rope_deltas = torch.as_tensor(hf_deltas)
    cache = types.SimpleNamespace(get_seq_length=lambda: ids.shape[1])
    want = obj.compute_3d_position_ids(input_ids=None, inputs_embeds=torch.zeros(1, 3, 1), image_grid_thw=None,
                                       video_grid_thw=None, attention_mask=None, cache=cache)
    np.testing.assert_array_equal(mrope_next_positions(deltas, ids.shape[1], 3), want.numpy())


@given(mask=st.lists(st.lists(st.booleans(), min_size=6, max_size=6), min_size=1, max_size=4))
@fuzz(50)
def test_positions_from_attention_mask_as_hf(mask):
    m = np.array(mask, dtype=np.int64)
    t = torch.as_tensor(m)
    want1 = (t.long().cumsum(-1) - 1).masked_fill(t == 0, 1)  # HF's rule in generation (4.x)
    np.testing.assert_array_equal(positions_from_attention_mask(m), want1.numpy())
    gen = transformers.GenerationMixin._prepare_position_ids_for_generation  # the installed rule
    want0 = gen(types.SimpleNamespace(), t, {"attention_mask": t})
    np.testing.assert_array_equal(positions_from_attention_mask(m.astype(bool), masked_value=0), want0.numpy())
    np.testing.assert_array_equal(positions_from_attention_mask(m[0]), want1.numpy()[0])


@given(lengths=st.lists(st.integers(0, 9), max_size=6))
@fuzz(50)
def test_positions_from_cu_seqlens(lengths):
    cu = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    want = torch.cat([torch.arange(n) for n in lengths]) if lengths else torch.zeros(0, dtype=torch.long)
    got = positions_from_cu_seqlens(cu.astype(np.int32))
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want.numpy())


# ----------------------------------------------------------------------------- the kernels


@pytest.mark.any_backend
@pytest.mark.parametrize("model", MODELS)
@fuzz(30)
@given(data=st.data())
def test_plan_and_fill_kernels_agree(model, data):
    """The compiled plans and fills write what their pure-Python twins write, error codes
    included (a run's grid shuffled or dropped); the C fill cut into any number of parts too."""
    import functools

    from fastpe._backends import _mrope_python as ref

    kernels = [(ref.mrope_plan, ref.mrope_fill)]
    if "numba" in AVAILABLE:
        from fastpe._backends.numba import mrope as km

        kernels += [(km.mrope_plan_serial, km.mrope_fill_serial), (km.mrope_plan_serial, km.mrope_fill_parallel)]
    if "cython" in AVAILABLE:
        from fastpe._backends.cython import _ext_bias

        parts = data.draw(st.integers(2, 9))
        kernels += [(_ext_bias.mrope_plan, _ext_bias.mrope_fill),
                    (_ext_bias.mrope_plan, functools.partial(_ext_bias.mrope_fill, parts=parts))]

    config, ids, mask, images, videos, _ = data.draw(prompts(model))
    images = np.zeros((0, 3), np.int64) if images is None else images
    videos = np.zeros((0, 3), np.int64) if videos is None else videos
    if model == "qwen3_vl" and len(videos):
        videos = np.repeat(videos, videos[:, 0], axis=0)
        videos[:, 0] = 1
    spoil = data.draw(st.sampled_from(["none", "drop_image", "drop_video", "swap"]))
    if spoil == "drop_image" and len(images):
        images = images[:-1]
    elif spoil == "drop_video" and len(videos):
        videos = videos[1:]
    elif spoil == "swap" and len(images) > 1:
        images = images[::-1].copy()
    merge = config.vision_config.spatial_merge_size
    batch, seq = ids.shape
    columns = np.zeros(0, np.int64) if mask is None else np.flatnonzero(mask)
    n_rows = np.full(batch, seq, np.int64) if mask is None else mask.sum(1).astype(np.int64)
    video_times = np.concatenate([np.arange(t, dtype=np.int64) * 3 for t in videos[:, 0]]) if len(videos) else np.zeros(0, np.int64)
    results = []
    for plan, fill in kernels:
        segments = np.full((2 * (len(images) + len(videos)) + batch, 6), -1, np.int64)
        temporal = np.full(int(images[:, 0].sum() + videos[:, 0].sum()), -1, np.int64)
        deltas = np.full(batch, -1, np.int64)
        info = np.full(4, -1, np.int64)
        plan(ids.reshape(-1), columns, n_rows, config.image_token_id, config.video_token_id, images, videos,
             merge, video_times, segments, temporal, deltas, info)
        out = np.full((3, batch * seq), -7, np.int64)
        if info[1] == 0:
            fill(segments[:info[0]], temporal, columns, out)
            results.append((segments[:info[0]].tobytes(), temporal.tobytes(), deltas.tobytes(), info.tobytes(), out.tobytes()))
        else:
            results.append((info.tobytes(),))
    assert all(r == results[0] for r in results[1:])


# ----------------------------------------------------------------------------- bad input


def _call(**kw):
    base = dict(input_ids=np.array([[1, START, IMAGE, IMAGE, END]]), image_grid_thw=[[1, 2, 4]], model="qwen2_vl")
    base.update(kw)
    return mrope_positions(base.pop("input_ids"), **base)


@pytest.mark.any_backend
@pytest.mark.parametrize("kw,exc,name", [
    (dict(image_grid_thw=[[1, 2]]), ValueError, "image_grid_thw"),
    (dict(image_grid_thw=[[1, 2, 4, 1]]), ValueError, "image_grid_thw"),
    (dict(image_grid_thw=[[1.0, 2.0, 4.0]]), TypeError, "image_grid_thw"),
    (dict(image_grid_thw=[[0, 2, 4]]), ValueError, "image_grid_thw"),
    (dict(image_grid_thw=[[1, -2, 4]]), ValueError, "image_grid_thw"),
    (dict(image_grid_thw=[[1, 3, 4]]), ValueError, "image_grid_thw"),  # not a multiple of the merge
    (dict(image_grid_thw=[[1, 2, 2]]), ValueError, "image_grid_thw"),  # 1 token, the run has 2
    (dict(image_grid_thw=[[1, 2, 4], [1, 2, 4]]), ValueError, "image_grid_thw"),
    (dict(image_grid_thw=None), ValueError, "image_grid_thw"),
    (dict(video_grid_thw=[[1, 2, 4]]), ValueError, "video_grid_thw"),
    (dict(attention_mask=[[1, 1, 1, 1]]), ValueError, "attention_mask"),
    (dict(attention_mask=[[1, 1, 1, 1, 1], [1, 1, 1, 1, 1]]), ValueError, "attention_mask"),
    (dict(attention_mask=[[0, 0, 0, 0, 0]]), ValueError, "attention_mask"),
    (dict(attention_mask=[[2, 1, 1, 1, 1]]), ValueError, "attention_mask"),
    (dict(attention_mask=[[0.5, 1, 1, 1, 1]]), TypeError, "attention_mask"),
    (dict(input_ids=np.array([1, START, IMAGE, IMAGE, END])), ValueError, "input_ids"),
    (dict(input_ids=np.array([[1.0, 2.0]])), TypeError, "input_ids"),
    (dict(model="qwen4_vl"), ValueError, "model"),
    (dict(model=3), TypeError, "model"),
    (dict(model=None), ValueError, "model"),
    (dict(second_per_grid_ts=[1.0]), ValueError, "second_per_grid_ts"),  # qwen2_vl has no time rule
    (dict(model="qwen2_5_vl", second_per_grid_ts=[1.0]), ValueError, "second_per_grid_ts"),  # no video
    (dict(config=42), TypeError, "config"),
    (dict(config={"model_type": "qwen3_vl"}), ValueError, "model"),
    (dict(config={"vision_config": {"spatial_merge_size": 0}}), ValueError, "spatial_merge_size"),
    (dict(config={"vision_config": {"spatial_merge_size": 2**20 + 1}}), ValueError, "spatial_merge_size"),
    (dict(config={"image_token_id": 2**63}), ValueError, "image_token_id"),
    (dict(config={"video_token_id": -(2**63) - 1}), ValueError, "video_token_id"),
    (dict(config="/nonexistent/config.json"), ValueError, "config"),
    (dict(model="qwen2_5_vl", config={"vision_config": {"tokens_per_second": 2.0}}), TypeError, "tokens_per_second"),
    (dict(model="qwen2_vl", config={"model_type": "qwen3_vl"}), ValueError, "model"),
    (dict(backend="cuda"), ValueError, "backend"),
])
def test_bad_input_refused(kw, exc, name):
    with pytest.raises(exc, match=name):
        _call(**kw)


@pytest.mark.any_backend
@pytest.mark.parametrize("seconds,exc", [
    ([float("nan")], ValueError), ([-1.0], ValueError), ([1.0, 2.0], ValueError),
    (np.array([1.0], dtype=np.float16), TypeError), (["a"], TypeError), (np.array([[1.0]]), ValueError),
    ([1e30], ValueError),
])
def test_bad_seconds_refused(seconds, exc):
    ids = np.array([[START] + [VIDEO] * 4 + [END]])
    with pytest.raises(exc, match="second_per_grid_ts"):
        mrope_positions(ids, video_grid_thw=[[4, 2, 2]], second_per_grid_ts=seconds, model="qwen2_5_vl")


@pytest.mark.any_backend
def test_bad_next_and_mask_inputs_refused():
    with pytest.raises(ValueError, match="rope_deltas"):
        mrope_next_positions(np.zeros((2, 3), np.int64), 0, 1)
    with pytest.raises(TypeError, match="rope_deltas"):
        mrope_next_positions(np.zeros((2, 1)), 0, 1)
    with pytest.raises(TypeError, match="start"):
        mrope_next_positions(np.zeros((2, 1), np.int64), 1.0, 1)
    with pytest.raises(ValueError, match="count"):
        mrope_next_positions(np.zeros((2, 1), np.int64), 0, -1)
    with pytest.raises(ValueError, match="mask"):
        positions_from_attention_mask(np.zeros((2, 2, 2), np.int64))
    with pytest.raises(ValueError, match="mask"):
        positions_from_attention_mask([[0, 3]])
    with pytest.raises(ValueError, match="cu_seqlens"):
        positions_from_cu_seqlens([1, 3])
    with pytest.raises(ValueError, match="cu_seqlens"):
        positions_from_cu_seqlens([0, 3, 2])
    with pytest.raises(TypeError, match="cu_seqlens"):
        positions_from_cu_seqlens([0.0, 3.0])


# ----------------------------------------------------------------------------- threads, size


@pytest.mark.any_backend
def test_large_input_parallel_path_equals_reference():
    """Beyond the serial size the fill runs the parallel twin: same values as the reference."""
    config = hf_config("qwen2_5_vl")
    n = 36 * 52 // 4
    row = ([5] * 3000 + [START] + [IMAGE] * n + [END]) * 8 + [START] + [VIDEO] * (4 * n) + [END, 9]
    ids = np.array([row, [0] * 50 + row[50:]], dtype=np.int64)
    mask = np.ones_like(ids)
    mask[1, :50] = 0
    kw = dict(images=np.array([[1, 36, 52]] * 16), videos=np.array([[4, 36, 52]] * 2), seconds=[0.5, 1 / 3], mask=mask)
    ref = ours("qwen2_5_vl", config, ids, backend="python", **kw)
    want = hf_rope_index("qwen2_5_vl", config, ids, **{**kw, "seconds": torch.tensor(kw["seconds"])})
    for backend in FAST:
        fast = ours("qwen2_5_vl", config, ids, backend=backend, **kw)
        for a, b, c in zip(fast, ref, want):
            np.testing.assert_array_equal(a, b, err_msg=backend)
            np.testing.assert_array_equal(a, c, err_msg=backend)


def test_concurrent_calls_agree():
    from concurrent.futures import ThreadPoolExecutor

    config = hf_config("qwen3_vl")
    cases = []
    for k in range(1, 9):
        ids = np.array([[1] * k + [START] + [IMAGE] * (k * 2) + [END] + [VIDEO] * 6 + [2] * k])
        cases.append((ids, np.array([[1, 2, 4 * k]]), np.array([[1, 4, 6]])))
    serial = [ours("qwen3_vl", config, i, images=g, videos=v) for i, g, v in cases]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda c: ours("qwen3_vl", config, c[0], images=c[1], videos=c[2]), cases * 8))
    for r, s in zip(results, serial * 8):
        np.testing.assert_array_equal(r[0], s[0])
        np.testing.assert_array_equal(r[1], s[1])


def _child_positions(conn):
    config = hf_config("qwen2_vl")
    ids = np.array([[1, START] + [IMAGE] * 6 + [END, 2]])
    pos, delta = mrope_positions(ids, image_grid_thw=[[1, 4, 6]], model="qwen2_vl", config=config)
    conn.send((pos.tobytes(), delta.tobytes()))
    conn.close()


def test_fork_after_use():
    """A child forked after the kernels ran (the parallel one included) computes the same."""
    import multiprocessing as mp

    test_large_input_parallel_path_equals_reference()
    config = hf_config("qwen2_vl")
    ids = np.array([[1, START] + [IMAGE] * 6 + [END, 2]])
    pos, delta = mrope_positions(ids, image_grid_thw=[[1, 4, 6]], model="qwen2_vl", config=config)
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child_positions, args=(child,))
    proc.start()
    assert parent.poll(120), "the forked child did not answer"
    got = parent.recv()
    proc.join(30)
    assert proc.exitcode == 0
    assert got == (pos.tobytes(), delta.tobytes())
