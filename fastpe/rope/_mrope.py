"""M-RoPE position ids of the Qwen-VL models: the 3-D (time, height, width) positions.

:func:`mrope_positions` returns exactly what HF transformers' ``get_rope_index`` of
Qwen2-VL, Qwen2.5-VL and Qwen3-VL returns (checked against the installed transformers,
5.x, whose ``get_rope_index`` groups tokens by modality type): the prompt is cut into runs
of text, image and video tokens (a token is an image token when it equals the config's
``image_token_id``, a video token when it equals ``video_token_id``, as the processors'
``mm_token_type_ids`` say); a text run of ``n`` tokens takes ``p, p + 1, .., p + n - 1`` on
all three axes and advances ``p`` by ``n``; a vision run of grid ``(t, h, w)`` (patches,
``spatial_merge_size`` ``m``) has ``t * (h / m) * (w / m)`` tokens at
``(p + T(i), p + y, p + x)`` and advances ``p`` by ``max(h, w) / m``.  The delta of a row is
``max(positions) + 1 - (number of attended tokens)``: a generated token at cache position
``c`` sits at ``c + delta`` on all three axes (:func:`mrope_next_positions`).

The layout of the runs and the per-token fill are the backends' ``mrope_plan`` and
``mrope_fill`` operations (:mod:`fastpe._backends.registry`); only the validation and the time
offsets are NumPy here.
"""

from __future__ import annotations

import json
import numbers
import os

import numpy as np

from .. import _backends

__all__ = [
    "mrope_positions",
    "mrope_next_positions",
    "positions_from_attention_mask",
    "positions_from_cu_seqlens",
    "MODELS",
    "DEFAULTS",
]

#: the models whose ``get_rope_index`` is reproduced
MODELS = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")

#: the published values used when no ``config`` is given (or a key is missing from it): the
#: token ids and merge size of every released checkpoint, and Qwen2.5-VL's
#: ``tokens_per_second`` of its released checkpoints (2; transformers'
#: ``Qwen2_5_VLVisionConfig()`` defaults to 4, so pass the model's config to be sure)
DEFAULTS = {
    "qwen2_vl": dict(image_token_id=151655, video_token_id=151656, spatial_merge_size=2),
    "qwen2_5_vl": dict(image_token_id=151655, video_token_id=151656, spatial_merge_size=2, tokens_per_second=2),
    "qwen3_vl": dict(image_token_id=151655, video_token_id=151656, spatial_merge_size=2),
}

#: config ``model_type`` values and the model whose rule they follow
_MODEL_TYPES = {"qwen2_vl": "qwen2_vl", "qwen2_5_vl": "qwen2_5_vl", "qwen3_vl": "qwen3_vl", "qwen3_vl_moe": "qwen3_vl"}

_INT64_LIMIT = 1 << 62


# ----------------------------------------------------------------------------- validation


def _is_int(x) -> bool:
    return isinstance(x, (numbers.Integral, np.integer)) and not isinstance(x, (bool, np.bool_))


def _int_array(name: str, value, ndim: int) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except Exception as exc:  # e.g. a ragged list
        raise TypeError(f"{name} must be an integer array, got {type(value).__name__}") from exc
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {arr.shape}")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) >= 1 << 63:
        raise ValueError(f"{name} has values beyond int64")
    return arr


def _mask_array(name: str, value) -> np.ndarray:
    """An attention mask as an array of bools or integers (its values checked apart)."""
    try:
        m = np.asarray(value)
    except Exception as exc:
        raise TypeError(f"{name} must be an array of 0/1, got {type(value).__name__}") from exc
    if m.dtype != np.bool_ and m.dtype.kind not in "iu":
        raise TypeError(f"{name} must be bool or integer 0/1, got dtype {m.dtype}")
    return m


def _check_zero_one(name: str, m: np.ndarray) -> None:
    if m.dtype != np.bool_ and m.size and (int(m.min()) < 0 or int(m.max()) > 1):
        raise ValueError(f"{name} must hold only 0 and 1")


