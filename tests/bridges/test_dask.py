"""fastpe.dask: lazy tables whose blocks are bit-identical to fastpe.table."""

from __future__ import annotations

import importlib
import inspect
import pickle
import re
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
import dask  # noqa: E402

import fastpe  # noqa: E402
import fastpe.dask as fd  # noqa: E402
from fastpe import sinusoid as _api  # noqa: E402

from conftest import FAST, fastpe_env  # noqa: E402

#: the big-block tests are about graphs and laziness, not values: a compiled backend
#: computes their blocks (the reference would take a minute for one 4096 x 1024 block)
QUICK = FAST[0] if FAST else "python"

#: irregular row and column blocks, none a multiple of 64
IRREGULAR = ((1, 63, 70, 29), (5, 30, 15))


def _blocks_equal(x, expected: np.ndarray) -> None:
    """Every block of ``x`` computed on its own equals that slice of ``expected``, bit for bit."""
    row0 = 0
    for i, rows in enumerate(x.chunks[0]):
        col0 = 0
        for j, cols in enumerate(x.chunks[1]):
            block = x.blocks[i, j].compute(scheduler="sync")
            assert block.dtype == expected.dtype and block.shape == (rows, cols)
            want = expected[row0 : row0 + rows, col0 : col0 + cols]
            assert block.tobytes() == want.tobytes(), (i, j)
            col0 += cols
        row0 += rows


@pytest.mark.any_backend
def test_irregular_blocks_match_table(backend):
    x = fd.table(50, 163, chunks=IRREGULAR, base=500.0, backend=backend)
    assert isinstance(x, da.Array)
    assert x.shape == (163, 50) and x.dtype == np.float32 and x.chunks == IRREGULAR
    expected = fastpe.table(50, 163, base=500.0, backend=backend)
    _blocks_equal(x, expected)
    assert x.compute(scheduler="sync").tobytes() == expected.tobytes()


@pytest.mark.any_backend
@pytest.mark.parametrize("chunks", [50, (50, -1), ((200, 113), (33, 31)), {0: 129, 1: -1}, {-2: 129}, ("auto", 17)])
def test_chunk_forms(fast_backend, chunks):
    x = fd.table(64, 313, chunks=chunks, backend=fast_backend)
    expected = fastpe.table(64, 313, backend=fast_backend)
    assert x.compute(scheduler="sync").tobytes() == expected.tobytes()
    _blocks_equal(x, expected)


@pytest.mark.any_backend
def test_odd_d_model_and_far_positions(fast_backend):
    # the last rows of a 2**32-row table: the largest positions there are
    x = fd.table(33, 2**32, chunks=((2**32 - 1000, 1000), -1), backend=fast_backend)
    part = x[-150:].compute()
    positions = np.arange(2**32 - 150, 2**32, dtype=np.uint32)
    want = fastpe.forward(positions, fastpe.PosEncConfig(33), np.empty((150, 33), np.float32), backend=fast_backend)
    assert part.tobytes() == want.tobytes()


