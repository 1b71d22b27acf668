"""The ``cython`` backend: bit-identical to the numba backend, safe under threads and fork.

Skipped when the compiled extension is not built -- unless ``FASTPE_REQUIRE_EXT`` is set,
in which case its absence fails the run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from support.inputs import BASES, D_MODELS, POSITION_LIMIT, edge_positions, hard_positions, octave_positions
from support.threads import failures_at_once

from fastpe import _backends
from fastpe._plans import poly as _poly
from fastpe._plans.words import sinusoid_turns

#: every backend it calls is named, or it calls none: the first run of make test decides it
#: (tests/conftest.py deselects it in the default-only runs)
pytestmark = pytest.mark.any_backend

REQUIRE_EXT = os.environ.get("FASTPE_REQUIRE_EXT", "").strip() == "1"

try:
    from fastpe._backends import cython as _cython
    from fastpe._backends.cython import _ext
except ImportError as exc:
    MISSING = f"{type(exc).__name__}: {exc}"
else:
    MISSING = None
if MISSING is not None:
    if REQUIRE_EXT:
        pytest.fail(
            f"FASTPE_REQUIRE_EXT is set but the extension does not load: {MISSING}", pytrace=False
        )
    pytest.skip(f"compiled extension fastpe._backends.cython._ext not built ({MISSING})", allow_module_level=True)


@pytest.fixture(scope="module")
def numba_backend():
    why = _backends.unavailable_reason("numba")
    if why is not None:
        pytest.skip(f"numba backend not available: {why}")
    return _backends.load("numba")


def assert_same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
    diff = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    if diff.size:
        r, c = np.unravel_index(diff[0], got.shape)
        raise AssertionError(
            f"{diff.size} of {got.size} values differ; first at row {r}, column {c}: "
            f"{float(got[r, c])!r} vs {float(want[r, c])!r}"
        )


def positions_for(d_model: int, base: float) -> np.ndarray:
    hard = [p for p, _ in hard_positions(d_model, base)] if d_model <= 4096 else []
    pos = sorted(set(edge_positions()) | set(octave_positions(4, seed=d_model)) | set(hard))
    return np.array(pos, dtype=np.uint32)


def forward(module, positions, d_model, base):
    out = np.empty((positions.shape[0], d_model), dtype=np.float32)
    module.sinusoid_forward(positions, d_model, base, out)
    return out


def test_coefficients_are_the_python_ones_bit_for_bit():
    sin, cos = _ext.coefficients()
    assert [c.hex() for c in sin] == [c.hex() for c in _poly.SIN_COEFFS]
    assert [c.hex() for c in cos] == [c.hex() for c in _poly.COS_COEFFS]


def test_build_info():
    info = _cython.build_info()
    assert info["kernels"] in ("avx512", "avx2", info["target"])
    assert _cython.threads() >= 1


def test_definition_constants_match_numba():
    kernels = pytest.importorskip("fastpe._backends.numba.kernels")
    assert _ext.STEPS == kernels.STEPS
    assert np.float32(_ext.TINY) == kernels.TINY


@pytest.mark.parametrize("d_model, base", [(1, 10000.0), (63, 2.0), (512, 10000.0)])
def test_steps_match_numba(numba_backend, d_model, base):
    from fastpe._backends.numba.backend import _planned

    want = _planned(sinusoid_turns, d_model, base)[1]
    got = _cython._planned(sinusoid_turns, d_model, base)[1]
    assert got.shape == want.shape and not got.flags.writeable
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("d_model", D_MODELS)
def test_forward_matches_numba(numba_backend, d_model, base):
    positions = positions_for(d_model, base)
    want = forward(numba_backend, positions, d_model, base)
    assert_same_bits(forward(_cython, positions, d_model, base), want)
    # the baseline copy of the kernels too, where the CPU would pick a wider one, and the AVX2
    # copy where it would pick AVX-512 (wide=2)
    turns, steps = _cython._planned(sinusoid_turns, d_model, base)
    for wide in (0, 2):
        copy = np.empty_like(want)
        _ext.sinusoid_forward(positions, turns, steps, copy, wide=wide)
        assert_same_bits(copy, want)


@pytest.mark.parametrize("d_model", [1, 2, 7, 64, 513])
@pytest.mark.parametrize("n_rows", [0, 1, 2, 33])
def test_small_shapes_match_numba(numba_backend, d_model, n_rows):
    positions = np.arange(POSITION_LIMIT - n_rows, POSITION_LIMIT, dtype=np.uint64)
    positions = positions.astype(np.uint32)
    want = forward(numba_backend, positions, d_model, 10000.0)
    assert_same_bits(forward(_cython, positions, d_model, 10000.0), want)


@pytest.mark.parametrize("d_model", [1, 8, 63, 512])
@pytest.mark.parametrize(
    "start, n_rows",
    [(0, 0), (0, 1), (0, 2048), (12345, 100), (POSITION_LIMIT - 1, 1), (POSITION_LIMIT - 777, 777)],
)
def test_range_matches_numba_and_forward(numba_backend, d_model, start, n_rows):
    base = 10000.0
    got = np.empty((n_rows, d_model), dtype=np.float32)
    _cython.sinusoid_range(start, d_model, base, got)
    want = np.empty_like(got)
    numba_backend.sinusoid_range(start, d_model, base, want)
    assert_same_bits(got, want)
    positions = np.arange(start, start + n_rows, dtype=np.uint64).astype(np.uint32)
    assert_same_bits(forward(_cython, positions, d_model, base), got)
    turns, steps = _cython._planned(sinusoid_turns, d_model, base)
    for wide in (0, 2):  # the baseline and AVX2 copies, whatever copy the CPU picks
        copy = np.full_like(got, np.nan)
        _ext.sinusoid_range(start, turns, steps, copy, wide=wide, parts=3 if n_rows > 3 else 1)
        assert_same_bits(copy, got)


def test_read_only_positions_are_accepted():
    positions = np.arange(10, dtype=np.uint32)
    positions.setflags(write=False)
    got = forward(_cython, positions, 6, 10000.0)
    want = np.empty_like(got)
    _cython.sinusoid_range(0, 6, 10000.0, want)
    assert_same_bits(got, want)


def test_extension_refuses_what_would_be_unsafe():
    turns, steps = _cython._planned(sinusoid_turns, 8, 10000.0)
    out = np.empty((4, 8), dtype=np.float32)
    with pytest.raises(ValueError, match="steps"):
        _ext.sinusoid_range(0, turns, _cython._planned(sinusoid_turns, 10, 10000.0)[1], out)
    with pytest.raises(ValueError, match="turns"):
        _ext.sinusoid_range(0, sinusoid_turns(10, 10000.0), steps, out)
    with pytest.raises(ValueError, match="positions for"):
        _ext.sinusoid_forward(np.zeros(3, dtype=np.uint32), turns, steps, out)
    with pytest.raises(ValueError, match="out of range"):
        _ext.sinusoid_range(0, turns, steps, out, 2, 5)
    with pytest.raises(ValueError, match="2\\*\\*32"):
        _ext.sinusoid_range(POSITION_LIMIT - 3, turns, steps, out)
    with pytest.raises(ValueError):  # read-only output
        frozen = np.empty((4, 8), dtype=np.float32)
        frozen.setflags(write=False)
        _ext.sinusoid_range(0, turns, steps, frozen)


@pytest.mark.parametrize("n_rows", [0, 1, 2, 3, 10, 4097])
@pytest.mark.parametrize("n_threads", [1, 2, 3, 16])
def test_parts_are_bounded(n_rows, n_threads):
    parts = _cython._parts(n_rows, n_rows * 1024, n_threads)
    assert 1 <= parts <= max(1, min(n_threads * _cython.PARTS_PER_THREAD, n_rows))
    assert _cython._parts(n_rows, _cython.PARALLEL_FROM - 1, n_threads) == 1


@pytest.mark.parametrize("parts", [1, 2, 3, 7, 64, 5000])
@pytest.mark.parametrize("n_rows", [1, 63, 64, 65, 1000])
def test_every_cut_gives_the_same_bits(parts, n_rows):
    """Any number of blocks -- more than threads, more than rows, edges on and off the
    anchors -- writes every row once, with the bits of one block."""
    d_model = 37
    turns, steps = _cython._planned(sinusoid_turns, d_model, 10000.0)
    positions = np.random.default_rng(n_rows).integers(0, POSITION_LIMIT, n_rows, dtype=np.uint64).astype(np.uint32)
    for kernel, first in ((_ext.sinusoid_forward, positions), (_ext.sinusoid_range, POSITION_LIMIT - n_rows)):
        single = np.empty((n_rows, d_model), dtype=np.float32)
        kernel(first, turns, steps, single)
        split = np.full_like(single, np.nan)
        kernel(first, turns, steps, split, parts=parts)
        assert_same_bits(split, single)
        part_rows = np.full_like(single, np.nan)
        kernel(first, turns, steps, part_rows, 1, n_rows, parts=parts)  # a sub-range
        assert_same_bits(part_rows[1:], single[1:])
        assert np.isnan(part_rows[0]).all()


def test_bad_parts_are_refused():
    turns, steps = _cython._planned(sinusoid_turns, 8, 10000.0)
    out = np.empty((4, 8), dtype=np.float32)
    with pytest.raises(ValueError, match="parts"):
        _ext.sinusoid_range(0, turns, steps, out, parts=0)
    with pytest.raises(ValueError, match="parts"):
        _ext.run_parts(lambda lo, hi: None, 0, 4, 0)


def test_run_parts_covers_the_range_and_reraises():
    seen = []
    _ext.run_parts(lambda lo, hi: seen.append((lo, hi)), 3, 1003, 4)
    assert sorted(r for lo, hi in seen for r in range(lo, hi)) == list(range(3, 1003))

    def fail(lo, hi):
        raise KeyError(lo)

    with pytest.raises(KeyError):
        _ext.run_parts(fail, 0, 100, 4)


def test_the_pool_persists_across_calls():
    """Workers are started once (threads() - 1 of them), not per call."""
    if _cython.threads() < 2:
        pytest.skip("one CPU: no workers")
    turns, steps = _cython._planned(sinusoid_turns, 64, 10000.0)
    out = np.empty((256, 64), dtype=np.float32)
    _ext.sinusoid_range(0, turns, steps, out, parts=2)
    assert _ext.pool_workers() == _cython.threads() - 1
    before = threading.active_count()  # the pool's threads are not Python threads
    for _ in range(50):
        _ext.sinusoid_range(0, turns, steps, out, parts=2)
    assert _ext.pool_workers() == _cython.threads() - 1
    assert threading.active_count() == before


@pytest.fixture
def split_small(monkeypatch):
    """Make every output large enough to be split across threads."""
    monkeypatch.setattr(_cython, "PARALLEL_FROM", 1)
    monkeypatch.setattr(_cython, "MIN_BLOCK", 1)


@pytest.mark.parametrize("n_threads", [2, 3, 7])
def test_split_rows_equal_single_thread(split_small, n_threads):
    d_model, base, n_rows = 257, 10000.0, 3001
    assert _cython._parts(n_rows, n_rows * d_model, n_threads) == n_threads * _cython.PARTS_PER_THREAD
    turns, steps = _cython._planned(sinusoid_turns, d_model, base)
    rng = np.random.default_rng(7)
    positions = rng.integers(0, POSITION_LIMIT, n_rows, dtype=np.uint64).astype(np.uint32)
    cases = ((_ext.sinusoid_forward, positions), (_ext.sinusoid_range, POSITION_LIMIT - n_rows))
    for kernel, first in cases:
        single = np.empty((n_rows, d_model), dtype=np.float32)
        split = np.full_like(single, np.nan)
        _cython._fill(kernel, first, turns, steps, single, n_threads=1)
        _cython._fill(kernel, first, turns, steps, split, n_threads=n_threads)
        assert_same_bits(split, single)


def test_sixteen_threads_at_once(split_small):
    """Concurrent callers, each splitting its output across threads, all exact."""
    rng = np.random.default_rng(3)
    jobs = []
    for k in range(16):
        d_model = (64, 255, 512, 3)[k % 4]
        n_rows = 2000 if k % 2 else 50
        positions = rng.integers(0, POSITION_LIMIT, n_rows, dtype=np.uint64).astype(np.uint32)
        want = np.empty((n_rows, d_model), dtype=np.float32)
        turns, steps = _cython._planned(sinusoid_turns, d_model, 10000.0)
        _cython._fill(_ext.sinusoid_forward, positions, turns, steps, want, 1)
        jobs.append((positions, d_model, want))

    def right(job):
        positions, d_model, want = job
        got = forward(_cython, positions, d_model, 10000.0)
        return np.array_equal(got.view(np.uint32), want.view(np.uint32))

    assert failures_at_once(jobs, right) == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_works_in_a_forked_child():
    """A child forked after parallel calls -- also while another thread is inside one --
    drops the parent's pool, starts its own and computes the same values."""
    script = textwrap.dedent(
        """
        import os, sys, threading
        import numpy as np
        from fastpe._backends import cython as _cython
        from fastpe._backends.cython import _ext
        _cython.PARALLEL_FROM = _cython.MIN_BLOCK = 1   # split even this small output
        out = np.empty((4000, 300), dtype=np.float32)
        _cython.sinusoid_range(0, 300, 10000.0, out)      # runs on the pool's workers
        assert _ext.pool_workers() == _cython.threads() - 1
        stop = threading.Event()

        def busy():                                       # the pool in use while we fork
            mine = np.empty_like(out)
            while not stop.is_set():
                _cython.sinusoid_range(0, 300, 10000.0, mine)

        helper = threading.Thread(target=busy)
        helper.start()
        codes = []
        for _ in range(5):
            pid = os.fork()
            if pid == 0:
                if _ext.pool_workers() != 0:
                    os._exit(4)
                again = np.empty_like(out)
                _cython.sinusoid_range(0, 300, 10000.0, again)
                ok = np.array_equal(again.view(np.uint32), out.view(np.uint32))
                ok = ok and _ext.pool_workers() == _cython.threads() - 1
                os._exit(0 if ok else 3)
            _, status = os.waitpid(pid, 0)
            codes.append(os.waitstatus_to_exitcode(status))
        stop.set()
        helper.join()
        sys.exit(max(codes))
        """
    )
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(_cython.__file__)))))
    proc = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("bf16", [False, True], ids=["float16", "bfloat16"])
