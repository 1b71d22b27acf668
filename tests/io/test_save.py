"""fastpe.save_table and its spec records (fastpe._io.save).

Tables stay tiny (the ``python`` backend is the reference and slow) and the chunk budget is a
few hundred bytes, so every write runs through many chunks, with a ragged last one and chunk
boundaries that are not multiples of 64 rows.  Every file is read back with the format's own
reader (numpy, zipfile through numpy, safetensors' ``safe_open``) and compared with
``fastpe.table`` bit for bit.
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tracemalloc
import zipfile

import numpy as np
import pytest

import fastpe
from fastpe import _dtypes
from fastpe._io import save as _save
from fastpe._dtypes import DTYPES
from conftest import FAST, fastpe_env, signals_at_default
from support.cli import listing, read_table, same_bits

D, L = 10, 203
#: rows per chunk in most tests: 203 = 8 * 23 + 19, so 9 chunks, the last one ragged
ROWS = 23
FORMATS = _save.FORMATS
CONFIGS = {
    "spec": {},
    "fairseq": {"layout": "halves", "denominator": "half-1", "base": 500.5},
    "t2t": {"denominator": "half-1", "min_timescale": 0.5, "max_timescale": 2000.0},
}


def budget(rows: int, d_model: int = D, dtype="float32") -> int:
    """A chunk budget that holds exactly ``rows`` rows."""
    return _save._chunk_bytes(rows, d_model, _dtypes.resolve(dtype))


def expected_files(name: str) -> list[str]:
    return sorted([name, name + ".json"] if name.endswith(".npy") else [name])


# ======================================================================== round trips


@pytest.mark.any_backend
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_and_dtype_round_trips_bit_identical(tmp_path, backend, fmt, dtype):
    path = tmp_path / f"pe{fmt}"
    calls = []
    saved = fastpe.save_table(path, D, L, dtype=dtype, chunk_bytes=budget(ROWS, D, dtype), backend=backend,
                              progress=lambda done, total: calls.append((done, total)))
    expected = fastpe.table(D, L, dtype=dtype, backend=backend)
    assert same_bits(read_table(path, dtype), expected)
    assert calls == [(min(r + ROWS, L), L) for r in range(0, L, ROWS)]  # 9 chunks, the last of 19 rows
    assert listing(tmp_path) == expected_files(path.name)
    assert (saved.path, saved.shape, saved.dtype, saved.backend) == (str(path), (L, D), dtype, backend)
    assert saved.nbytes == expected.nbytes
    assert saved.sidecar == (str(path) + ".json" if fmt == ".npy" else None)


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("fmt", FORMATS)
def test_other_conventions_round_trip(tmp_path, fmt, name):
    kwargs = CONFIGS[name]
    path = tmp_path / f"pe{fmt}"
    fastpe.save_table(path, 11, 97, chunk_bytes=budget(13, 11), **kwargs)
    assert same_bits(read_table(path), fastpe.table(11, 97, **kwargs))
    assert _save.load_spec(path)["params"] == {**_spec_params(11, 97), **kwargs}


def _spec_params(d_model, max_len, **kwargs):
    return {"d_model": d_model, "max_len": max_len, "base": 10000.0, "layout": "interleaved", "denominator": "d",
            "min_timescale": 1.0, "max_timescale": None, "dtype": "float32", **kwargs}


def test_npy_bytes_are_those_of_numpy_save(tmp_path):
    fastpe.save_table(tmp_path / "pe.npy", D, L, chunk_bytes=budget(ROWS))
    buf = io.BytesIO()
    np.save(buf, fastpe.table(D, L))
    assert (tmp_path / "pe.npy").read_bytes() == buf.getvalue()


@pytest.mark.parametrize("rows", [1, 2, 63, 64, 65, L - 1, L, L + 100])
def test_chunk_sizes_from_one_row_to_the_whole_table(tmp_path, rows):
    calls = []
    fastpe.save_table(tmp_path / "pe.npy", D, L, chunk_bytes=budget(rows), progress=lambda d, t: calls.append(d))
    assert same_bits(np.load(tmp_path / "pe.npy"), fastpe.table(D, L))
    assert calls == [min(r + rows, L) for r in range(0, L, rows)]


# ======================================================================== the spec


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_records_the_spec(tmp_path, fmt):
    path = tmp_path / f"pe{fmt}"
    saved = fastpe.save_table(path, D, L, base=500.5, layout="halves", dtype="float16",
                              chunk_bytes=budget(ROWS, D, "float16"))
    expected = {"fastpe": fastpe.__version__, "function": "table",
                "params": _spec_params(D, L, base=500.5, layout="halves", dtype="float16")}
    assert saved.spec == expected
    if fmt == ".npy":
        recorded = json.loads((tmp_path / "pe.npy.json").read_text())
    elif fmt == ".npz":
        with np.load(path) as archive:
            recorded = json.loads(str(archive["spec"]))
    else:
        from safetensors import safe_open

        with safe_open(str(path), framework="numpy") as f:
            recorded = json.loads(f.metadata()["spec"])
    assert recorded == expected
    assert _save.load_spec(path) == expected
    if fmt == ".npy":
        assert _save.load_spec(tmp_path / "pe.npy.json") == expected


def test_spec_params_are_every_config_field_and_dtype(tmp_path):
    import dataclasses

    fastpe.save_table(tmp_path / "pe.npz", 4, 3)
    params = _save.load_spec(tmp_path / "pe.npz")["params"]
    assert list(params) == [f.name for f in dataclasses.fields(fastpe.PosEncConfig)] + ["dtype"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_rerunning_a_spec_reproduces_the_same_bytes(tmp_path, fmt):
    first, second = tmp_path / f"a{fmt}", tmp_path / f"b{fmt}"
    fastpe.save_table(first, D, L, denominator="half-1", dtype="bfloat16", chunk_bytes=budget(ROWS, D, "bfloat16"))
    params = _save.load_spec(first)["params"]
    fastpe.save_table(second, **params, chunk_bytes=budget(7, D, "bfloat16"))  # other chunks, same bytes
    assert first.read_bytes() == second.read_bytes()
    if fmt == ".npy":
        assert (tmp_path / "a.npy.json").read_bytes() == (tmp_path / "b.npy.json").read_bytes()


def test_safetensors_header_is_the_formats(tmp_path):
    path = tmp_path / "pe.safetensors"
    fastpe.save_table(path, D, L, dtype="bfloat16", chunk_bytes=budget(ROWS, D, "bfloat16"))
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert (8 + n) % 8 == 0 and len(raw) == 8 + n + L * D * 2
    header = json.loads(raw[8:8 + n])
    assert header["table"] == {"dtype": "BF16", "shape": [L, D], "data_offsets": [0, L * D * 2]}
    assert json.loads(header["__metadata__"]["spec"])["params"]["dtype"] == "bfloat16"
    assert raw[8 + n:] == fastpe.table(D, L, dtype="bfloat16").view("<u2").tobytes()  # little-endian


@pytest.mark.parametrize("fmt", FORMATS)
def test_output_size_is_exact(tmp_path, fmt):
    path = tmp_path / f"pe{fmt}"
    fastpe.save_table(path, D, L, dtype="float64", chunk_bytes=budget(ROWS, D, "float64"))
    written = sum(os.path.getsize(tmp_path / name) for name in os.listdir(tmp_path))
    assert written == _save.output_size(path, D, L, dtype="float64")


def test_zip_size_is_exact_past_the_zip64_limits(tmp_path, monkeypatch):
    """The ZIP64 records appear only past 2 GiB; lowering zipfile's limit (which it reads at
    run time) makes a small archive take those branches, and the prediction must follow."""
    for limit in (5000, 3000, 600):
        monkeypatch.setattr(zipfile, "ZIP64_LIMIT", limit)
        path = tmp_path / f"pe{limit}.npz"
        fastpe.save_table(path, D, L, chunk_bytes=budget(ROWS))
        assert os.path.getsize(path) == _save.output_size(path, D, L)
        monkeypatch.undo()
        assert same_bits(read_table(path), fastpe.table(D, L))


# ======================================================================== memory


@pytest.mark.any_backend
@pytest.mark.skipif(not FAST, reason="the python reference allocates per value; the budget is a compiled-backend figure")
@pytest.mark.parametrize("dtype, chunk", [("float32", 256 << 10), ("float64", 256 << 10), ("float16", 2 << 20),
                                          ("bfloat16", 2 << 20)])
def test_memory_stays_within_the_chunk_budget(tmp_path, fast_backend, dtype, chunk):
    """tracemalloc sees numpy's buffers: the peak while writing a table several times the
    budget stays within the budget plus the backend's own fixed workspace."""
    d_model, max_len = 256, 20_000 if dtype in ("float32", "float64") else 6_000
    # caches, imports and the kernels this size runs (numba compiles its parallel twin on first
    # use, which a small warm-up does not reach: a cold cache would count the compiler's memory)
    fastpe.save_table(tmp_path / "warm.npz", d_model, max_len, dtype=dtype, chunk_bytes=chunk, backend=fast_backend)
    assert _save._chunk_bytes(max_len, d_model, _dtypes.resolve(dtype)) > 4 * chunk  # what one chunk would hold
    tracemalloc.start()
    try:
        fastpe.save_table(tmp_path / "pe.npz", d_model, max_len, dtype=dtype, chunk_bytes=chunk, backend=fast_backend)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    workspace = 1 << 20  # cython's per-thread blocks, zipfile, json: fixed, not per row
    assert peak <= chunk + workspace, (peak, chunk)


