"""The cython backend's M-RoPE kernels (csrc/fastpe_mrope.h through ``_ext_bias``): input that
would touch memory outside the arrays refused before anything is written, any cut of the fill
into parts the same values, concurrent callers and the pool.

Skipped when the compiled extension is not built -- unless ``FASTPE_REQUIRE_EXT`` is set.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from fastpe._backends import _mrope_python as ref
from fastpe._backends.cases import CASES
from support.threads import failures_at_once

#: every backend it calls is named, or it calls none: the first run of make test decides it
#: (tests/conftest.py deselects it in the default-only runs)
pytestmark = pytest.mark.any_backend

try:
    from fastpe._backends import cython as _cython
    from fastpe._backends.cython import _ext_bias
except ImportError as exc:
    if os.environ.get("FASTPE_REQUIRE_EXT", "").strip() == "1":
        pytest.fail(f"FASTPE_REQUIRE_EXT is set but the extension does not load: {exc}", pytrace=False)
    pytest.skip(f"compiled extension not built ({exc})", allow_module_level=True)


def _plan_case(label: str) -> dict:
    return next(c.arguments for c in CASES["mrope_plan"]() if c.label == label)


def _fill_case(label: str) -> dict:
    return next(c.arguments for c in CASES["mrope_fill"]() if c.label == label)


def _snapshot(arguments: dict) -> dict:
    return {k: v.copy() for k, v in arguments.items() if isinstance(v, np.ndarray)}


def _unchanged(before: dict, arguments: dict) -> bool:
    return all(np.array_equal(before[k], arguments[k]) for k in before)


def _spoil_plan(name: str, a: dict) -> dict:
    a = dict(a)
    if name == "columns-out-of-range":
        a["columns"] = a["columns"].copy()
        a["columns"][-1] = a["ids"].shape[0]
    elif name == "negative-column":
        a["columns"] = a["columns"].copy()
        a["columns"][0] = -1
    elif name == "inner-column-out-of-range":  # inside a row with holes: read column by column
        a["columns"] = a["columns"].copy()
        a["columns"][2] = 1 << 40
    elif name == "empty-row":
        a["n_rows"] = a["n_rows"].copy()
        a["n_rows"][0] = 0
    elif name == "rows-beyond-tokens":
        a["n_rows"] = a["n_rows"].copy()
        a["n_rows"][-1] += 1
    elif name == "merge-0":
        a["merge"] = 0
    elif name == "grid-0":
        a["images"] = a["images"].copy()
        a["images"][0, 0] = 0
    elif name == "grid-negative":
        a["images"] = a["images"].copy()
        a["images"][0, :2] = -1
    elif name == "grid-huge":
        a["images"] = a["images"].copy()
        a["images"][0, 1] = 1 << 40
    elif name == "short-temporal":
        a["temporal"] = a["temporal"][:-1].copy()
    elif name == "short-video-times":
        a["video_times"] = a["video_times"][:-1].copy()
    elif name == "few-segments":
        a["segments"] = a["segments"][:-1].copy()
    elif name == "segment-width":
        a["segments"] = np.full((a["segments"].shape[0], 5), -1, np.int64)
    elif name == "short-info":
        a["info"] = a["info"][:3].copy()
    elif name == "deltas":
        a["deltas"] = a["deltas"][:-1].copy()
    elif name == "grid-width":
        a["videos"] = np.zeros((1, 2), np.int64)
    return a


PLAN_SPOILS = ["columns-out-of-range", "negative-column", "inner-column-out-of-range", "empty-row", "rows-beyond-tokens", "merge-0", "grid-0",
               "grid-negative", "grid-huge", "short-temporal", "short-video-times", "few-segments",
               "segment-width", "short-info", "deltas", "grid-width"]


@pytest.mark.parametrize("spoil", PLAN_SPOILS)
def test_the_plan_refuses_what_would_be_unsafe(spoil):
    a = _spoil_plan(spoil, _plan_case("holes"))
    before = _snapshot(a)
    with pytest.raises(ValueError):
        _ext_bias.mrope_plan(**a)
    assert _unchanged(before, a)


def _spoil_fill(name: str, a: dict) -> dict:
    a = dict(a)
    seg = a["segments"] = a["segments"].copy()
    vision = int(np.flatnonzero(seg[:, 3])[0])
    if name == "first-negative":
        seg[0, 0] = -1
    elif name == "past-the-tokens":
        seg[-1, 1] += 1
    elif name == "overlapping":
        seg[1, 0] -= 1
    elif name == "out-of-order":
        a["segments"] = np.ascontiguousarray(seg[::-1])
    elif name == "empty":
        seg[0, 1] = 0
    elif name == "position-negative":
        seg[0, 2] = -1
    elif name == "position-limit":
        seg[0, 2] = 1 << 62
    elif name == "grid-width-0":
        seg[vision, 4] = 0
    elif name == "grid-larger-than-run":
        seg[vision, 3] = seg[vision, 1] + 1
    elif name == "grid-product-overflow":
        seg[vision, 3:5] = 1 << 32
    elif name == "time-offsets-past-the-end":
        seg[vision, 5] = a["temporal"].shape[0]
    elif name == "time-offset-negative":
        seg[vision, 5] = -1
    elif name == "columns-out-of-range":
        a["columns"] = a["columns"].copy()
        a["columns"][-1] = a["out"].shape[1]
    elif name == "inner-column-out-of-range":  # inside the image run with a hole: gathered
        a["columns"] = a["columns"].copy()
        a["columns"][int(seg[vision, 0]) + 1] = -5
    elif name == "out-rows":
        a["out"] = np.full((2, a["out"].shape[1]), -1, np.int64)
    elif name == "segment-width":
        a["segments"] = np.ascontiguousarray(seg[:, :5])
    return a


FILL_SPOILS = ["first-negative", "past-the-tokens", "overlapping", "out-of-order", "empty", "position-negative", "position-limit", "grid-width-0",
               "grid-larger-than-run", "grid-product-overflow", "time-offsets-past-the-end", "time-offset-negative",
               "columns-out-of-range", "inner-column-out-of-range", "out-rows", "segment-width"]


@pytest.mark.parametrize("spoil", FILL_SPOILS)
def test_the_fill_refuses_what_would_be_unsafe(spoil):
    a = _spoil_fill(spoil, _fill_case("holes"))
    before = _snapshot(a)
    with pytest.raises(ValueError):
        _ext_bias.mrope_fill(**a)
    assert _unchanged(before, a)


def test_direct_fill_refuses_segments_past_out():
    a = _fill_case("images")  # every token attended: columns empty, out's columns are the tokens
    a["segments"] = a["segments"].copy()
    a["segments"][-1, 1] += 1
    with pytest.raises(ValueError):
        _ext_bias.mrope_fill(**a)


def _token_columns(a: dict) -> np.ndarray:
    return a["columns"] if a["columns"].shape[0] else np.arange(a["out"].shape[1])


@pytest.mark.parametrize("label", [c.label for c in CASES["mrope_fill"]()])
@pytest.mark.parametrize("parts", [1, 2, 3, 7, 64, 1000])
def test_every_cut_gives_the_same_values(label, parts):
    """Any number of token ranges -- ends inside text runs, inside an image's rows, more
    ranges than segments -- writes each token once, with the reference's values."""
    a = _fill_case(label)
    want = a["out"].copy()
    ref.mrope_fill(a["segments"], a["temporal"], a["columns"], want)
    _ext_bias.mrope_fill(**a, parts=parts)
    assert np.array_equal(a["out"], want)
    # a range of tokens starting and ending inside segments writes those tokens' columns only
    n_tokens = int(a["segments"][-1, 0] + a["segments"][-1, 1])
    for lo, hi in ((1, n_tokens - 1), (n_tokens // 3, n_tokens // 3 + 7), (5, 6)):
        if not 0 <= lo < hi <= n_tokens:
            continue
        part = np.full_like(want, -1)
        _ext_bias.mrope_fill(a["segments"], a["temporal"], a["columns"], part, lo, hi, parts=parts)
        cols = _token_columns(a)[lo:hi]
        expect = np.full_like(want, -1)
        expect[:, cols] = want[:, cols]
        assert np.array_equal(part, expect), (lo, hi)


def test_the_large_case_takes_the_parallel_path():
    a = _fill_case("parallel-size")
    n_tokens = a["columns"].shape[0] or a["out"].shape[1]
    work = n_tokens * _cython.MROPE_TOKEN_COST
    assert work >= _cython.PARALLEL_FROM
    if _cython.threads() > 1:
        assert _cython._parts(n_tokens, work) > 1


def test_sixteen_threads_at_once(monkeypatch):
    """Concurrent callers, each cutting its fill into parts on the pool, all exact."""
    monkeypatch.setattr(_cython, "PARALLEL_FROM", 1)
    monkeypatch.setattr(_cython, "MIN_BLOCK", 1)
    jobs = []
    for c in CASES["mrope_fill"]():
        want = c.arguments["out"].copy()
        ref.mrope_fill(c.arguments["segments"], c.arguments["temporal"], c.arguments["columns"], want)
        jobs.append((c.arguments, want))
    jobs = (jobs * 2)[:16]

    def right(job):
        a, want = job
        out = np.full_like(want, -1)
        _cython.mrope_fill(segments=a["segments"], temporal=a["temporal"], columns=a["columns"], out=out)
        return np.array_equal(out, want)

    assert failures_at_once(jobs, right) == []