def _read_config(config):
    """``config`` as a dict or an object with attributes (a PretrainedConfig is read through
    its fields: ``to_dict()`` costs far more than the positions).  Type tests go through
    ``type()``: a PretrainedConfig's ``__getattribute__`` (which ``isinstance`` calls for
    ``__class__``) costs microseconds."""
    if config is None:
        return {}
    kind = type(config)
    if issubclass(kind, (str, os.PathLike)):
        try:
            with open(config, encoding="utf-8") as fh:
                config = json.load(fh)
        except (OSError, ValueError) as exc:
            raise ValueError(f"config: cannot read a JSON config from {os.fspath(config)!r}: {exc}") from exc
        kind = type(config)
    if not issubclass(kind, dict) and not hasattr(kind, "to_dict"):
        raise TypeError(f"config must be a dict, a path to a config.json or a PretrainedConfig, got {kind.__name__}")
    return config


def _get(place, key):
    if issubclass(type(place), dict):
        return place.get(key)
    try:  # a config's fields: a dict lookup, not its __getattribute__
        fields = object.__getattribute__(place, "__dict__")
    except AttributeError:
        fields = {}
    if key in fields:
        return fields[key]
    return getattr(place, key, None)


def _section(config, key: str):
    sub = _get(config, key)
    if sub is None:
        return {}
    if not issubclass(type(sub), dict) and not hasattr(type(sub), "to_dict"):
        raise TypeError(f"config: {key} must be a dict, got {type(sub).__name__}")
    return sub


_NO_GRIDS = np.zeros((0, 3), dtype=np.int64)
_PLAIN: dict = {}


def _settings(model, config) -> tuple[str, dict]:
    if config is None and isinstance(model, str):
        got = _PLAIN.get(model)
        if got is None:
            got = _PLAIN[model] = _settings_of(model, None)
        return got
    return _settings_of(model, config)


def _settings_of(model, config) -> tuple[str, dict]:
    cfg = _read_config(config)
    model_type = _get(cfg, "model_type")
    if model is None:
        if model_type is None:
            raise ValueError(f"model must be one of {', '.join(map(repr, MODELS))} (no config model_type to take it from)")
        if model_type not in _MODEL_TYPES:
            raise ValueError(f"model: config model_type {model_type!r} is not one of {', '.join(map(repr, _MODEL_TYPES))}")
        model = _MODEL_TYPES[model_type]
    elif not isinstance(model, str):
        raise TypeError(f"model must be a string, got {type(model).__name__}")
    elif model.strip().lower() not in MODELS:
        raise ValueError(f"model must be one of {', '.join(map(repr, MODELS))}, got {model!r}")
    else:
        model = model.strip().lower()
        if _MODEL_TYPES.get(model_type, model) != model:
            raise ValueError(f"model {model!r} contradicts the config's model_type {model_type!r}")
    text, vision = _section(cfg, "text_config"), _section(cfg, "vision_config")
    out = dict(DEFAULTS[model])
    for key in out:
        if key in ("spatial_merge_size", "tokens_per_second"):
            places = (vision, cfg)
        else:
            places = (cfg, text)
        for place in places:
            value = _get(place, key)
            if value is not None:
                out[key] = value
                break
    for key in ("image_token_id", "video_token_id", "spatial_merge_size"):
        if not _is_int(out[key]):
            raise TypeError(f"config: {key} must be an integer, got {out[key]!r}")
        out[key] = int(out[key])
    for key in ("image_token_id", "video_token_id"):  # compared with int64 token ids by the kernels
        if not -(1 << 63) <= out[key] < 1 << 63:
            raise ValueError(f"config: {key} must fit in int64, got {out[key]}")
    if not 1 <= out["spatial_merge_size"] <= 1 << 20:
        raise ValueError(f"config: spatial_merge_size must be in [1, 2**20], got {out['spatial_merge_size']}")
    if out["image_token_id"] == out["video_token_id"]:
        raise ValueError("config: image_token_id and video_token_id must differ")
    if "tokens_per_second" in out:  # an int, as transformers' config class requires
        tps = out["tokens_per_second"]
        if not _is_int(tps):
            raise TypeError(f"config: tokens_per_second must be an integer, got {tps!r}")
        if not 0 <= tps <= 1 << 24:
            raise ValueError(f"config: tokens_per_second must be in [0, 2**24], got {tps}")
        out["tokens_per_second"] = int(tps)
    return model, out