@pytest.mark.any_backend
def test_rows_per_chunk_is_the_most_that_fit():
    for dtype in map(_dtypes.resolve, DTYPES):
        for d_model in (1, 10, 4096):
            for chunk in (10_000, 1 << 20, 64 << 20, 256 << 20):
                if _save._chunk_bytes(1, d_model, dtype) > chunk:
                    with pytest.raises(ValueError, match="chunk_bytes must hold at least one row"):
                        _save._rows_per_chunk(d_model, dtype, chunk)
                    continue
                rows = _save._rows_per_chunk(d_model, dtype, chunk)
                assert _save._chunk_bytes(rows, d_model, dtype) <= chunk < _save._chunk_bytes(rows + 1, d_model, dtype)


# ======================================================================== failures


@pytest.fixture
def precious(tmp_path):
    """Make files at the target (and its sidecar) that a failed write must leave alone."""

    def make(name):
        (tmp_path / name).write_bytes(b"precious")
        if name.endswith(".npy"):
            (tmp_path / (name + ".json")).write_bytes(b"old spec")
        return tmp_path

    return make


def assert_untouched(tmp_path, name, existing):
    if not existing:
        assert listing(tmp_path) == []
        return
    assert listing(tmp_path) == expected_files(name)
    assert (tmp_path / name).read_bytes() == b"precious"
    if name.endswith(".npy"):
        assert (tmp_path / (name + ".json")).read_bytes() == b"old spec"


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_interrupt_mid_way_leaves_nothing(tmp_path, precious, fmt, existing):
    name = f"pe{fmt}"
    if existing:
        precious(name)

    def progress(done, total):
        assert len(os.listdir(tmp_path)) == len(expected_files(name)) * existing + 1  # one temporary file
        if done >= 3 * ROWS:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fastpe.save_table(tmp_path / name, D, L, chunk_bytes=budget(ROWS), progress=progress)
    assert_untouched(tmp_path, name, existing)