def test_narrow16_every_copy_matches_numba(numba_backend, bf16):
    """The vectorised narrowing (AVX2 copy, eight at a time, and its scalar tail) and the
    baseline copy give the numba kernel's bits and tie flags: random patterns, NaNs of every
    payload, every float32 from 2**-26 up to past float16's smallest normal (its whole
    subnormal range, where the rounding shift varies), the overflow edge and the largest
    floats up to inf (where the F16C copy's tie test must not overflow), at lengths that
    leave a tail."""
    r = np.random.default_rng(5)
    sub = np.arange(0x32800000, 0x38900000, 7, dtype=np.uint32)
    nan = (np.uint32(0x7F800001) + r.integers(0, 1 << 23, 2000, dtype=np.uint32)) | (
        r.integers(0, 2, 2000, dtype=np.uint32) << 31)
    bits = np.concatenate([r.integers(0, 2**32, 1 << 20, dtype=np.uint32), sub, sub | 0x80000000, nan,
                           np.arange(0x477FE000, 0x47801000, dtype=np.uint32),
                           np.arange(0x7F7F0000, 0x7F800002, dtype=np.uint32)]).astype(np.uint32)
    want, want_ties = np.empty(bits.size, np.uint16), np.empty(bits.size, np.bool_)
    numba_backend.narrow16(bits, bf16, want, want_ties)
    for n in (bits.size, bits.size - 3, 7, 1):
        for wide in (1, 2, 0):  # the best copy, AVX2 at most, the baseline
            got, ties = np.empty(n, np.uint16), np.empty(n, np.uint8)
            _ext.narrow16(bits[:n], bf16, got, ties, wide=wide, parts=3)
            np.testing.assert_array_equal(got, want[:n])
            np.testing.assert_array_equal(ties.astype(bool), want_ties[:n])