def _grids(name: str, value, merge: int) -> tuple[np.ndarray, int]:
    """The grids as C ``int64`` ``(n, 3)``, and their number of frames."""
    if value is None:
        return _NO_GRIDS, 0
    arr = _int_array(name, value, 2)
    if arr.shape[1] != 3:
        raise ValueError(f"{name} must have shape (n, 3) (t, h, w per item), got {arr.shape}")
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    rows = arr.tolist()
    for t, h, w in rows:  # a few grids: faster than NumPy's reductions
        if t < 1 or h < 1 or w < 1:
            raise ValueError(f"{name}: every grid size must be >= 1, got {(t, h, w)}")
        if max(t, h, w) > 1 << 20:
            raise ValueError(f"{name}: grid sizes above 2**20 are refused, got {(t, h, w)}")
        if h % merge or w % merge:
            raise ValueError(f"{name}: grid heights and widths must be multiples of spatial_merge_size {merge}, got {(t, h, w)}")
    return arr, sum(row[0] for row in rows)


def _seconds(value, n_videos: int):
    """``second_per_grid_ts`` as HF's arithmetic sees it: ``(values, kind)`` with ``kind``
    ``"int"`` (an int64 tensor: exact), ``"f4"`` or ``"f8"`` -- the dtype
    ``torch.as_tensor(second_per_grid_ts)`` has (a list of Python floats is float32, as the
    processor's output; a float64 array stays float64)."""
    name = "second_per_grid_ts"
    if isinstance(value, (list, tuple)):
        items = list(value)
        if not all(isinstance(v, (numbers.Real, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)) for v in items):
            raise TypeError(f"{name} must hold real numbers")
        if all(_is_int(v) for v in items):
            arr = np.array([int(v) for v in items], dtype=np.int64) if items else np.zeros(0, np.int64)
        else:
            arr = np.array([float(v) for v in items], dtype=np.float64).astype(np.float32)
    else:
        try:
            arr = np.asarray(value)
        except Exception as exc:
            raise TypeError(f"{name} must be an array of real numbers, got {type(value).__name__}") from exc
        if arr.dtype == np.bool_ or arr.dtype.kind not in "iuf":
            raise TypeError(f"{name} must be an array of real numbers, got dtype {arr.dtype}")
        if arr.dtype.kind == "f" and arr.dtype not in (np.float32, np.float64):
            raise TypeError(f"{name}: dtype {arr.dtype} is not supported (float32, float64 or integers)")
        if arr.ndim > 1:
            raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
        arr = arr.reshape(-1)
        if arr.dtype.kind in "iu":
            if arr.dtype.kind == "u" and arr.size and int(arr.max()) >= 1 << 63:
                raise ValueError(f"{name} has values beyond int64")
            arr = arr.astype(np.int64)
    if arr.shape[0] != n_videos:
        raise ValueError(f"{name} must have one value per video ({n_videos}), got {arr.shape[0]}")
    if arr.dtype.kind == "f" and not bool(np.isfinite(arr).all()):
        raise ValueError(f"{name} must be finite")
    if arr.size and bool((arr < 0).any()):
        raise ValueError(f"{name} must be >= 0")
    kind = "int" if arr.dtype == np.int64 else ("f4" if arr.dtype == np.float32 else "f8")
    return arr, kind


def _video_times(frames: np.ndarray, seconds, kind: str, tps: int) -> np.ndarray:
    """Qwen2.5-VL's ``(arange(t) * (tokens_per_second * second_per_grid_t)).long()`` per video,
    concatenated, in the dtype torch computes it in (``tps`` an int, exact in float32)."""
    total = int(frames.sum())
    index = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(frames) - frames, frames)
    if seconds is None:  # HF iterates [1, 1, ..]: the interval is the Python int tps
        return index * tps
    if kind == "int":
        return index * np.repeat(seconds * tps, frames)
    if kind == "f8":
        values = index.astype(np.float64) * np.repeat(np.float64(tps) * seconds, frames)
    else:  # tps * s rounded to float32, then each i * interval rounded to float32
        values = index.astype(np.float32) * np.repeat(np.float32(tps) * seconds, frames)
    if values.size and not bool((values < _INT64_LIMIT).all()):
        raise ValueError("second_per_grid_ts: the time positions overflow int64")
    return values.astype(np.int64)  # torch's .long(): truncation toward zero (values >= 0)


# ----------------------------------------------------------------------------- kernels