class FailingFile:
    """A file whose writes fail with ENOSPC once ``limit`` bytes have been written."""

    def __init__(self, f, limit):
        self._f, self._left = f, limit

    def write(self, data):
        n = memoryview(data).nbytes
        if n > self._left:
            self._f.write(bytes(memoryview(data).cast("B")[: self._left]))
            raise OSError(errno.ENOSPC, "No space left on device")
        self._left -= n
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_failing_write_leaves_nothing(tmp_path, monkeypatch, precious, fmt, existing):
    name = f"pe{fmt}"
    if existing:
        precious(name)
    write = _save.WRITERS[fmt].write_data
    monkeypatch.setattr(_save.WRITERS[fmt], "write_data",
                        lambda f, layout, blocks: write(FailingFile(f, 1000), layout, blocks))
    with pytest.raises(OSError, match="No space left on device"):
        fastpe.save_table(tmp_path / name, D, L, chunk_bytes=budget(ROWS))
    assert_untouched(tmp_path, name, existing)


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
def test_the_sidecar_is_taken_back_when_the_data_cannot_follow_it(tmp_path, monkeypatch, precious, existing):
    """The sidecar is renamed into place first; if the data's rename then fails, the old
    sidecar comes back (or the new one goes) and no temporary file remains."""
    if existing:
        precious("pe.npy")
    target = str(tmp_path / "pe.npy")
    replace = os.replace

    def failing_replace(src, dst):
        if os.fspath(dst) == target:
            assert os.path.exists(target + ".json")  # the sidecar is already in place
            raise OSError(errno.EIO, "simulated rename failure")
        return replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="simulated rename failure"):
        fastpe.save_table(target, D, L, chunk_bytes=budget(ROWS))
    assert_untouched(tmp_path, "pe.npy", existing)


@pytest.mark.parametrize("fmt", FORMATS)
def test_too_little_disk_space_fails_before_creating_anything(tmp_path, monkeypatch, fmt):
    path = tmp_path / f"pe{fmt}"
    needed = _save.output_size(path, D, L)
    real = shutil.disk_usage

    def usage(free):
        return lambda p: real(p)._replace(free=free)

    monkeypatch.setattr(shutil, "disk_usage", usage(needed - 1))
    with pytest.raises(OSError, match=rf"not enough free space in .*: pe{fmt} needs {needed} bytes") as info:
        fastpe.save_table(path, D, L)
    assert info.value.errno == errno.ENOSPC
    assert listing(tmp_path) == []
    monkeypatch.setattr(shutil, "disk_usage", usage(needed))  # exactly enough is enough
    fastpe.save_table(path, D, L)
    assert listing(tmp_path) == expected_files(path.name)