def test_auto_rows_are_multiples_of_64():
    with dask.config.set({"array.chunk-size": "64KiB"}):
        x = fd.table(100, 1000)
    rows, cols = x.chunks
    assert cols == (100,)  # whole rows
    assert len(rows) > 1 and all(r % 64 == 0 for r in rows[:-1])
    assert rows[0] == (64 * 1024 // 400) // 64 * 64  # 163 rows fit in 64 KiB -> 128
    assert x.compute().tobytes() == fastpe.table(100, 1000).tobytes()


@pytest.mark.any_backend
def test_auto_rows_never_below_64_and_short_tables_are_one_block():
    with dask.config.set({"array.chunk-size": "1KiB"}):
        assert fd.table(4096, 1000).chunks[0][:2] == (64, 64)
    assert fd.table(8, 10).chunks == ((10,), (8,))


def test_threads_scheduler():
    x = fd.table(96, 700, chunks=(100, 40))
    got = x.compute(scheduler="threads", num_workers=2)
    assert got.tobytes() == fastpe.table(96, 700).tobytes()


@pytest.mark.slow
def test_processes_scheduler():
    # fresh worker processes import fastpe and compute their blocks there
    x = fd.table(16, 200, chunks=(70, 16))
    got = x.compute(scheduler="processes", num_workers=2)
    assert got.tobytes() == fastpe.table(16, 200).tobytes()


@pytest.mark.any_backend
def test_tasks_pickle_and_are_small():
    x = fd.table(1024, 2**24, chunks=(4096, -1), base=12345.0, backend=QUICK)
    (one,) = dask.optimize(x.blocks[1000, 0])
    graph = dict(one.__dask_graph__())
    blob = pickle.dumps(graph)
    assert len(blob) < 10_000
    # and the unpickled task computes the block (what a process or distributed worker does)
    restored = pickle.loads(blob)
    got = dask.get(restored, (one.name, 0, 0))
    positions = np.arange(1000 * 4096, 1001 * 4096, dtype=np.uint32)
    want = fastpe.forward(positions, fastpe.PosEncConfig(1024, base=12345.0), np.empty((4096, 1024), np.float32),
                          backend=QUICK)
    assert got.tobytes() == want.tobytes()


def test_store_into_memmap(tmp_path):
    x = fd.table(48, 500, chunks=((130, 370), (20, 28)))
    target = np.lib.format.open_memmap(tmp_path / "pe.npy", mode="w+", dtype=np.float32, shape=x.shape)
    da.store(x, target, scheduler="threads")
    target.flush()
    del target
    assert np.load(tmp_path / "pe.npy").tobytes() == fastpe.table(48, 500).tobytes()


def test_store_into_numpy():
    x = fd.table(10, 99, chunks=(31, 4))
    target = np.full(x.shape, np.nan, dtype=np.float32)
    x.store(target)
    assert target.tobytes() == fastpe.table(10, 99).tobytes()


def test_to_zarr_round_trip(tmp_path):
    pytest.importorskip("zarr")
    x = fd.table(40, 300, chunks=(128, -1), base=777.0)
    path = str(tmp_path / "pe.zarr")
    x.to_zarr(path)
    back = da.from_zarr(path).compute()
    assert back.dtype == np.float32
    assert back.tobytes() == fastpe.table(40, 300, base=777.0).tobytes()


@pytest.mark.any_backend
def test_building_a_huge_table_is_lazy(monkeypatch):
    calls = []
    real = fastpe.sinusoid.fill_run

    def counting(module, config, start, step, row, out):
        calls.append((row, out.shape))
        real(module, config, start, step, row, out)

    monkeypatch.setattr(fastpe.sinusoid, "fill_run", counting)
    tracemalloc.start()
    try:
        x = fd.table(1024, 2**31)  # 8 TiB of float32
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert calls == []
    assert peak < 16 * 2**20
    assert x.shape == (2**31, 1024) and x.nbytes == 2**43
    assert all(r % 64 == 0 for r in x.chunks[0])

    y = fd.table(1024, 2**31, chunks=((2**31 - 1024, 1024), -1), backend=QUICK)
    part = y[2**31 - 3 :, :7].compute(scheduler="sync")
    assert calls == [(2**31 - 1024, (1024, 1024))]  # one block computed, nothing else
    positions = np.arange(2**31 - 3, 2**31, dtype=np.uint32)
    want = fastpe.forward(positions, fastpe.PosEncConfig(1024), np.empty((3, 1024), np.float32), backend=QUICK)[:, :7]
    assert part.tobytes() == want.tobytes()


@pytest.mark.any_backend
@pytest.mark.parametrize("start, step", [(162, -1), (81, -1), (-5, 3), (7, 1), (-80, 1), (2**32 - 163 * 7, 7)],
                         ids=["backward-to-0", "through-0", "signed-step-3", "forward-from-7", "negative-start",
                              "stride-to-the-top"])
def test_runs_of_positions_match_table(backend, start, step):
    """``start``/``step`` runs (Transformer-XL's and Conformer's backwards ones included):
    every block, cut anywhere (blocks inside the signed path's 2**16-row position blocks
    too), is that slice of ``fastpe.table`` with the same run, bit for bit."""
    x = fd.table(50, 163, chunks=IRREGULAR, layout="halves", start=start, step=step, backend=backend)
    expected = fastpe.table(50, 163, layout="halves", start=start, step=step, backend=backend)
    _blocks_equal(x, expected)
    assert x.compute(scheduler="sync").tobytes() == expected.tobytes()
    # and each row is the row forward gives its position
    rows = x[[0, 64, 162]].compute(scheduler="sync")
    positions = np.array([start, start + 64 * step, start + 162 * step], dtype=np.int64)
    if positions.min() >= 0:
        want = fastpe.forward(positions.astype(np.uint32), fastpe.PosEncConfig(50, 163, layout="halves"),
                              np.empty((3, 50), np.float32), backend=backend)
        assert rows.tobytes() == want.tobytes()


@pytest.mark.any_backend
def test_a_run_cut_across_position_blocks_keeps_its_bits(fast_backend, monkeypatch):
    """With 16-row position blocks, dask blocks of 37 rows start mid-block: the same bits."""
    monkeypatch.setattr(_api, "_TABLE_BLOCK", 16)
    x = fd.table(24, 200, chunks=(37, -1), start=99, step=-1, backend=fast_backend)
    monkeypatch.setattr(_api, "_TABLE_BLOCK", 1 << 16)
    expected = fastpe.table(24, 200, start=99, step=-1, backend=fast_backend)
    _blocks_equal(x, expected)


@pytest.mark.any_backend
def test_same_arguments_same_name_different_arguments_different_name():
    assert fd.table(8, 100).name == fd.table(8, 100).name
    assert fd.table(8, 100).name != fd.table(8, 100, base=2.0).name
    assert fd.table(8, 100).name != fd.table(8, 100, chunks=(10, -1)).name
    assert fd.table(8, 100).name != fd.table(8, 100, start=1).name
    assert fd.table(8, 100, start=99, step=-1).name != fd.table(8, 100, start=99, step=-2).name


def _table_takes_dtype() -> bool:
    return "dtype" in inspect.signature(fastpe.table).parameters


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_other_dtypes(dtype):
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    if getattr(_api, "table_rows", None) is None:
        with pytest.raises(TypeError, match="dtype"):
            fd.table(8, 100, dtype=dtype)
        return
    if not _table_takes_dtype():
        pytest.skip("fastpe.table does not take dtype in this fastpe")
    x = fd.table(70, 300, chunks=((100, 200), (33, 37)), dtype=dtype)
    expected = fastpe.table(70, 300, dtype=dtype)
    assert x.dtype == expected.dtype
    _blocks_equal(x, expected)


@pytest.mark.any_backend
def test_extra_config_fields_reach_posencconfig():
    with pytest.raises(TypeError, match="no_such_field"):
        fd.table(8, 100, no_such_field=1)


def test_config_fields_pass_through():
    fields = {"layout": "halves", "denominator": "half-1", "min_timescale": 2.0, "max_timescale": 5000.0}
    if not set(fields) <= set(inspect.signature(fastpe.PosEncConfig).parameters):
        pytest.skip("this fastpe's PosEncConfig lacks the table families' fields")
    x = fd.table(41, 150, chunks=((50, 100), (7, 34)), **fields)
    expected = fastpe.table(41, 150, **fields)
    _blocks_equal(x, expected)
    with pytest.raises(ValueError, match="layout"):
        fd.table(8, 100, layout="sideways")


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"d_model": 0}, ValueError, "d_model"),
        ({"d_model": 8.0}, TypeError, "d_model"),
        ({"max_len": 0}, ValueError, "max_len"),
        ({"max_len": 2**32 + 1}, ValueError, "max_len"),
        ({"base": 1.0}, ValueError, "base"),
        ({"chunks": 0}, ValueError, "chunks"),
        ({"chunks": -5}, ValueError, "chunks"),
        ({"chunks": None}, TypeError, "chunks"),
        ({"chunks": True}, TypeError, "chunks"),
        ({"chunks": ((50, 40), (8,))}, ValueError, "chunks"),
        ({"chunks": (10, 10, 10)}, ValueError, "chunks"),
        ({"chunks": "lots"}, ValueError, "chunks"),
        # (a zero size in a pair or a dict was dask's ZeroDivisionError)
        ({"chunks": (0, -1)}, ValueError, r"chunks must be positive \(or -1 for a whole dimension\), got \(0, -1\)"),
        ({"chunks": (10, 0)}, ValueError, "chunks must be positive"),
        ({"chunks": {0: 0}}, ValueError, "chunks must be positive"),
        ({"chunks": (float("nan"), -1)}, ValueError, "chunks must be positive"),
        ({"chunks": float("inf")}, ValueError, "chunks must be positive"),
        ({"chunks": (True, -1)}, TypeError, "not booleans"),
        ({"chunks": {5: 3}}, ValueError, r"keys must be the axes 0 and 1 \(or -2 and -1\), got 5"),
        ({"chunks": {0: 30, -2: 3}}, ValueError, "names axis 0 twice"),
        ({"chunks": (float("nan"), (8,))}, ValueError, "chunks must be positive"),
        ({"dtype": "int8"}, TypeError, "dtype"),
        ({"backend": "fortran"}, ValueError, "backend"),
        ({"step": 0}, ValueError, "step must be a non-zero integer, got 0"),
        ({"step": 1.0}, TypeError, "step"),
        ({"start": "3"}, TypeError, "start"),
        ({"start": -2**32}, ValueError, r"start must be in \(-2\*\*32, 2\*\*32\)"),
        ({"start": 2**32 - 50}, ValueError, r"the last position, start \+ \(max_len - 1\) \* step"),
        ({"start": -2**32 + 50, "step": -1}, ValueError, "the last position"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    args = {"d_model": 8, "max_len": 100, **kwargs}
    with pytest.raises(error, match=match):
        fd.table(args.pop("d_model"), args.pop("max_len"), **args)


def test_forward_over_dask_positions(fast_backend):
    positions = np.array([0, 1, 63, 64, 65, 10**6, 2**31, 2**32 - 1, 5, 7], dtype=np.uint32)
    config = fastpe.PosEncConfig(24, base=321.0)
    x = fd.forward(da.from_array(positions, chunks=3), config, backend=fast_backend)
    assert x.shape == (10, 24) and x.chunks == ((3, 3, 3, 1), (24,))
    want = fastpe.forward(positions, config, np.empty((10, 24), np.float32), backend=fast_backend)
    assert x.compute().tobytes() == want.tobytes()
    # a plain array is wrapped as one block
    assert fd.forward(positions, config).compute().tobytes() == fastpe.forward(
        positions, config, np.empty((10, 24), np.float32)).tobytes()


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_forward_other_dtypes(dtype):
    positions = np.array([3, 64, 2**32 - 1, 12345], dtype=np.uint32)
    config = fastpe.PosEncConfig(10)
    out = np.empty((4, 10), dtype=dtype)
    try:
        want = fastpe.forward(positions, config, out)
    except TypeError:
        pytest.skip(f"fastpe.forward does not write {dtype} in this fastpe")
    x = fd.forward(da.from_array(positions, chunks=3), config, dtype=dtype)
    assert x.dtype == np.dtype(dtype)
    assert x.compute().tobytes() == want.tobytes()


@pytest.mark.any_backend
def test_forward_bad_input():
    config = fastpe.PosEncConfig(4)
    with pytest.raises(TypeError, match="config"):
        fd.forward(da.arange(5), {"d_model": 4})
    with pytest.raises(ValueError, match="1-D"):
        fd.forward(da.zeros((2, 2), dtype=np.int64), config)
    with pytest.raises(TypeError, match="integers"):
        fd.forward(da.from_array(np.array(["a", "b"])), config)
    with pytest.raises(TypeError, match="dtype"):
        fd.forward(da.arange(5), config, dtype="int32")
    # values are checked where the block is computed
    with pytest.raises(ValueError, match=r"positions must be > -2\*\*32"):
        fd.forward(da.from_array(np.array([1, -(2**32)])), config).compute()


@pytest.mark.any_backend
def test_without_dask_the_error_names_the_install(monkeypatch):
    for name in ("dask", "dask.array", "fastpe.dask"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setitem(sys.modules, "dask", None)
    with pytest.raises(ImportError, match=r"pip install 'fastpe\[dask\]'"):
        importlib.import_module("fastpe.dask")


@pytest.mark.any_backend
def test_import_fastpe_does_not_import_dask(tmp_path):
    code = "import sys, fastpe; print(sorted(m for m in sys.modules if m.split('.')[0] == 'dask'))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=fastpe_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# --------------------------------------------------------------------------- bounded graphs


@pytest.mark.any_backend
@pytest.mark.parametrize("chunks", [(37, -1), [37, -1], 37, {0: 37}, {0: 37, 1: -1}, (37.0, -1)])
def test_too_many_blocks_are_refused_before_any_is_built(monkeypatch, chunks):
    """2**32 rows in blocks of 37: 116 million blocks took a minute and 7.4 GiB to build."""

    def never(*args, **kwargs):  # pragma: no cover - reached only if the count came too late
        raise AssertionError("dask built the blocks")

    monkeypatch.setattr(fd, "normalize_chunks", never)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"make 116080198 blocks of the shape \(4294967296, 8\); fastpe.dask "
                                             r"takes at most 1048576 .* e\.g\. chunks=\(4096, -1\)"):
            fd.table(8, 2**32, chunks=chunks)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


@pytest.mark.any_backend
@pytest.mark.parametrize(("d_model", "max_len", "chunks", "fits"), [
    (128, 130, (10, -1), {"max_len": 120}),                   # counted from the spec: 13 row blocks
    (128, 130, ((10,) * 13, -1), {"chunks": ((10,) * 12, -1), "max_len": 120}),  # explicit sizes
    (130, 64, (64, 10), {"d_model": 120}),                     # 13 column blocks of one row block
    (128, 13 * 64, "auto", {"max_len": 12 * 64}),              # dask's choice, aligned to 64 rows
])
def test_the_block_limit_counts_every_chunk_form(monkeypatch, d_model, max_len, chunks, fits):
    monkeypatch.setattr(fd, "MAX_BLOCKS", 12)
    with dask.config.set({"array.chunk-size": "1KiB"}):  # 2 rows of 128 float32, aligned up to 64
        with pytest.raises(ValueError, match="make 13 blocks"):
            fd.table(d_model, max_len, chunks=chunks)
        args = {"d_model": d_model, "max_len": max_len, "chunks": chunks, **fits}
        x = fd.table(args.pop("d_model"), args.pop("max_len"), **args)
    assert len(x.chunks[0]) * len(x.chunks[1]) == 12  # exactly at the limit is fine


def test_the_suggested_chunks_fit_and_compute_the_table(monkeypatch):
    monkeypatch.setattr(fd, "MAX_BLOCKS", 12)
    with pytest.raises(ValueError) as info:
        fd.table(16, 1000, chunks=(10, 4))
    suggested = eval(re.search(r"chunks=(\(\d+, -1\))", str(info.value))[1])
    assert suggested == (128, -1)  # ceil(1000 / 12) = 84 rows, rounded up to whole anchor runs
    x = fd.table(16, 1000, chunks=suggested)
    assert len(x.chunks[0]) <= 12
    assert x.compute().tobytes() == fastpe.table(16, 1000).tobytes()


@pytest.mark.any_backend
def test_a_long_explicit_chunks_tuple_is_shortened_in_messages():
    with pytest.raises(ValueError, match=r"^chunks \(\(1, 1, 1, 1, \.\.\.\), -1\) do not fit") as info:
        fd.table(8, 100, chunks=((1,) * 99, -1))
    assert len(str(info.value)) < 400


@pytest.mark.any_backend
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_byte_swapped_dtypes_are_refused_when_the_array_is_made(dtype):
    swapped = np.dtype(dtype).newbyteorder()  # the non-native order, whatever this machine's is
    with pytest.raises(TypeError, match="native byte order"):
        fd.table(8, 100, dtype=swapped)
    with pytest.raises(TypeError, match="native byte order"):
        fd.forward(np.arange(3), fastpe.PosEncConfig(8), dtype=swapped)


@pytest.mark.any_backend
def test_a_dict_may_name_the_axes_from_the_end():
    assert fd.table(8, 300, chunks={-2: 129}).chunks == ((129, 129, 42), (8,))
    assert fd.table(8, 300, chunks={-1: 3, 0: 100}).chunks == ((100, 100, 100), (3, 3, 2))
