"""float16 / bfloat16 tables narrowed in blocks, straight into ``out``: the block and chunk
boundaries, the per-thread scratch and the tie search change no bit.

:func:`fastpe.sinusoid.narrow_into` fills float32 rows a block at a time into this thread's
scratch and narrows each block into ``out``'s memory; :func:`fastpe._dtypes.narrow` calls the
backend on chunks of ``_TIE_BLOCK`` elements and finds the ties eight flags at a time.  Here
the blocks and chunks are made small (odd sizes, not multiples of eight), so that ties fall
in later blocks and chunks and in the tails, and every element is checked against the
reference backend and, at every tie of the float32 table, against mpmath.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import fastpe
from fastpe import _backends, _dtypes
from fastpe import sinusoid as _sinusoid

from fastpe._plans.layouts import column_owner
from conftest import fastpe_env
from support.oracle import geometric_frequency, mp_round

ml_dtypes = pytest.importorskip("ml_dtypes")

#: 1500 rows of 32 columns: nine float16 ties of the float32 table (one bfloat16 tie)
D, N = 32, 1500
KW: dict = {}


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16)


def _mp_value(r: int, j: int, freqs, target: str) -> float:
    import mpmath

    k, is_cos = column_owner("interleaved", D // 2, j)
    with mpmath.workdps(60):
        angle = r * geometric_frequency(freqs, k)
        value = mpmath.cos(angle) if is_cos else mpmath.sin(angle)
    return mp_round(value, target)


@pytest.fixture(scope="module")
def reference():
    """The reference backend's tables (unpatched sizes)."""
    return {t: fastpe.table(D, N, dtype=t, backend="python", **KW) for t in ("float16", "bfloat16")}


@pytest.mark.parametrize("target", ["float16", "bfloat16"])
def test_small_blocks_and_chunks_give_the_reference_bits(fast_backend, monkeypatch, reference, target):
    rows_per_block, chunk = 37, 100
    monkeypatch.setattr(_sinusoid, "_NARROW_VALUES", D * rows_per_block)  # 41 blocks, the last short
    monkeypatch.setattr(_dtypes, "_TIE_BLOCK", chunk)  # 12 chunks a block, the last 84 long
    f32 = fastpe.table(D, N, backend=fast_backend, **KW)
    ties = _dtypes.narrow_ties(f32, _dtypes.FORMATS[target])
    if target == "float16":  # the cases this is about
        size = D * rows_per_block
        block, offset = np.divmod(ties, size)
        start = offset - offset % chunk
        length = np.minimum(chunk, np.minimum(size, D * N - block * size) - start)
        in_tail = offset - start >= length - length % 8  # past the chunk's last whole word
        assert (block > 0).sum() >= 5 and (offset >= chunk).sum() >= 5 and in_tail.any()
    got = fastpe.table(D, N, dtype=target, backend=fast_backend, **KW)
    assert np.array_equal(_bits(got), _bits(reference[target]))
    freqs = fastpe.PosEncConfig(D, **KW).frequencies
    for t in ties.tolist():
        r, j = divmod(t, D)
        assert float(got[r, j]) == _mp_value(r, j, freqs, target), (r, j)


def test_a_table_is_the_same_in_one_block_or_many(fast_backend, monkeypatch):
    """A table of 2 blocks of 1 MiB chunks at the default sizes (odd row count), and the
    same table in blocks of 3 rows: identical bits."""
    whole = fastpe.table(512, 2100, dtype="float16", backend=fast_backend)
    monkeypatch.setattr(_sinusoid, "_NARROW_VALUES", 512 * 3)
    monkeypatch.setattr(_dtypes, "_TIE_BLOCK", 777)
    small = fastpe.table(512, 2100, dtype="float16", backend=fast_backend)
    assert np.array_equal(_bits(whole), _bits(small))
    assert _dtypes.narrow_ties(fastpe.table(512, 2100, backend=fast_backend), _dtypes.FORMATS["float16"]).size > 50


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 17, 4099, 1 << 16, (1 << 16) + 1, (1 << 16) + 7, 100_003])
def test_flagged_is_flatnonzero(size):
    rng = np.random.default_rng(size)
    for density in (0.0, 0.01, 0.5, 1.0):
        flags = rng.random(size) < density
        got = _dtypes._flagged(flags)
        assert np.array_equal(got, np.flatnonzero(flags)) and got.dtype.kind == "i"


@pytest.mark.parametrize("module_name", [None, "python", "fast"])
def test_narrow_into_an_out_that_is_not_contiguous(module_name, fast_backend):
    """``narrow(..., out=)`` on a strided ``out`` writes the same values as without it."""
    module = None if module_name is None else _backends.load(fast_backend if module_name == "fast" else module_name)
    x32 = fastpe.table(D, N, **KW)
    ties = _dtypes.narrow_ties(x32, _dtypes.FORMATS["float16"])
    assert ties.size

    def decided(idx):  # a marker value, to see that the ties' answers land at their places
        return [0.5] * len(idx)

    want = _dtypes.narrow(x32, np.float16, decided, module)
    assert np.all(want.reshape(-1)[ties] == 0.5)
    base = np.full((N, 2 * D), np.float16(-7.0))
    out = base[:, ::2]
    assert _dtypes.narrow(x32, np.float16, decided, module, out=out) is out
    assert np.array_equal(_bits(np.ascontiguousarray(out)), _bits(want))
    assert np.all(base[:, 1::2] == -7.0)
    contiguous = np.empty((N, D), np.float16)
    assert _dtypes.narrow(x32, np.float16, decided, module, out=contiguous) is contiguous
    assert np.array_equal(_bits(contiguous), _bits(want))