BAD_ARGS = [
    pytest.param({"path": "pe.txt"}, ValueError, "path must end in .npy, .npz or .safetensors", id="extension"),
    pytest.param({"path": "pe"}, ValueError, "path must end in", id="no-extension"),
    pytest.param({"path": ".npy"}, ValueError, r"path has no file name before .npy, got '.npy'", id="only-extension"),
    pytest.param({"path": ""}, ValueError, "path is empty", id="empty-path"),
    pytest.param({"path": 3}, TypeError, "path must be a str", id="path-type"),
    pytest.param({"d_model": 0}, ValueError, "d_model must be >= 1", id="d-model"),
    pytest.param({"max_len": 0}, ValueError, "max_len must be >= 1", id="max-len"),
    pytest.param({"base": 1.0}, ValueError, "base must be greater than 1", id="base"),
    pytest.param({"layout": "neox"}, ValueError, "layout must be one of", id="layout"),
    pytest.param({"denominator": "2i"}, ValueError, "denominator must be one of", id="denominator"),
    pytest.param({"min_timescale": -1.0}, ValueError, "min_timescale must be > 0", id="min-timescale"),
    pytest.param({"max_timescale": 0.5}, ValueError, "must be greater than min_timescale", id="max-timescale"),
    pytest.param({"dtype": "int8"}, TypeError, "dtype must be one of", id="dtype"),
    pytest.param({"chunk_bytes": 0}, ValueError, "chunk_bytes must be >= 1", id="chunk-0"),
    pytest.param({"chunk_bytes": 39}, ValueError, "chunk_bytes must hold at least one row: 40 bytes", id="chunk-small"),
    pytest.param({"chunk_bytes": 1.5e6}, TypeError, "chunk_bytes must be an integer", id="chunk-float"),
    pytest.param({"progress": "yes"}, TypeError, "progress must be a callable", id="progress"),
    pytest.param({"backend": "gpu"}, ValueError, "not a fastpe backend", id="backend"),
    pytest.param({"path": "missing/pe.npy"}, FileNotFoundError, "does not exist", id="no-directory"),
    pytest.param({"path": "adir"}, ValueError, "path must end in", id="directory"),
    pytest.param({"path": "dir.npy"}, IsADirectoryError, "is a directory", id="target-is-directory"),
    pytest.param({"path": "side.npy"}, IsADirectoryError, "side.npy.json' is a directory", id="sidecar-is-directory"),
]


@pytest.mark.any_backend
@pytest.mark.parametrize("kwargs, exc, message", BAD_ARGS)
def test_bad_arguments_fail_before_creating_anything(tmp_path, monkeypatch, kwargs, exc, message):
    monkeypatch.chdir(tmp_path)
    for name in ("adir", "dir.npy", "side.npy.json"):
        os.mkdir(name)
    args = {"path": "pe.npy", "d_model": D, "max_len": L, **kwargs}
    path, d_model, max_len = args.pop("path"), args.pop("d_model"), args.pop("max_len")
    with pytest.raises(exc, match=message):
        fastpe.save_table(path, d_model, max_len, **args)
    assert listing(tmp_path) == ["adir", "dir.npy", "side.npy.json"]
    assert all(listing(tmp_path / name) == [] for name in ("adir", "dir.npy", "side.npy.json"))


@pytest.mark.any_backend
def test_an_unwritable_directory_fails_before_creating_anything(tmp_path, monkeypatch):
    (tmp_path / "ro").mkdir()
    monkeypatch.setattr(os, "access", lambda path, mode, **kwargs: False)  # root may write anywhere
    with pytest.raises(PermissionError, match="is not writable"):
        fastpe.save_table(tmp_path / "ro" / "pe.npz", D, L)
    assert listing(tmp_path / "ro") == []


@pytest.mark.any_backend
def test_safetensors_without_its_package_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors", None)  # import safetensors -> ImportError
    with pytest.raises(ImportError, match="pip install safetensors"):
        fastpe.save_table(tmp_path / "pe.safetensors", D, L)
    assert listing(tmp_path) == []


# ======================================================================== load_spec errors


def write_spec(tmp_path, spec, name="spec.json") -> str:
    path = tmp_path / name
    path.write_text(spec if isinstance(spec, str) else json.dumps(spec))
    return str(path)


def good_spec(**changes):
    spec = {"fastpe": fastpe.__version__, "function": "table", "params": _spec_params(D, L)}
    spec.update(changes)
    return spec


BAD_SPECS = [
    pytest.param("{not json", "is not valid JSON", id="not-json"),
    pytest.param("[1, 2]", "must be a JSON object", id="not-object"),
    pytest.param({"function": "table", "params": {}}, "lacks 'fastpe'", id="no-version"),
    pytest.param(good_spec(extra=1), "unknown keys 'extra'", id="unknown-key"),
    pytest.param(good_spec(fastpe="1.0.0"), "written by fastpe 1.0.0, whose major version differs", id="major"),
    pytest.param(good_spec(fastpe=3), "must be a version string", id="version-type"),
    pytest.param(good_spec(function="rope"), r"names function 'rope' \(no fastpe command writes it\); fastpe table "
                 r"and save_table re-run the specs of tables only \('table'\)", id="function"),
    pytest.param(good_spec(params=[1]), "'params' must be an object", id="params-type"),
    pytest.param(good_spec(params={**_spec_params(D, L), "scale": 2}), "unknown params 'scale'", id="unknown-param"),
    pytest.param(good_spec(params={"d_model": D, "max_len": L}), "params lack 'base', 'layout'", id="missing-params"),
    pytest.param(good_spec(params=_spec_params(D, L, base=0.5)), "params: base must be greater than 1", id="bad-base"),
    pytest.param(good_spec(params=_spec_params(D, L, dtype="int8")), "params: dtype must be one of", id="bad-dtype"),
    pytest.param(good_spec(params=_spec_params("ten", L)), "params: d_model must be an integer", id="bad-d-model"),
]


@pytest.mark.any_backend
@pytest.mark.parametrize("spec, message", BAD_SPECS)
def test_malformed_specs_are_refused_with_the_reason(tmp_path, spec, message):
    path = write_spec(tmp_path, spec)
    with pytest.raises((ValueError, TypeError), match=message) as info:
        _save.load_spec(path)
    assert str(info.value).startswith(path)