_NO_COLUMNS = np.zeros(0, dtype=np.int64)


def _plan_error(info, images, videos, merge, model):
    from .._plans import mrope as _plan
    from .._plans.mrope import PLAN_ERRORS

    code, index, row = (int(v) for v in info[1:])
    if code == _plan.POSITION_OVERFLOW:
        raise ValueError(f"second_per_grid_ts: the positions of row {row} overflow int64")
    image = code in (_plan.TOO_MANY_IMAGE_RUNS, _plan.IMAGE_RUN_LENGTH, _plan.TOO_FEW_IMAGE_RUNS)
    name = "image_grid_thw" if image else "video_grid_thw"
    grids = images if image else videos
    frames = " (Qwen3-VL: one grid per video frame)" if model == "qwen3_vl" and not image else ""
    if code in (_plan.TOO_MANY_IMAGE_RUNS, _plan.TOO_MANY_VIDEO_RUNS):
        raise ValueError(f"{name}: {len(grids)} grids{frames} but row {row} has a further run of tokens ({PLAN_ERRORS[code]})")
    if code in (_plan.TOO_FEW_IMAGE_RUNS, _plan.TOO_FEW_VIDEO_RUNS):
        raise ValueError(f"{name}: {len(grids)} grids{frames} but only {index} runs of tokens ({PLAN_ERRORS[code]})")
    t, h, w = (int(v) for v in grids[index])
    raise ValueError(f"{name}: grid {index}{frames} {(t, h, w)} needs {t * (h // merge) * (w // merge)} tokens "
                     f"(spatial_merge_size {merge}), its run of tokens in row {row} has another length")


# ----------------------------------------------------------------------------- public API


