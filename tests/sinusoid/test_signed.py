"""Signed positions in forward and table, and the relative sinusoids built on them
(Transformer-XL, Conformer): exact against mpmath, bit for bit the magnitude's row with the
sines negated on every backend, layout and dtype, and the published formulas in float64.

The formulas written out here are the published ones: kimiyoung/transformer-xl
``pytorch/mem_transformer.py`` ``PositionalEmbedding`` (HF's former TransfoXL the same), NeMo
``nemo/collections/asr/parts/submodules/multi_head_attention.py`` ``RelPositionalEncoding``
(``extend_pe`` / ``create_pe``) and ESPnet ``espnet/nets/pytorch_backend/transformer/
embedding.py`` ``RelPositionalEncoding`` (positive half flipped, then the negative half
without 0) -- none of them installs here, so they are computed in NumPy float64.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

import fastpe
from fastpe import PosEncConfig, _dtypes
from conftest import AVAILABLE, FAST
from support.oracle import mp_round, spec_frequency

mpmath.mp.prec = 200

TOP = 2**32 - 1
SIGNED = np.array([0, -1, 1, -2, -63, -64, -65, 64, -4095, -(2**31), 2**31, -TOP, TOP, -TOP + 64, 123456789,
                   -123456789], dtype=np.int64)


def _dtypes_here() -> list[str]:
    names = ["float32", "float64", "float16"]
    try:
        _dtypes.resolve("bfloat16")
    except TypeError:  # no ml_dtypes
        return names
    return names + ["bfloat16"]


DTYPES = _dtypes_here()


def _bits(a):
    return a.view(f"u{a.dtype.itemsize}")


def _sine_columns(d: int, layout: str) -> list[int]:
    return [j for j in range(d) if (j % 2 == 0 if layout == "interleaved" else j < (d + 1) // 2)]


@pytest.mark.any_backend
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout, d_model", [("interleaved", 1), ("interleaved", 7), ("interleaved", 16),
                                             ("halves", 7), ("halves", 16)])  # one column: one layout
def test_negative_rows_are_the_magnitudes_with_sines_negated(backend, layout, dtype, d_model):
    cfg = PosEncConfig(d_model, layout=layout)
    dt = _dtypes.resolve(dtype)
    got = fastpe.forward(SIGNED, cfg, np.empty((len(SIGNED), d_model), dt), backend=backend)
    mag = fastpe.forward(np.abs(SIGNED), cfg, np.empty((len(SIGNED), d_model), dt), backend=backend)
    want = mag.copy()
    neg = SIGNED < 0
    cols = _sine_columns(d_model, layout)
    want[np.ix_(neg, cols)] = -want[np.ix_(neg, cols)]
    assert np.array_equal(_bits(got), _bits(want))


@pytest.mark.any_backend
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_signed_against_mpmath(dtype):
    d_model, base = 6, 10000.0
    pos = np.array([-1, -7, -65, -TOP, -(2**31) - 3, 5], dtype=np.int64)
    want = np.empty((len(pos), d_model))
    for r, p in enumerate(pos.tolist()):
        for j in range(d_model):
            x = p * spec_frequency(j // 2, d_model, base)
            want[r, j] = mp_round(mpmath.sin(x) if j % 2 == 0 else mpmath.cos(x), dtype)
    for b in AVAILABLE:
        got = fastpe.forward(pos, PosEncConfig(d_model), np.empty((len(pos), d_model), _dtypes.resolve(dtype)),
                             backend=b).astype(np.float64)
        # float32 within 1 ULP (in practice correctly rounded), float16 correctly rounded
        if dtype == "float16":
            assert np.array_equal(got, want), b
        else:
            assert np.all(np.abs(got - want) <= np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)), b


@pytest.mark.any_backend
def test_backends_agree_bit_for_bit_on_signed_positions():
    pos = np.random.default_rng(3).integers(-TOP, TOP + 1, 3000, dtype=np.int64)
    for dtype in ("float32", "float64"):
        for layout in ("interleaved", "halves"):
            outs = [fastpe.forward(pos, PosEncConfig(33, layout=layout), np.empty((3000, 33), dtype), backend=b)
                    for b in FAST]
            for o in outs[1:]:
                assert np.array_equal(_bits(o), _bits(outs[0]))


def test_signed_validation():
    cfg = PosEncConfig(4)
    out = np.zeros((1, 4), np.float32)
    for bad, exc in (([-(2**32)], ValueError), ([2**32], ValueError), ([-1.5], ValueError), ([np.nan], ValueError),
                     ([True], TypeError), (np.array([1, 2, 3])[None], ValueError), (["a"], TypeError)):
        with pytest.raises(exc, match="positions"):
            fastpe.forward(bad, cfg, out if len(np.shape(bad)) == 1 else np.zeros((3, 4), np.float32))
    assert np.all(out == 0)  # nothing written
    # -0.0, big floats holding whole numbers, unsigned and object input
    got = fastpe.forward(np.array([-0.0, -4294967295.0]), cfg, np.empty((2, 4), np.float32))
    assert np.array_equal(got, fastpe.forward([0, -TOP], cfg, np.empty((2, 4), np.float32)))
    assert np.array_equal(got, fastpe.forward(np.array([0, -TOP], dtype=object), cfg, np.empty((2, 4), np.float32)))


def test_signed_positions_not_modified_and_not_overlapping():
    pos = np.array([-3, 4, -5], dtype=np.int64)
    keep = pos.copy()
    fastpe.forward(pos, PosEncConfig(2), np.empty((3, 2), np.float32))
    assert np.array_equal(pos, keep)


# ----------------------------------------------------------------------------- table start/step


@pytest.mark.any_backend
@pytest.mark.parametrize("start, step, n", [(10, -1, 21), (-5, 1, 11), (0, -1, 3), (TOP, -1, 130),
                                            (-TOP, 1, 70), (3, 2, 9), (100, -7, 20)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_table_start_step_is_forward_of_its_positions(backend, start, step, n, dtype):
    pos = start + step * np.arange(n, dtype=np.int64)
    for layout in ("interleaved", "halves"):
        t = fastpe.table(9, n, layout=layout, start=start, step=step, dtype=dtype, backend=backend)
        f = fastpe.forward(pos, PosEncConfig(9, layout=layout), np.empty((n, 9), dtype), backend=backend)
        assert np.array_equal(_bits(t), _bits(f))


def test_table_existing_calls_unchanged():
    assert np.array_equal(fastpe.table(8, 40), fastpe.table(8, 40, start=0, step=1))
    # one row: the step never applies, whatever its size
    assert np.array_equal(fastpe.table(8, 1, start=-5, step=10**30), fastpe.forward([-5], PosEncConfig(8),
                                                                                      np.empty((1, 8), np.float32)))
    assert np.array_equal(fastpe.table(8, 40, start=5),
                          fastpe.forward(np.arange(5, 45), PosEncConfig(8), np.empty((40, 8), np.float32)))


@pytest.mark.any_backend
def test_table_start_step_validation():
    for kwargs, exc, name in ((dict(step=0), ValueError, "step"), (dict(step=1.0), TypeError, "step"),
                              (dict(start=True), TypeError, "start"), (dict(start=-(2**32)), ValueError, "start"),
                              (dict(start=2**32 - 5, step=1), ValueError, "last position"),
                              (dict(start=-(2**32) + 5, step=-1), ValueError, "last position")):
        with pytest.raises(exc, match=name):
            fastpe.table(4, 10, **kwargs)


# ----------------------------------------------------------------------------- Transformer-XL


def transformer_xl_formula(klen: int, d: int, clamp_len: int = -1) -> np.ndarray:
    """mem_transformer.py: pos_seq = arange(klen-1, -1, -1.0), clamp_ if clamp_len > 0,
    inv_freq = 1 / 10000 ** (arange(0, d, 2) / d), cat([sin, cos]) of the outer product."""
    pos_seq = np.arange(klen - 1, -1, -1.0)
    if clamp_len > 0:
        pos_seq = np.minimum(pos_seq, clamp_len)
    inv_freq = 1 / (10000 ** (np.arange(0.0, d, 2.0) / d))
    x = np.outer(pos_seq, inv_freq)
    return np.concatenate([np.sin(x), np.cos(x)], axis=-1)


@pytest.mark.any_backend
@pytest.mark.parametrize("klen, d, clamp", [(1, 2, None), (37, 16, None), (37, 16, 10), (37, 16, 0),
                                            (37, 16, -1), (64, 8, 100), (300, 64, 299)])
def test_transformer_xl_formula(backend, klen, d, clamp):
    got = fastpe.transformer_xl_embedding(klen, d, clamp_len=clamp, dtype="float64", backend=backend)
    want = transformer_xl_formula(klen, d, -1 if clamp is None else clamp)
    assert got.shape == (klen, d)
    assert np.abs(got - want).max() < 1e-12  # the formula's own float64 rounding: a few 1e-16 per radian


@pytest.mark.any_backend
def test_transformer_xl_is_the_signed_table_bit_for_bit(backend):
    t = fastpe.transformer_xl_embedding(200, 32, backend=backend)
    assert np.array_equal(t, fastpe.table(32, 200, layout="halves", start=199, step=-1, backend=backend))
    c = fastpe.transformer_xl_embedding(200, 32, clamp_len=50, backend=backend)
    assert np.array_equal(c[149:], t[149:]) and np.array_equal(c[:149], np.broadcast_to(t[149], (149, 32)))


@pytest.mark.any_backend
def test_transformer_xl_validation():
    for args, kwargs, exc, name in (((0, 8), {}, ValueError, "klen"), ((4, 7), {}, ValueError, "d_model"),
                                    ((4, 8), dict(clamp_len=1.5), TypeError, "clamp_len"),
                                    ((4.0, 8), {}, TypeError, "klen"), ((4, 8), dict(dtype="int8"), TypeError, "dtype")):
        with pytest.raises(exc, match=name):
            fastpe.transformer_xl_embedding(*args, **kwargs)


# ----------------------------------------------------------------------------- Conformer


def nemo_formula(length: int, d: int) -> np.ndarray:
    """NeMo's RelPositionalEncoding: positions arange(L-1, -L, -1), div_term exp(arange(0, d, 2)
    * -(ln 10000 / d)), pe[:, 0::2] = sin, pe[:, 1::2] = cos."""
    positions = np.arange(length - 1, -length, -1.0)[:, None]
    div_term = np.exp(np.arange(0, d, 2.0) * -(math.log(10000.0) / d))
    pe = np.zeros((positions.shape[0], d))
    pe[:, 0::2] = np.sin(positions * div_term)
    pe[:, 1::2] = np.cos(positions * div_term)
    return pe


def espnet_formula(length: int, d: int) -> np.ndarray:
    """ESPnet's RelPositionalEncoding: the positive half (0 .. L-1) flipped, then the negative
    half without position 0."""
    position = np.arange(0, length, dtype=np.float64)[:, None]
    div_term = np.exp(np.arange(0, d, 2.0) * -(math.log(10000.0) / d))
    pos, neg = np.zeros((length, d)), np.zeros((length, d))
    pos[:, 0::2], pos[:, 1::2] = np.sin(position * div_term), np.cos(position * div_term)
    neg[:, 0::2], neg[:, 1::2] = np.sin(-1 * position * div_term), np.cos(-1 * position * div_term)
    return np.concatenate([pos[::-1], neg[1:]])


@pytest.mark.any_backend
@pytest.mark.parametrize("length, d", [(1, 2), (20, 8), (129, 64)])
def test_conformer_formulas(backend, length, d):
    nemo = fastpe.conformer_embedding(length, d, dtype="float64", backend=backend)
    assert nemo.shape == (2 * length - 1, d)
    assert np.abs(nemo - nemo_formula(length, d)).max() < 1e-12
    espnet = fastpe.conformer_embedding(length, d, convention="espnet", dtype="float64", backend=backend)
    assert np.array_equal(espnet, nemo)
    assert np.abs(espnet - espnet_formula(length, d)).max() < 1e-12
    legacy = fastpe.conformer_embedding(length, d, convention="espnet_legacy", backend=backend)
    assert np.array_equal(legacy, fastpe.table(d, length, backend=backend))


def test_conformer_rows_mirror_bit_for_bit(backend):
    c = fastpe.conformer_embedding(100, 16, dtype="float16", backend=backend)
    mirrored = c[::-1].copy()
    mirrored[:, 0::2] = -mirrored[:, 0::2]
    mirrored[99] = c[99]  # position 0: sin 0 is +0.0 (not the -0.0 a negation gives)
    assert np.array_equal(_bits(c), _bits(mirrored))
    assert np.array_equal(_bits(c[99]), _bits(fastpe.table(16, 1, dtype="float16")[0]))


@pytest.mark.any_backend
def test_conformer_validation():
    for args, kwargs, exc, name in (((0, 8), {}, ValueError, "length"), ((2**31 + 1, 8), {}, ValueError, "length"),
                                    ((4, 8), dict(convention="wenet"), ValueError, "convention"),
                                    ((4, 0), {}, ValueError, "d_model")):
        with pytest.raises(exc, match=name):
            fastpe.conformer_embedding(*args, **kwargs)


# ----------------------------------------------------------------------------- threads and fork

FORK_SCRIPT = r"""
import os, sys
import numpy as np
import fastpe
from fastpe.relative import sandwich_bias
backend = sys.argv[1]
pos = np.arange(2047, -2048, -1, dtype=np.int64)
cfg = fastpe.PosEncConfig(126, layout="halves")
before = fastpe.forward(pos, cfg, np.empty((len(pos), 126), np.float32), backend=backend)
bias = sandwich_bias(4, 300, hidden_size=64, backend=backend)
pid = os.fork()
if pid == 0:
    again = fastpe.forward(pos, cfg, np.empty((len(pos), 126), np.float32), backend=backend)
    b2 = sandwich_bias(4, 300, hidden_size=64, backend=backend)
    os._exit(0 if np.array_equal(again, before) and np.array_equal(b2, bias) else 3)
