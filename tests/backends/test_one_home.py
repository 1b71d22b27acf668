"""Rules that more than one place must follow, each kept in one home: the tests that tie the
other places (the compiled extension, the numba kernels) to it."""

from __future__ import annotations

import pytest

from fastpe._exact import rounding

#: every backend it calls is named, or it calls none: the first run of make test decides it
#: (tests/conftest.py deselects it in the default-only runs)
pytestmark = pytest.mark.any_backend


def test_ziv_doubles_the_precision_until_decided():
    tried = []

    def attempt(precision):
        tried.append(precision)
        return "done" if precision >= 40 else None

    assert rounding.ziv(attempt, 10, 100, "x") == "done"
    assert tried == [10, 20, 40]


def test_ziv_reports_what_it_could_not_decide():
    tried = []
    with pytest.raises(RuntimeError, match="the thing: undecided at 80 digits"):
        rounding.ziv(lambda p: tried.append(p), 10, 80, "the thing", "digits")
    assert tried == [10, 20, 40, 80]


def test_ziv_keeps_a_falsy_answer():
    # 0.0 and -0.0 are answers, not "undecided"
    assert rounding.ziv(lambda p: -0.0, 1, 1, "zero") == 0.0


# ------------------------------------------------------------------ kernel constants
# fastpe._plans holds each rule the kernels share; the numba kernels read it, the C kernels
# have it compiled in, so these tests tie the compiled values to the Python home.

import numpy as np  # noqa: E402

from fastpe._plans import alibi as _alibi  # noqa: E402
from fastpe._plans import layouts as _layouts  # noqa: E402
from fastpe._plans import words as _words  # noqa: E402
from fastpe._plans.frequencies import Geometric  # noqa: E402
from conftest import AVAILABLE  # noqa: E402


def _ext_modules():
    ext = pytest.importorskip("fastpe._backends.cython._ext")
    ext_bias = pytest.importorskip("fastpe._backends.cython._ext_bias")
    return ext, ext_bias


def test_the_c_kernels_were_built_from_the_plans_constants():
    ext, ext_bias = _ext_modules()
    assert ext.STEPS == _words.STEPS
    assert ext.TINY == _words.TINY  # the float FASTPE_TINY
    assert ext.TINY64 == _words.TINY  # the double FASTPE_TINY64
    assert ext.LAYOUT_CODES == _layouts.LAYOUT_CODES
    assert ext_bias.FORM_CODES == _alibi.FORM_CODES


def test_the_c_mrope_kernels_were_built_from_the_plans_constants():
    from fastpe._plans import mrope as _mrope

    _, ext_bias = _ext_modules()
    assert ext_bias.MROPE_CODES == _mrope.CODES
    assert sorted(ext_bias.MROPE_CODES.values()) == sorted(_mrope.PLAN_ERRORS)
    assert ext_bias.MROPE_POSITION_LIMIT == _mrope.POSITION_LIMIT
    assert ext_bias.MROPE_FIELDS == len(_mrope.SEGMENT_FIELDS)


def test_the_numba_mrope_kernels_read_the_plans_constants():
    pytest.importorskip("numba")
    from fastpe._backends.numba import mrope as km
    from fastpe._plans import mrope as _mrope

    assert km._LIMIT == _mrope.POSITION_LIMIT
    assert {name: getattr(km, f"_{name}") for name in _mrope.CODES} == _mrope.CODES


def test_the_cython_backend_checks_what_was_compiled_in():
    _ext_modules()
    from fastpe._backends import cython as backend

    assert set(backend._COMPILED) >= {"polynomials", "STEPS", "TINY", "TINY64", "layout codes", "form codes",
                                      "M-RoPE codes", "M-RoPE limit", "M-RoPE fields"}
    assert backend._STALE == []


def test_the_numba_kernels_read_the_plans_constants():
    pytest.importorskip("numba")
    from fastpe._backends.numba import bias, kernels

    assert kernels.STEPS == _words.STEPS
    assert kernels.TINY == np.float32(_words.TINY) and kernels.TINY.dtype == np.float32
    assert kernels._TINY_BITS == np.float32(_words.TINY).view(np.int32)
    assert kernels.TINY64 == _words.TINY and isinstance(kernels.TINY64, float)
    assert (kernels._INTERLEAVED, kernels._HALVES) == (_layouts.LAYOUT_CODES["interleaved"], _layouts.LAYOUT_CODES["halves"])
    assert (bias._CAUSAL, bias._BLOOM, bias._MPT) == tuple(_alibi.FORM_CODES[f] for f in ("causal", "bloom", "mpt"))


def _compiled_backends():
    return [name for name in ("numba", "cython") if name in AVAILABLE]


@pytest.mark.parametrize("d", [9, 10, 12])
@pytest.mark.parametrize("name", _compiled_backends())
def test_every_layout_code_scatters_as_columns_says(name, d):
    """Each layout's code puts the values where fastpe._plans.layouts.columns says: every
    layout is the full interleaved row (sine of frequency k in 2k, cosine in 2k + 1)
    rearranged, clipped to ``d`` columns, zeros past ``2 * count``."""
    import importlib

    backend = importlib.import_module({"numba": "fastpe._backends.numba.backend",
                                       "cython": "fastpe._backends.cython"}[name])
    freqs = Geometric(5, 5.0, 10000.0)
    positions = np.array([0, 1, 63, 64, 1000, 2**32 - 1], dtype=np.uint32)

    def rows(layout, width):
        out = np.full((len(positions), width), np.nan, dtype=np.float32)
        backend.sincos_rows(positions=positions, freqs=freqs, layout=layout, out=out)
        return out

    full = rows("interleaved", 2 * freqs.count)
    assert np.array_equal(full[0], np.tile(np.float32([0.0, 1.0]), freqs.count))  # sin 0, cos 0
    for layout in _layouts.LAYOUTS:
        want = np.zeros((len(positions), d), dtype=np.float32)
        for k, (js, jc) in enumerate(_layouts.columns(freqs.count, d, layout)):
            if js is not None:
                want[:, js] = full[:, 2 * k]
            if jc is not None:
                want[:, jc] = full[:, 2 * k + 1]
        assert np.array_equal(rows(layout, d), want), layout


# ------------------------------------------------------------------ the step tables


def test_one_step_table_cache_serves_every_compiled_backend():
    import importlib

    from fastpe._backends._steps import step_plan
    from fastpe._plans.words import frequency_turns, sinusoid_turns

    names = _compiled_backends()
    if not names:
        pytest.skip("no compiled backend")
    tables = []
    for name in names:
        backend = importlib.import_module({"numba": "fastpe._backends.numba.backend",
                                           "cython": "fastpe._backends.cython"}[name])
        for words, key in ((sinusoid_turns, (12, 10000.0)), (frequency_turns, ((1.0, 0.01, 1e-5),))):
            turns, steps = backend._planned(words, *key)
            assert turns is words(*key)
            assert steps.shape == (_words.STEPS, 2, turns.shape[1]) and not steps.flags.writeable
            assert np.array_equal(steps[0], [[1.0] * turns.shape[1], [0.0] * turns.shape[1]])  # m = 0
            assert backend._planned(words, *key)[1] is steps  # cached
            assert step_plan(backend._planned.args[0], words, *key)[1] is steps  # in the one cache
            tables.append(steps)
    for a, b in zip(tables, tables[2:]):  # numba's and the C kernels' tables: the same bits
        assert np.array_equal(a.view(np.uint64), b.view(np.uint64))