def mrope_positions(input_ids, *, image_grid_thw=None, video_grid_thw=None, second_per_grid_ts=None,
                    attention_mask=None, model=None, config=None, backend=None):
    """The M-RoPE ``(position_ids, rope_deltas)`` of a Qwen-VL prompt, equal to HF's ``get_rope_index``.

    ``input_ids``: integer ``(batch, seq)``.  ``image_grid_thw`` / ``video_grid_thw``: integer
    ``(n, 3)`` patch grids ``(t, h, w)`` of every image / video of the batch, in order of
    appearance (row by row), as the processor returns them; ``h`` and ``w`` multiples of
    ``spatial_merge_size``.  Each run of consecutive image (video) tokens is one image
    (video) and must have ``t * (h / m) * (w / m)`` tokens; for Qwen3-VL each video is split
    into ``t`` frames of ``(h / m) * (w / m)`` tokens, each its own run (the frames are
    separated by their timestamp text).  ``attention_mask``: ``(batch, seq)`` of 0/1
    (bool or integer): masked tokens are dropped before the runs are cut, as HF does, and
    get position 0 on every axis; every row must attend to at least one token.

    ``model``: ``"qwen2_vl"``, ``"qwen2_5_vl"`` or ``"qwen3_vl"``; ``None`` takes it from
    the config's ``model_type``.  ``config``: a dict as in a ``config.json``, a path to one,
    or a transformers ``PretrainedConfig``; ``image_token_id`` and ``video_token_id`` are
    read at the top level (else in ``text_config``), ``spatial_merge_size`` and
    ``tokens_per_second`` in ``vision_config`` (else at the top level).  A missing key takes
    the published value (:data:`DEFAULTS`: image 151655, video 151656, merge 2, and for
    Qwen2.5-VL ``tokens_per_second = 2`` as in the released checkpoints -- transformers'
    own config class defaults to 4).

    Qwen2.5-VL's time rule, ``second_per_grid_ts`` (one value per video; ``None`` means 1 s
    as in HF): HF computes ``(arange(t) * (tokens_per_second * s)).long()`` in torch, so the
    arithmetic happens in the dtype ``torch.as_tensor(second_per_grid_ts)`` has, and so it
    does here: a list of Python floats (and a float32 array, as the processor returns) in
    **float32** -- the interval ``tokens_per_second * s`` rounded to float32, then each
    ``i * interval`` rounded to float32 -- a float64 array in float64, integers exactly;
    then truncated toward zero.  With fractional seconds float32 and exact (or float64)
    arithmetic part: ``s = 1/3`` at 25 tokens per second puts frame 3 at 25 in float32, at 24
    in float64 or exactly on the double ``1/3``; ``s = 0.7`` at 2 tokens per second puts frame
    45 at 63 in float32, 62 otherwise.  HF parity is the contract (the checkpoints were trained
    on HF's positions), so the float32 result is returned, not the exact one.
    Qwen2-VL and Qwen3-VL have no time rule (the time offset is the frame index) and refuse
    ``second_per_grid_ts``.

    Text-only input (no grids) gives ``get_rope_index``'s text positions (``0 ..`` over the
    attended tokens, 0 at masked ones) and delta ``0``.  Returns ``position_ids`` ``int64``
    ``(3, batch, seq)`` and ``rope_deltas`` ``int64`` ``(batch, 1)``.

    transformers 4.x found each vision run from its ``vision_start_token_id`` and the token
    after it; 5.x cuts runs by token type, as here: for prompts built by the processors
    (``<vision_start>`` run ``<vision_end>``) the two agree.  ``backend``: a fastpe backend
    name or ``None`` (``$FASTPE_BACKEND``, else the fastest that loads); all give the same values.
    """
    model, cfg = _settings(model, config)
    ids = _int_array("input_ids", input_ids, 2)
    batch, seq = ids.shape
    if batch == 0 or seq == 0:
        raise ValueError(f"input_ids must hold at least one token per row, got shape {ids.shape}")
    mask = None
    if attention_mask is not None:
        m = _mask_array("attention_mask", attention_mask)
        if m.shape != ids.shape:
            raise ValueError(f"attention_mask must have the shape of input_ids {ids.shape}, got {m.shape}")
        _check_zero_one("attention_mask", m)
        mask = m.view(np.bool_) if m.dtype.itemsize == 1 else m.astype(np.bool_)
        n_rows = np.count_nonzero(mask, axis=1).astype(np.int64)
        if int(n_rows.min()) == 0:
            raise ValueError("attention_mask: every row must attend to at least one token")
        if int(n_rows.sum()) == batch * seq:
            mask = None
    merge = cfg["spatial_merge_size"]
    images, image_frames = _grids("image_grid_thw", image_grid_thw, merge)
    videos, video_frames = _grids("video_grid_thw", video_grid_thw, merge)
    seconds = kind = None
    if second_per_grid_ts is not None:
        if model != "qwen2_5_vl":
            raise ValueError(f"second_per_grid_ts: only qwen2_5_vl has a time rule, not {model}")
        seconds, kind = _seconds(second_per_grid_ts, videos.shape[0])
    if model == "qwen3_vl" and videos.shape[0]:
        videos = np.repeat(videos, videos[:, 0], axis=0)
        videos[:, 0] = 1

    # ---- the attended tokens (row-major over the batch) and the video frames' time offsets
    flat = ids.reshape(-1)
    if flat.dtype != np.int64:
        flat = flat.astype(np.int64)
    if mask is None:
        columns = _NO_COLUMNS
        n_rows = np.full(batch, seq, dtype=np.int64)
    else:
        columns = np.flatnonzero(mask)
    if videos.shape[0] == 0:
        video_times = _NO_COLUMNS
    elif model == "qwen2_5_vl":
        video_times = _video_times(videos[:, 0], seconds, kind, cfg["tokens_per_second"])
    else:  # the frame index (HF's arange(t) * 1.0, exact below 2**24 frames)
        frames = videos[:, 0]
        video_times = np.arange(int(frames.sum()), dtype=np.int64) - np.repeat(np.cumsum(frames) - frames, frames)
    n_frames = image_frames + video_frames  # Qwen3-VL's split keeps the number of frames

    _, kernels = _backends.resolve(backend)
    segments = np.empty((2 * (images.shape[0] + videos.shape[0]) + batch, 6), dtype=np.int64)
    temporal = np.empty(n_frames, dtype=np.int64)
    deltas = np.empty(batch, dtype=np.int64)
    info = np.empty(4, dtype=np.int64)
    kernels.mrope_plan(ids=flat, columns=columns, n_rows=n_rows, image_token_id=cfg["image_token_id"],
                       video_token_id=cfg["video_token_id"], images=images, videos=videos, merge=merge,
                       video_times=video_times, segments=segments, temporal=temporal, deltas=deltas, info=info)
    if info[1]:
        _plan_error(info, images, videos, merge, model)
    out = np.zeros((3, batch, seq), dtype=np.int64) if mask is not None else np.empty((3, batch, seq), dtype=np.int64)
    kernels.mrope_fill(segments=segments[:int(info[0])], temporal=temporal, columns=columns,
                       out=out.reshape(3, batch * seq))
    deltas = deltas.reshape(batch, 1)
    return out, deltas