def test_scratch_is_reused_per_thread_and_never_shared():
    a = _dtypes.take_scratch(1000, np.float32)
    b = _dtypes.take_scratch(1000, np.float32)  # taken while a is out: its own memory
    assert not np.shares_memory(a, b) and a.size >= 1000 and b.size >= 1000
    _dtypes.give_scratch(a)
    _dtypes.give_scratch(b)
    again = _dtypes.take_scratch(500, np.float32)  # the kept one, reused
    assert again is a or again is b
    seen = []
    thread = threading.Thread(target=lambda: seen.append(_dtypes.take_scratch(500, np.float32)))
    thread.start()
    thread.join()
    assert not np.shares_memory(seen[0], again)  # another thread's cache is its own
    _dtypes.give_scratch(again)
    big = _dtypes.take_scratch(_dtypes._SCRATCH_KEEP // 4 + 1, np.float32)
    _dtypes.give_scratch(big)  # too large to keep
    assert _dtypes.take_scratch(10, np.float32) is not big


@pytest.mark.parametrize("bf16", [False, True], ids=["float16", "bfloat16"])
def test_every_copy_of_the_cython_narrowing_gives_the_baseline_bits(bf16):
    """csrc/fastpe_narrow16x.h's copies (``wide=1`` the best here, ``wide=2`` AVX2) against
    the baseline (``wide=0``): for every exponent and both signs, every pattern of the low 13
    significand bits (the bits float16 drops; bfloat16's 16 include them) under two high
    parts, NaN payloads, the overflow edge, at lengths that leave a tail and cut into parts."""
    _ext = pytest.importorskip("fastpe._backends.cython._ext")
    r = np.random.default_rng(24)
    e = np.arange(256, dtype=np.uint32)[:, None, None] << np.uint32(23)
    high = np.array([0, 0x3FF, 0x204, int(r.integers(0, 1 << 10))], np.uint32)  # 0x204: bfloat16 ties
    high = high[None, :, None] << np.uint32(13)
    low = np.arange(1 << 13, dtype=np.uint32)[None, None, :]
    bits = (e | high | low).reshape(-1)
    bits = np.concatenate([bits, bits[r.permutation(bits.size)[: 1 << 20]] | np.uint32(0x80000000),
                           np.arange(0x477FE000, 0x47801000, dtype=np.uint32)])
    want = np.empty(bits.size, np.uint16)
    want_ties = np.empty(bits.size, np.uint8)
    _ext.narrow16(bits, bf16, want, want_ties, wide=0)
    assert want_ties.sum() > 100
    for n in (bits.size, bits.size - 3, 47, 17, 15, 1):
        for wide in (1, 2):
            got, ties = np.empty(n, np.uint16), np.empty(n, np.uint8)
            _ext.narrow16(bits[:n], bf16, got, ties, wide=wide, parts=3)
            np.testing.assert_array_equal(got, want[:n])
            np.testing.assert_array_equal(ties, want_ties[:n])


def test_threads_narrowing_at_once_each_get_the_table(fast_backend):
    """Eight threads making float16 and bfloat16 tables at once, each through its own
    scratch (reused from call to call), all get the one-thread bits."""
    want = {t: fastpe.table(512, 700, dtype=t, backend=fast_backend) for t in ("float16", "bfloat16")}
    bad = []

    def work(k):
        for i in range(6):
            t = ("float16", "bfloat16")[(k + i) % 2]
            if not np.array_equal(_bits(fastpe.table(512, 700, dtype=t, backend=fast_backend)), _bits(want[t])):
                bad.append((k, i, t))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert bad == []


FORK_SCRIPT = """
import os, sys
import numpy as np
import fastpe

BACKEND = sys.argv[1]
def table():
    return fastpe.table(512, 3000, dtype="float16", backend=BACKEND).view(np.uint16)

want = table()                  # the parent's scratch is now cached (and inherited)
pid = os.fork()
if pid == 0:
    os._exit(0 if np.array_equal(table(), want) and np.array_equal(table(), want) else 3)
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
assert np.array_equal(table(), want)
print("fork-ok")
"""


def test_a_forked_child_narrows_with_the_inherited_scratch(fast_backend, tmp_path):
    script = tmp_path / "fork_narrow.py"
    script.write_text(textwrap.dedent(FORK_SCRIPT))
    try:
        proc = subprocess.run([sys.executable, str(script), fast_backend], capture_output=True, text=True,
                              timeout=240, env=fastpe_env(), cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"fork case hung: {exc}")
    assert proc.returncode == 0 and "fork-ok" in proc.stdout, proc.stdout + proc.stderr