@pytest.mark.any_backend
@pytest.mark.parametrize("text", ["[" * 100_000, '{"a":' * 100_000])
def test_a_spec_nested_past_the_recursion_limit_is_a_value_error(text):
    with pytest.raises(ValueError, match="the spec is not a fastpe spec: its JSON nests too deeply to read"):
        _save.parse_spec(text, "the spec")


@pytest.mark.any_backend
def test_a_minor_version_difference_is_accepted(tmp_path):
    major = fastpe.__version__.split(".")[0]
    spec = _save.load_spec(write_spec(tmp_path, good_spec(fastpe=f"{major}.99.7")))
    assert spec["fastpe"] == f"{major}.99.7" and spec["params"] == _spec_params(D, L)


@pytest.mark.any_backend
def test_files_without_a_spec(tmp_path):
    np.save(tmp_path / "plain.npy", np.zeros(3))
    with pytest.raises(FileNotFoundError, match="plain.npy has no spec: its sidecar .*plain.npy.json does not exist"):
        _save.load_spec(tmp_path / "plain.npy")
    np.savez(tmp_path / "plain.npz", table=np.zeros(3))
    with pytest.raises(ValueError, match="holds no 'spec' entry"):
        _save.load_spec(tmp_path / "plain.npz")
    from safetensors.numpy import save_file

    save_file({"table": np.zeros(3, np.float32)}, str(tmp_path / "plain.safetensors"))
    with pytest.raises(ValueError, match="has no 'spec' in its __metadata__"):
        _save.load_spec(tmp_path / "plain.safetensors")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="junk.npz is not a readable .npz file"):
        _save.load_spec(tmp_path / "junk.npz")
    (tmp_path / "junk.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(ValueError, match="junk.safetensors is not a readable .safetensors file"):
        _save.load_spec(tmp_path / "junk.safetensors")
    with pytest.raises(FileNotFoundError):
        _save.load_spec(tmp_path / "absent.json")
    with pytest.raises(FileNotFoundError):
        _save.load_spec(tmp_path / "absent.npz")


# ======================================================================== a spec that no longer describes its file


def _rewrite(path, array, spec_text):
    """``path`` written again by something else with ``array``, its spec left as it was."""
    path = str(path)
    if path.endswith(".npy"):
        np.save(path, array)
    elif path.endswith(".npz"):
        np.savez(path, spec=np.array(spec_text), table=array)
    else:
        from safetensors.numpy import save_file

        save_file({"table": array}, path, metadata={"spec": spec_text})


@pytest.mark.any_backend
def test_the_readmes_memmap_over_a_saved_table_makes_its_sidecar_stale(tmp_path):
    path = tmp_path / "pe.npy"
    fastpe.save_table(path, 64, 32, backend="python")  # the README's save_table("pe.npy", 4096, 2**20), smaller
    target = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(32, 32))  # the dask snippet's
    target[:] = 0
    del target
    with pytest.raises(ValueError) as info:
        _save.load_spec(path)
    assert str(info.value) == (
        f"{path} holds float32 (32, 32), but its sidecar {path}.json describes a float32 (32, 64) table: the spec "
        "is stale (the file was written again after fastpe wrote it)")
    assert _save.load_spec(f"{path}.json")["params"]["d_model"] == 64  # the spec file itself, asked for by name