def mrope_next_positions(rope_deltas, start, count):
    """M-RoPE positions of ``count`` generated tokens from cache position ``start``: ``int64``
    ``(3, batch, count)``, every axis ``start + i + rope_deltas[b]`` -- HF's decoding rule
    (``arange(cache_length, cache_length + n)`` plus the stored deltas) and vLLM's
    ``get_next_input_positions``.  ``rope_deltas``: integer ``(batch, 1)`` or ``(batch,)``."""
    deltas = _int_array("rope_deltas", rope_deltas, np.ndim(rope_deltas) if np.ndim(rope_deltas) in (1, 2) else 2)
    if deltas.ndim == 2 and deltas.shape[1] != 1:
        raise ValueError(f"rope_deltas must have shape (batch, 1) or (batch,), got {deltas.shape}")
    if deltas.ndim == 0 or deltas.shape[0] == 0:
        raise ValueError(f"rope_deltas must hold one delta per row, got shape {deltas.shape}")
    for name, value in (("start", start), ("count", count)):
        if not _is_int(value):
            raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    start, count = int(start), int(count)
    d = deltas.reshape(-1).astype(np.int64)
    if d.size and (start + count + int(d.max()) >= 1 << 63 or start + int(d.min()) < -(1 << 63)):
        raise ValueError("start: the positions overflow int64")
    line = np.arange(start, start + count, dtype=np.int64)
    out = np.empty((3, d.shape[0], count), dtype=np.int64)
    np.add(line[None, :], d[:, None], out=out[0])
    out[1] = out[0]
    out[2] = out[0]
    return out


def positions_from_attention_mask(mask, *, masked_value=1):
    """Position ids of a (left-)padded batch: ``cumsum(mask, -1) - 1``, with ``masked_value``
    (an integer, default 1) at every masked token -- HF's rule for generation
    (transformers 4.x ``prepare_inputs_for_generation``, ``masked_fill_(mask == 0, 1)``;
    transformers 5.x fills 0: pass ``masked_value=0``).  ``mask``: bool or 0/1 integers,
    ``(seq,)`` or ``(batch, seq)``; returns ``int64`` of that shape."""
    m = _mask_array("mask", mask)
    if m.ndim not in (1, 2):
        raise ValueError(f"mask must be (seq,) or (batch, seq), got shape {m.shape}")
    _check_zero_one("mask", m)
    if not _is_int(masked_value):
        raise TypeError(f"masked_value must be an integer, got {type(masked_value).__name__}")
    if not -(1 << 63) <= masked_value < 1 << 63:
        raise ValueError("masked_value must fit in int64")
    keep = m.astype(np.bool_, copy=False)
    out = np.cumsum(keep, axis=-1, dtype=np.int64)
    out -= 1
    out[~keep] = masked_value
    return out


def positions_from_cu_seqlens(cu_seqlens):
    """Positions of packed sequences (flash-attention varlen): ``int64`` ``(cu_seqlens[-1],)``,
    restarting at 0 at every ``cu_seqlens[i]``.  ``cu_seqlens``: integer ``(n + 1,)``,
    starting at 0, non-decreasing (empty sequences allowed)."""
    cu = _int_array("cu_seqlens", cu_seqlens, 1)
    if cu.shape[0] < 1:
        raise ValueError("cu_seqlens must hold at least one offset (0)")
    cu = cu.astype(np.int64)
    if int(cu[0]) != 0:
        raise ValueError(f"cu_seqlens must start at 0, got {int(cu[0])}")
    lengths = np.diff(cu)
    if lengths.size and int(lengths.min()) < 0:
        raise ValueError("cu_seqlens must be non-decreasing")
    total = int(cu[-1])
    if total > 1 << 40:
        raise ValueError(f"cu_seqlens: {total} tokens is too many")
    return np.arange(total, dtype=np.int64) - np.repeat(cu[:-1], lengths)