@pytest.mark.parametrize("parts", [1, 2, 7, 64, 5000])
@pytest.mark.parametrize("n_rows", [1, 63, 64, 65, 1000])
def test_family_rows_every_cut_gives_the_same_bits(numba_backend, parts, n_rows):
    """The family kernels (integer and real positions), each part with its own scratch: any
    cut -- more parts than rows, parts shorter than a block, edges off the anchors -- and a
    sub-range write every row once with numba's bits, in every layout and dtype, and leave
    the rows outside the range as they were."""
    from fastpe import PosEncConfig
    from fastpe._plans import frequencies as freq_plans

    rng = np.random.default_rng(n_rows + parts)
    positions = rng.integers(0, POSITION_LIMIT, n_rows, dtype=np.uint64).astype(np.uint32)
    positions[: n_rows // 2] = np.arange(n_rows // 2, dtype=np.uint32) + 61  # a run across anchors
    x = rng.uniform(-1e6, 1e6, n_rows)
    for d in (67, 130):
        freqs = PosEncConfig(d).frequencies
        turns, steps = _cython._planned(freq_plans.turns, freqs)
        real_turns = freq_plans.turns(freqs)
        for layout, code in _ext.LAYOUT_CODES.items():
            for dtype in (np.float32, np.float64):
                bits = f"u{np.dtype(dtype).itemsize}"
                for kernel, first, args, op in (
                    (_ext.sincos_rows, positions, (turns, steps), numba_backend.sincos_rows),
                    (_ext.sincos_real_rows, x, (real_turns,), numba_backend.sincos_real),
                ):
                    want = np.full((n_rows, d), np.nan, dtype)
                    op(first, freqs, layout, want)
                    got = np.full_like(want, np.nan)
                    kernel(first, *args, code, got, parts=parts)
                    np.testing.assert_array_equal(got.view(bits), want.view(bits))
                    rows = np.full_like(want, np.nan)
                    kernel(first, *args, code, rows, 1, n_rows, parts=parts)
                    np.testing.assert_array_equal(rows[1:].view(bits), want[1:].view(bits))
                    assert np.isnan(rows[0]).all()


@pytest.mark.parametrize("parts", [1, 3])
def test_family_rows_one_row_per_block(numba_backend, parts):
    """A row of more than a block's doubles (1050 frequencies) makes blocks of one row, the
    anchor carried from each to the next: numba's bits, integer and real positions."""
    from fastpe import PosEncConfig
    from fastpe._plans import frequencies as freq_plans

    freqs = PosEncConfig(2100).frequencies
    turns, steps = _cython._planned(freq_plans.turns, freqs)
    positions = np.concatenate([np.arange(60, 130), [2**32 - 1, 5, 64]]).astype(np.uint32)
    x = positions.astype(np.float64) + 0.25
    for kernel, first, args, op in (
        (_ext.sincos_rows, positions, (turns, steps), numba_backend.sincos_rows),
        (_ext.sincos_real_rows, x, (freq_plans.turns(freqs),), numba_backend.sincos_real),
    ):
        want = np.full((positions.size, 2100), np.nan, np.float32)
        op(first, freqs, "halves", want)
        got = np.full_like(want, np.nan)
        kernel(first, *args, _ext.LAYOUT_CODES["halves"], got, parts=parts)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("d_model", [130, 512])
def test_family_halves_straight_from_the_products(numba_backend, d_model):
    """float32 halves filling the row are written straight from the products: numba's bits
    for both halves layouts and both copies of the kernel, at the positions whose products
    are tiny (the exact path's values) and at the edges."""
    from fastpe import PosEncConfig
    from fastpe._plans import frequencies as freq_plans

    positions = positions_for(d_model, 10000.0)
    freqs = PosEncConfig(d_model).frequencies
    assert 2 * freqs.count == d_model
    turns, steps = _cython._planned(freq_plans.turns, freqs)
    for layout in ("halves", "halves_cos"):
        want = np.full((positions.size, d_model), np.nan, np.float32)
        numba_backend.sincos_rows(positions, freqs, layout, want)
        for wide in (True, False):
            got = np.full_like(want, np.nan)
            _ext.sincos_rows(positions, turns, steps, _ext.LAYOUT_CODES[layout], got, wide=wide, parts=3)
            assert_same_bits(got, want)