_, status = os.waitpid(pid, 0)
print("fork-ok" if os.waitstatus_to_exitcode(status) == 0 else "fork-bad")
"""


@pytest.mark.any_backend
def test_signed_paths_from_sixteen_threads_at_once():
    from support.threads import failures_at_once

    rng = np.random.default_rng(11)
    jobs = []
    for backend in FAST:
        for k in range(8):
            pos = rng.integers(-TOP, TOP + 1, 600, dtype=np.int64)
            layout = ("interleaved", "halves")[k % 2]
            cfg = PosEncConfig(126, layout=layout)
            want = fastpe.forward(pos, cfg, np.empty((600, 126), np.float32), backend=backend)
            jobs.append((backend, pos, cfg, want))

    def right(job):
        backend, pos, cfg, want = job
        out = np.full(want.shape, np.nan, np.float32)
        fastpe.forward(pos, cfg, out, backend=backend)
        return np.array_equal(out.view(np.uint32), want.view(np.uint32))

    assert not failures_at_once(jobs, right)


@pytest.mark.any_backend
@pytest.mark.parametrize("backend_name", FAST)
def test_signed_paths_and_sandwich_in_a_forked_child(backend_name, tmp_path):
    import subprocess
    import sys
    import textwrap

    from conftest import fastpe_env

    script = tmp_path / "fork_signed.py"
    script.write_text(textwrap.dedent(FORK_SCRIPT))
    try:
        proc = subprocess.run([sys.executable, str(script), backend_name], capture_output=True, text=True,
                              timeout=240, env=fastpe_env(), cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"fork case hung: {exc}")
    assert proc.returncode == 0 and "fork-ok" in proc.stdout, proc.stdout + proc.stderr


def test_c_kernels_baseline_and_avx2_copies_agree():
    """The signed kernels' baseline and AVX2 copies (csrc/fastpe_signed.h), and the row cuts
    into parts, write the same bits."""
    try:
        from fastpe._backends.cython import _ext, _planned
    except ImportError:
        pytest.skip("the compiled extension is not built")
    from fastpe._plans import frequencies as freq_plans
    from fastpe._plans.words import sinusoid_turns

    pos = np.random.default_rng(5).integers(-TOP, TOP + 1, 700, dtype=np.int64)
    pos[:3] = [0, -TOP, TOP]
    turns, steps = _planned(sinusoid_turns, 67, 10000.0)
    outs = []
    for wide, parts in ((False, 1), (True, 1), (True, 7)):
        out = np.full((700, 67), np.nan, np.float32)
        _ext.sinusoid_signed(pos, turns, steps, out, wide=wide, parts=parts)
        outs.append(out.view(np.uint32))
    assert all(np.array_equal(o, outs[0]) for o in outs)
    cfg = PosEncConfig(67, layout="halves")
    turns, steps = _planned(freq_plans.turns, cfg.frequencies)
    for dtype in (np.float32, np.float64):
        outs = []
        for wide, parts in ((False, 1), (True, 1), (True, 5)):
            out = np.full((700, 67), np.nan, dtype)
            _ext.sincos_rows_signed(pos, turns, steps, 1, out, wide=wide, parts=parts)
            outs.append(out.view(f"u{out.itemsize}"))
        assert all(np.array_equal(o, outs[0]) for o in outs)
    with pytest.raises(ValueError, match="positions"):
        _ext.sinusoid_signed(np.array([-(2**32)], np.int64), *_planned(sinusoid_turns, 4, 10000.0),
                             np.empty((1, 4), np.float32))