@pytest.mark.any_backend
@pytest.mark.parametrize("fmt", _save.FORMATS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("change", ["shape", "dtype", "order"])
def test_a_file_written_again_under_its_spec_is_refused(tmp_path, fmt, dtype, change):
    if fmt == ".safetensors" and change == "order":
        pytest.skip("safetensors has no Fortran order")
    path = tmp_path / f"pe{fmt}"
    saved = fastpe.save_table(path, D, 7, dtype=dtype, backend="python")
    assert _save.load_spec(path) == saved.spec  # as written: it describes the file
    stored = "uint16" if dtype == "bfloat16" and fmt != ".safetensors" else dtype
    array = read_table(path, dtype).astype(np.float32)
    array, held = {
        "shape": (array[:5], f"float32 (5, {D})"),
        "dtype": (array.astype(np.float64), f"float64 (7, {D})"),
        "order": (np.asfortranarray(array), f"Fortran-ordered float32 (7, {D})"),
    }[change]
    if change == "shape" and stored == "uint16":  # a file of the stored dtype, of another shape
        array, held = array.astype(np.uint16), f"uint16 (5, {D})"
    if change == "dtype" and stored == "float32":
        array, held = array.astype(np.float16), f"float16 (7, {D})"
    _rewrite(path, array, json.dumps(saved.spec))
    with pytest.raises(ValueError) as info:
        _save.load_spec(path)
    message = str(info.value)
    where = {".npy": f"{path} holds", ".npz": f"the 'table' entry of {path} holds",
             ".safetensors": f"the 'table' entry of {path} holds"}[fmt]
    assert message.startswith(f"{where} {held}, but "), message
    assert f"describes a {stored} (7, {D}) table: the spec is stale" in message, message


@pytest.mark.any_backend
def test_a_spec_whose_file_lost_its_table_is_refused(tmp_path):
    saved = fastpe.save_table(tmp_path / "pe.npz", D, 7, backend="python")
    np.savez(tmp_path / "pe.npz", spec=np.array(json.dumps(saved.spec)), other=np.zeros(3))
    with pytest.raises(ValueError, match=f"pe.npz holds no 'table' entry; its spec describes a float32 \\(7, {D}\\)"):
        _save.load_spec(tmp_path / "pe.npz")
    saved = fastpe.save_table(tmp_path / "pe.npy", D, 7, backend="python")
    (tmp_path / "pe.npy").write_bytes(b"not an array")
    with pytest.raises(ValueError, match="pe.npy has no readable .npy header"):
        _save.load_spec(tmp_path / "pe.npy")


# ======================================================================== memory and signals


def test_a_chunk_larger_than_memory_is_refused_before_creating_anything(tmp_path, monkeypatch):
    row = D * 4
    monkeypatch.setattr(_save, "physical_memory", lambda: 50 * row)
    with pytest.raises(ValueError, match=rf"chunk_bytes must fit in memory: a chunk of 51 rows needs {51 * row} bytes"):
        fastpe.save_table(tmp_path / "pe.npy", D, L, chunk_bytes=51 * row)
    assert listing(tmp_path) == []
    # what is allocated is the chunk, at most the whole table: a large budget for a small one is fine
    fastpe.save_table(tmp_path / "pe.npy", D, 50, chunk_bytes=10**15)
    assert same_bits(read_table(tmp_path / "pe.npy"), fastpe.table(D, 50))


posix_signals = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="SIGTERM and SIGHUP are POSIX signals")


@posix_signals
def test_save_table_holds_the_default_signals_only_while_it_writes(tmp_path):
    saved = {s: signal.signal(s, signal.SIG_DFL) for s in (signal.SIGTERM, signal.SIGHUP)}
    seen = []
    try:
        fastpe.save_table(tmp_path / "pe.npz", D, 30, chunk_bytes=budget(10),
                          progress=lambda done, total: seen.append(signal.getsignal(signal.SIGTERM)))
        after = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    assert len(seen) == 3 and all(callable(h) for h in seen)
    assert after == (signal.SIG_DFL, signal.SIG_DFL)


#: a program using the library: save_table stops in its progress callback until the test
#: has sent the signal (and, for a signal that does not end it, made the file ``go``)
SIGNALLED_SCRIPT = r"""
import os, signal, sys, time
import fastpe

mode, signum = sys.argv[1], getattr(signal, sys.argv[2])
signal.signal(signum, {"default": signal.SIG_DFL, "ignored": signal.SIG_IGN,
                       "own": lambda s, frame: sys.exit(3)}[mode])

def progress(done, total):
    if done == 8:
        print("writing", flush=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join("..", "go")) and time.monotonic() < deadline:
            time.sleep(0.01)

fastpe.save_table(sys.argv[3], 8, 40, chunk_bytes=8 * 8 * 4, backend="python", progress=progress)
print("done", signal.getsignal(signum) == {"default": signal.SIG_DFL, "ignored": signal.SIG_IGN}.get(mode), flush=True)
"""


@pytest.mark.slow
@posix_signals
@pytest.mark.parametrize(("mode", "signame", "target"), [
    ("default", "SIGTERM", "pe.npy"),   # the process ends by the signal, as without fastpe ...
    ("default", "SIGHUP", "pe.npz"),    # ... less the temporary file
    ("own", "SIGTERM", "pe.npy"),       # the program's handler runs (here: exits 3)
    ("ignored", "SIGHUP", "pe.npy"),    # an ignored signal stays ignored: the table is written
])
def test_a_signal_during_save_table_in_a_program(tmp_path, mode, signame, target):
    out = tmp_path / "out"
    out.mkdir()
    (out / "pe.npy").write_bytes(b"precious")
    (out / "pe.npy.json").write_bytes(b"old spec")
    child = subprocess.Popen([sys.executable, "-c", SIGNALLED_SCRIPT, mode, signame, target], cwd=out,
                             env=fastpe_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=signals_at_default)
    try:
        assert child.stdout.readline() == "writing\n", child.stderr.read()
        assert len(listing(out)) == 3  # the two old files and one temporary file
        child.send_signal(getattr(signal, signame))
        (tmp_path / "go").touch()
        rest, err = child.communicate(timeout=60)
    finally:
        child.kill()
        child.wait()
    if mode == "ignored":
        assert (child.returncode, rest) == (0, "done True\n"), err
        assert same_bits(np.load(out / "pe.npy"), fastpe.table(8, 40, backend="python"))
        assert listing(out) == ["pe.npy", "pe.npy.json"]
        return
    assert child.returncode == (-getattr(signal, signame) if mode == "default" else 3), err
    assert rest == "" and "Traceback" not in err, err
    assert listing(out) == ["pe.npy", "pe.npy.json"]
    assert (out / "pe.npy").read_bytes() == b"precious" and (out / "pe.npy.json").read_bytes() == b"old spec"


