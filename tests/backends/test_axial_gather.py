"""axial_gather on the compiled backends: the parallel and serial kernels write the same bits,
any cut of the tokens into blocks writes every row once, the C wrapper refuses an index or a
piece outside the arrays before writing anything, sixteen threads calling at once each get
the serial bits, and a child forked after a parallel call gets the parent's.  (The contract
test compares every backend with the python one on the registry's cases.)"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from support.threads import failures_at_once

from conftest import FAST

#: every backend it calls is named, or it calls none: the first run of make test decides it
#: (tests/conftest.py deselects it in the default-only runs)
pytestmark = pytest.mark.any_backend


def _grid_case(sizes=(2, 37, 61), widths=(16, 56, 56), bits=np.uint32, seed=0):
    """FLUX's gptj pieces over a meshgrid of ``sizes``: (table, index, pieces, out_cos, out_sin),
    the outputs full of ones."""
    r = np.random.default_rng(seed)
    k = max(widths)
    table = r.integers(0, np.iinfo(bits).max, (sum(sizes), 2, k), dtype=bits, endpoint=True)
    grid = np.stack([g.reshape(-1) for g in np.meshgrid(*map(np.arange, sizes), indexing="ij")])
    index = np.ascontiguousarray(grid + np.cumsum((0,) + tuple(sizes[:-1]))[:, None], dtype=np.int64)
    starts = np.cumsum((0,) + tuple(widths[:-1]))
    pieces = np.array([(a, 0, int(s), w) for a, (s, w) in enumerate(zip(starts, widths))], dtype=np.int64)
    n, d = index.shape[1], sum(widths)
    full = np.iinfo(bits).max
    return table, index, pieces, np.full((n, d), full, bits), np.full((n, d), full, bits)


def _expected(table, index, pieces, n, d, bits):
    cos, sin = np.full((n, d), np.iinfo(bits).max, bits), np.full((n, d), np.iinfo(bits).max, bits)
    for axis, src, col, width in pieces.tolist():
        rows = table[index[axis]]
        cos[:, col:col + width] = rows[:, 0, src:src + width]
        sin[:, col:col + width] = rows[:, 1, src:src + width]
    return cos, sin


@pytest.mark.skipif("numba" not in FAST, reason="numba backend not available")
@pytest.mark.parametrize("bits", [np.uint16, np.uint32, np.uint64])
def test_numba_parallel_and_serial_write_the_same_bits(bits):
    from fastpe._backends.numba import axial

    table, index, pieces, cos, sin = _grid_case(bits=bits)
    want = _expected(table, index, pieces, *cos.shape, bits)
    for kernel in (axial.axial_gather_serial, axial.axial_gather_parallel):
        c, s = cos.copy(), sin.copy()
        kernel(table, index, pieces, c, s)
        assert c.tobytes() == want[0].tobytes() and s.tobytes() == want[1].tobytes()


def _ext():
    return pytest.importorskip("fastpe._backends.cython._ext")


@pytest.mark.parametrize("wide", [True, False], ids=["best-copy", "baseline-copy"])
@pytest.mark.parametrize("parts", [1, 2, 3, 7, 64, 5000])
def test_every_cut_of_the_tokens_gives_the_same_bits(parts, wide):
    """Any cut, with the CPU's best copy of the kernel or the baseline one; blocks of 4 to 40
    bytes (under, at and over a 32-byte vector, with and without a tail)."""
    ext = _ext()
    table, index, pieces, cos, sin = _grid_case(sizes=(1, 9, 7), widths=(2, 6, 10))
    want = _expected(table, index, pieces, *cos.shape, np.uint32)
    ext.axial_gather(table, index, pieces, cos, sin, parts=parts, wide=wide)
    assert cos.tobytes() == want[0].tobytes() and sin.tobytes() == want[1].tobytes()
    for bits, widths in ((np.uint16, (2, 16, 20)), (np.uint64, (4, 8, 6)), (np.uint32, (8, 16, 18))):
        args = _grid_case(sizes=(2, 3, 5), widths=widths, bits=bits)
        ext.axial_gather(*args, parts=parts, wide=wide)
        assert args[3].tobytes() + args[4].tobytes() == b"".join(
            w.tobytes() for w in _expected(*args[:3], *args[3].shape, bits))
    c, s = np.full_like(cos, 7), np.full_like(sin, 7)
    ext.axial_gather(table, index, pieces, c, s, 5, 40, parts=parts, wide=wide)  # a sub-range of tokens
    assert (c[:5] == 7).all() and (c[40:] == 7).all() and (s[:5] == 7).all()
    assert c[5:40].tobytes() == want[0][5:40].tobytes() and s[5:40].tobytes() == want[1][5:40].tobytes()


@pytest.mark.parametrize("change, match", [
    (lambda a: a["index"].__setitem__((1, 3), 9999), "index\\[1\\]"),
    (lambda a: a["index"].__setitem__((0, 0), -1), "index\\[0\\]"),
    (lambda a: a["pieces"].__setitem__((2, 3), 57), "piece 2"),      # wider than the table
    (lambda a: a["pieces"].__setitem__((2, 2), 100), "piece 2"),     # past the row's end
    (lambda a: a["pieces"].__setitem__((0, 0), 3), "piece 0"),       # no such axis
    (lambda a: a["pieces"].__setitem__((1, 1), -1), "piece 1"),
    (lambda a: a.__setitem__("out_sin", np.zeros((5, 128), np.uint32)), "out_sin"),
    (lambda a: a.__setitem__("index", np.zeros((3, 5), np.int64)), "index"),
])
def test_the_extension_refuses_what_would_be_unsafe_and_writes_nothing(change, match):
    ext = _ext()
    table, index, pieces, cos, sin = _grid_case(sizes=(1, 4, 5))
    arguments = dict(table=table, index=index, pieces=pieces, out_cos=cos, out_sin=sin)
    change(arguments)
    before = cos.copy(), arguments["out_sin"].copy()
    with pytest.raises(ValueError, match=match):
        ext.axial_gather(*arguments.values())
    assert cos.tobytes() == before[0].tobytes() and arguments["out_sin"].tobytes() == before[1].tobytes()


@pytest.mark.parametrize("backend", FAST or [pytest.param("none", marks=pytest.mark.skip("no compiled backend"))])
def test_sixteen_threads_at_once_get_the_serial_bits(backend):
    from fastpe import _backends

    module = _backends.load(backend)
    jobs = [_grid_case(sizes=(1 + k % 3, 30 + k, 41), seed=k) for k in range(16)]
    wants = [_expected(t, i, p, *c.shape, np.uint32) for t, i, p, c, _ in jobs]

    def right(k):
        table, index, pieces, cos, sin = jobs[k]
        c, s = np.empty_like(cos), np.empty_like(sin)
        module.axial_gather(table=table, index=index, pieces=pieces, out_cos=c, out_sin=s)
        return c.tobytes() == wants[k][0].tobytes() and s.tobytes() == wants[k][1].tobytes()

    assert failures_at_once(range(16), right) == []


#: the parent fills three frames of FLUX's caches (12288 tokens: above both backends'
#: AXIAL_PARALLEL_FROM, the parallel path), forks, and the child fills them again
FORK_SCRIPT = r"""
import os, sys
import numpy as np
from fastpe import rope

BACKEND = sys.argv[1]
coords = rope.index_grid((3, 64, 64))

def caches():
    cos, sin = rope.axial_cos_sin(coords, (16, 56, 56), backend=BACKEND)
    return cos.tobytes() + sin.tobytes()

parent = caches()
pid = os.fork()
if pid == 0:
    os._exit(0 if caches() == parent else 3)
_, status = os.waitpid(pid, 0)
print("fork-ok" if os.waitstatus_to_exitcode(status) == 0 else f"child-status {status}")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("backend", FAST or [pytest.param("none", marks=pytest.mark.skip("no compiled backend"))])
def test_a_forked_child_gets_the_parents_bits(backend, tmp_path):
    from conftest import fastpe_env

    from fastpe import _backends

    assert 3 * 64 * 64 * 128 * 2 >= _backends.load(backend).AXIAL_PARALLEL_FROM  # the parallel path

    script = tmp_path / "fork_axial.py"
    script.write_text(FORK_SCRIPT)
    try:
        proc = subprocess.run([sys.executable, str(script), backend], capture_output=True, text=True,
                              timeout=240, env=fastpe_env(), cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"fork case hung: {exc}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fork-ok" in proc.stdout, proc.stdout + proc.stderr