# ======================================================================== signed and backward runs

#: (start, step) of runs of L positions: below 0, backwards through 0, backwards from 0 (all
#: negative), from the top of the range, a stride, a forward run from a start > 0
RUNS = [(-7, 1), (100, -1), (0, -1), (2**32 - 1, -3), (-(2**32) + 1, 5), (9, 1)]


def run_budget(rows: int, d_model: int = D, dtype="float32") -> int:
    """A chunk budget that holds exactly ``rows`` rows of a signed or backward run."""
    return _save._chunk_bytes(rows, d_model, _dtypes.resolve(dtype), True)


@pytest.mark.any_backend
@pytest.mark.parametrize("start, step", RUNS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_signed_and_backward_runs_stream_bit_identical(tmp_path, backend, fmt, dtype, start, step):
    path = tmp_path / f"pe{fmt}"
    calls = []
    budget_ = run_budget(ROWS, D, dtype) if (start, step) != (9, 1) else budget(ROWS, D, dtype)
    saved = fastpe.save_table(path, D, L, start=start, step=step, dtype=dtype, chunk_bytes=budget_,
                              backend=backend, progress=lambda done, total: calls.append(done))
    expected = fastpe.table(D, L, start=start, step=step, dtype=dtype, backend=backend)
    assert same_bits(read_table(path, dtype), expected)
    assert calls == [min(r + ROWS, L) for r in range(0, L, ROWS)]  # streamed: 9 chunks, the last of 19 rows
    assert listing(tmp_path) == expected_files(path.name)
    run = {k: v for k, v in (("start", start), ("step", step)) if v != {"start": 0, "step": 1}[k]}
    assert saved.spec["params"] == _spec_params(D, L, dtype=dtype, **run)
    assert list(saved.spec["params"])[-len(run):] == list(run)  # after dtype, only those that are not 0 and 1
    assert _save.load_spec(path) == saved.spec
    assert same_bits(fastpe.table(**saved.spec["params"], backend=backend), expected)


@pytest.mark.parametrize("block", [1, 5, ROWS, 64])
def test_a_run_cut_into_position_blocks_inside_chunks_keeps_its_bits(tmp_path, monkeypatch, block):
    """A chunk's positions are computed a block of rows at a time (the blocks of
    fastpe.table): blocks that cut chunks raggedly give the same rows, and the budget counts
    one block's int64 positions."""
    want = fastpe.table(D, L, start=60, step=-1, dtype="float16")
    monkeypatch.setattr(fastpe.sinusoid, "_TABLE_BLOCK", block)
    assert run_budget(ROWS) - budget(ROWS) == 8 * min(block, ROWS)
    fastpe.save_table(tmp_path / "pe.npy", D, L, start=60, step=-1, dtype="float16",
                      chunk_bytes=run_budget(ROWS, D, "float16"))
    assert same_bits(read_table(tmp_path / "pe.npy", "float16"), want)


@pytest.mark.parametrize("fmt", FORMATS)
def test_rerunning_a_runs_spec_reproduces_the_same_bytes(tmp_path, fmt):
    first, second = tmp_path / f"a{fmt}", tmp_path / f"b{fmt}"
    fastpe.save_table(first, D, L, start=L // 2, step=-1, layout="halves", dtype="bfloat16",
                      chunk_bytes=run_budget(ROWS, D, "bfloat16"))
    params = _save.load_spec(first)["params"]
    assert (params["start"], params["step"]) == (L // 2, -1)
    fastpe.save_table(second, **params, chunk_bytes=run_budget(7, D, "bfloat16"))  # other chunks, same bytes
    assert first.read_bytes() == second.read_bytes()
    if fmt == ".npy":
        assert (tmp_path / "a.npy.json").read_bytes() == (tmp_path / "b.npy.json").read_bytes()


@pytest.mark.parametrize("fmt", FORMATS)
def test_output_size_of_a_run_is_exact(tmp_path, fmt):
    path = tmp_path / f"pe{fmt}"
    fastpe.save_table(path, D, L, start=-(2**31), step=-7, dtype="float64")
    written = sum(os.path.getsize(tmp_path / name) for name in os.listdir(tmp_path))
    assert written == _save.output_size(path, D, L, start=-(2**31), step=-7, dtype="float64")
    assert written > _save.output_size(path, D, L, dtype="float64")  # the spec's text names the run


def test_a_default_run_spelled_out_is_an_ordinary_table(tmp_path):
    saved = fastpe.save_table(tmp_path / "pe.npz", D, 7, start=0, step=1)
    assert saved.spec["params"] == _spec_params(D, 7)
    spec = good_spec(params={**_spec_params(D, L), "start": 0, "step": 1})
    assert _save.load_spec(write_spec(tmp_path, spec))["params"] == _spec_params(D, L)  # normalised


def test_one_row_takes_any_step(tmp_path):
    """With one row only ``start`` is a position: a step beyond int64 is still a valid run."""
    saved = fastpe.save_table(tmp_path / "pe.npy", D, 1, start=-3, step=10**30)
    want = np.empty((1, D), np.float32)
    fastpe.forward([-3], fastpe.PosEncConfig(D), want)
    assert same_bits(np.load(tmp_path / "pe.npy"), want)
    assert _save.load_spec(tmp_path / "pe.npy") == saved.spec and saved.spec["params"]["step"] == 10**30


#: start/step values table() refuses, with max_len L
BAD_RUNS = [
    pytest.param({"step": 0}, id="step-0"), pytest.param({"step": 1.5}, id="step-float"),
    pytest.param({"step": True}, id="step-bool"), pytest.param({"start": "3"}, id="start-str"),
    pytest.param({"start": None}, id="start-none"), pytest.param({"start": -(2**32)}, id="start-low"),
    pytest.param({"start": 2**32}, id="start-high"), pytest.param({"start": 2**32 - L + 1}, id="last-high"),
    pytest.param({"start": 5, "step": -(2**25)}, id="last-low"), pytest.param({"step": 10**30}, id="step-huge"),
]


def _table_error(kwargs, max_len=L) -> Exception:
    with pytest.raises((TypeError, ValueError)) as info:
        fastpe.table(D, max_len, **kwargs)
    return info.value


@pytest.mark.any_backend
@pytest.mark.parametrize("kwargs", BAD_RUNS)
def test_a_bad_run_fails_as_table_fails_before_creating_anything(tmp_path, kwargs):
    want = _table_error(kwargs)
    with pytest.raises(type(want)) as info:
        fastpe.save_table(tmp_path / "pe.npy", D, L, **kwargs)
    assert str(info.value) == str(want)
    assert listing(tmp_path) == []
    with pytest.raises(type(want), match=re.escape(str(want))):
        _save.output_size(tmp_path / "pe.npy", D, L, **kwargs)


@pytest.mark.any_backend
@pytest.mark.parametrize("kwargs", BAD_RUNS)
def test_a_damaged_run_in_a_spec_is_refused_with_tables_reason(tmp_path, kwargs):
    run = {"start": 4, **kwargs}
    want = _table_error(run)
    path = write_spec(tmp_path, good_spec(params={**_spec_params(D, L), **run}))
    with pytest.raises(type(want)) as info:
        _save.load_spec(path)
    assert str(info.value) == f"{path}: params: {want}"


@pytest.mark.any_backend
def test_a_runs_spec_with_a_longer_max_len_leaving_the_range_is_refused(tmp_path):
    saved = fastpe.save_table(tmp_path / "pe.npy", D, 7, start=-(2**32) + 7, step=-1, backend="python")
    spec = json.loads((tmp_path / "pe.npy.json").read_text())
    spec["params"]["max_len"] = 8  # the last position would be -2**32
    (tmp_path / "pe.npy.json").write_text(json.dumps(spec))
    with pytest.raises(ValueError) as info:
        _save.load_spec(tmp_path / "pe.npy")
    assert str(info.value) == (f"{tmp_path / 'pe.npy.json'}: params: the last position, start + (max_len - 1) * step "
                               f"must be in (-2**32, 2**32), got {-(2**32)}")
    assert saved.spec["params"]["start"] == -(2**32) + 7


@pytest.mark.any_backend
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_runs_file_written_again_is_refused(tmp_path, fmt):
    path = tmp_path / f"pe{fmt}"
    saved = fastpe.save_table(path, D, 7, start=3, step=-1, backend="python")
    _rewrite(path, read_table(path)[:5], json.dumps(saved.spec))
    with pytest.raises(ValueError, match=rf"holds float32 \(5, {D}\), but .* describes a float32 \(7, {D}\) table: "
                                         "the spec is stale"):
        _save.load_spec(path)


@pytest.mark.any_backend
@pytest.mark.skipif(not FAST, reason="the python reference allocates per value; the budget is a compiled-backend figure")
@pytest.mark.parametrize("dtype, chunk", [("float32", 256 << 10), ("float16", 2 << 20)])
@pytest.mark.parametrize("d_model", [1, 256])
def test_memory_of_a_run_stays_within_the_chunk_budget(tmp_path, fast_backend, dtype, chunk, d_model):
    """A backward run through 0: the chunk, its scratch and its blocks' positions stay within
    the budget (at d_model=1 the positions are larger than the rows they give)."""
    max_len = {("float32", 256): 20_000, ("float32", 1): 2_000_000, ("float16", 256): 6_000,
               ("float16", 1): 200_000}[dtype, d_model]
    start = max_len // 2
    # the same call first: its kernels compiled and caches filled outside the measurement
    fastpe.save_table(tmp_path / "warm.npz", d_model, max_len, start=start, step=-1, dtype=dtype, chunk_bytes=chunk,
                      backend=fast_backend)
    assert _save._chunk_bytes(max_len, d_model, _dtypes.resolve(dtype), True) > 4 * chunk
    tracemalloc.start()
    try:
        fastpe.save_table(tmp_path / "pe.npz", d_model, max_len, start=start, step=-1, dtype=dtype, chunk_bytes=chunk,
                          backend=fast_backend)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    workspace = 1 << 20  # as for the ordinary tables: fixed, not per row
    assert peak <= chunk + workspace, (peak, chunk)
