"""Every array command writes every format: ``-o X.npy``, ``X.npz`` and ``X.safetensors``.

Each file is read back with the format's own reader and compared bit for bit with the
library function's result; the spec it records (``PATH.json`` beside a ``.npy``, inside the
others) must name the function and re-create the same bits when its parameters are passed
back to that function; no temporary file may be left.  Sizes stay tiny: the suite may run on
the python backend.
"""

from __future__ import annotations

import json
import os
import shutil
import struct

import numpy as np
import pytest

import fastpe
import fastpe.alibi
import fastpe.grid
import fastpe.relative
import fastpe.rope
import fastpe.time
from fastpe import _dtypes
from fastpe._dtypes import DTYPES
from fastpe._io import save as _save
from fastpe._io.writers import FORMATS, SPEC_COMMANDS, WRITERS
from fastpe.cli import COMMANDS, main
from conftest import DEFAULT
from support.cli import assert_one_line_error, listing, run, same_bits

try:
    import safetensors  # noqa: F401

    HAVE_SAFETENSORS = True
except ImportError:  # pragma: no cover - the package is a test dependency where available
    HAVE_SAFETENSORS = False


@pytest.fixture(autouse=True)
def _safetensors_without_its_package(monkeypatch):
    """Without the safetensors package the commands refuse .safetensors (it is what reads
    them); these tests write them anyway and read them with the parser below."""
    if not HAVE_SAFETENSORS:  # pragma: no cover
        monkeypatch.setattr(WRITERS[".safetensors"], "require", lambda: None)


# --------------------------------------------------------------------------- reading files back

_ST_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4"}


def safetensors_header(path) -> tuple[dict, int]:
    """The JSON header of a .safetensors file, parsed by hand, and where its data start."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)), 8 + n


def read_safetensors(path) -> tuple[dict[str, np.ndarray], dict]:
    """The tensors and the ``__metadata__`` of a .safetensors file: through the safetensors
    package when it is installed, else from the header parsed by hand."""
    if HAVE_SAFETENSORS:
        from safetensors import safe_open

        with safe_open(str(path), framework="numpy") as f:
            return {name: f.get_tensor(name) for name in f.keys()}, f.metadata()
    header, start = safetensors_header(path)
    with open(path, "rb") as f:
        raw = f.read()
    metadata = header.pop("__metadata__")
    arrays = {}
    for name, info in header.items():
        lo, hi = info["data_offsets"]
        array = np.frombuffer(raw[start + lo:start + hi], dtype=_ST_DTYPES[info["dtype"]]).reshape(info["shape"])
        arrays[name] = array.view(_dtypes.resolve("bfloat16")) if info["dtype"] == "BF16" else array
    return arrays, metadata


def read_file(path) -> tuple[dict[str, np.ndarray], dict]:
    """``({name: array}, spec)`` of a file written by fastpe; a .npy's one array is named ``""``.
    bfloat16 stored as uint16 bits is returned as such (the caller checks and views it)."""
    path = str(path)
    if path.endswith(".npy"):
        with open(path + ".json") as f:
            return {"": np.load(path, allow_pickle=False)}, json.load(f)
    if path.endswith(".npz"):
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
        spec = arrays.pop("spec")
        assert spec.shape == () and spec.dtype.kind == "U"
        return arrays, json.loads(str(spec[()]))
    arrays, metadata = read_safetensors(path)
    return arrays, json.loads(metadata["spec"])


def stored(array: np.ndarray, fmt: str) -> np.ndarray:
    """What ``array`` is in a file of format ``fmt``: bfloat16 as its uint16 bits outside
    .safetensors."""
    if array.dtype.name == "bfloat16" and fmt != ".safetensors":
        return array.view(np.uint16)
    return array


def little_endian(array: np.ndarray) -> bytes:
    if array.dtype.name == "bfloat16":
        return array.view(np.uint16).astype("<u2").tobytes()
    return array.astype(array.dtype.newbyteorder("<")).tobytes()


def skip_reading_safetensors_without_its_package(fmt: str) -> None:
    if fmt == ".safetensors" and not HAVE_SAFETENSORS:  # pragma: no cover
        pytest.skip("fastpe reads the spec of a .safetensors with the safetensors package")


def files_of(name: str) -> list[str]:
    return sorted([name, name + ".json"] if name.endswith(".npy") else [name])


# --------------------------------------------------------------------------- the commands


def _arange(value):
    return np.arange(value["arange"]) if isinstance(value, dict) and set(value) == {"arange"} else value


def _coords(value):
    """Coordinates a spec records as the grid builders that made them (``fastpe rope-axial``)."""
    coords = fastpe.rope.index_grid(**value["index_grid"])
    return fastpe.rope.prepend_cls(coords, value["prepend_cls"]) if "prepend_cls" in value else coords


def rerun(spec: dict):
    """``fastpe.<function>(**params)`` of a spec, positions given as ``{"arange": N}`` made an array."""
    function = fastpe
    for part in spec["function"].split("."):
        function = getattr(function, part)
    params = {name: _coords(value) if name == "coords" else _arange(value) for name, value in spec["params"].items()}
    return function(**params, backend=DEFAULT)


class Case:
    """One array command: its arguments, the library's arrays for them (by entry name), the
    function and parameters its spec records (``dtype`` aside), and its default file name."""

    def __init__(self, command, args, expected, function, params, default, dtype=True):
        self.command, self.args, self.expected = command, args, expected
        self.function, self.params, self.default, self.dtype = function, params, default, dtype

    def cli(self, dtype=None):
        """The command line; ``--dtype`` given for a float command unless ``dtype`` is None."""
        return [self.command, *self.args, *(["--dtype", dtype] if self.dtype and dtype else [])]


def _rope(dtype):
    cos, sin = fastpe.rope.cos_sin(np.arange(5), 8, dtype=dtype, backend=DEFAULT)
    inv, attention = fastpe.rope.inv_freq(8, seq_len=5)
    return {"cos": cos, "sin": sin, "inv_freq": inv, "attention_factor": np.float64(attention)}


def _rope_axial(dtype):
    cos, sin = fastpe.rope.axial_cos_sin(fastpe.rope.index_grid((2, 3)), (4, 6), dtype=dtype, backend=DEFAULT)
    return {"cos": cos, "sin": sin}


def _calendar_stamps():
    """``fastpe calendar``'s input: a ``.npy`` of timestamps outside the tests' working
    directories (which must hold only what the command writes), removed at exit."""
    import atexit
    import tempfile

    ts = np.arange("2023-12-31T21", "2024-01-01T03", dtype="datetime64[h]").reshape(2, 3)
    folder = tempfile.mkdtemp(prefix="fastpe-calendar-")
    atexit.register(shutil.rmtree, folder, True)
    np.save(os.path.join(folder, "ts.npy"), ts)
    return ts, os.path.join(folder, "ts.npy")


CALENDAR_STAMPS, CALENDAR_PATH = _calendar_stamps()


def _fourier_stamps():
    """``fastpe fourier``'s input: nanosecond timestamps on both sides of 1970, in a folder
    of their own, removed at exit."""
    import atexit
    import tempfile

    ts = np.arange("1969-12-31T18", "1970-01-01T06", 3, dtype="datetime64[h]").astype("datetime64[ns]")
    folder = tempfile.mkdtemp(prefix="fastpe-fourier-")
    atexit.register(shutil.rmtree, folder, True)
    np.save(os.path.join(folder, "ts.npy"), ts)
    return ts, os.path.join(folder, "ts.npy")


FOURIER_STAMPS, FOURIER_PATH = _fourier_stamps()

GRID = {"base": 10000.0, "order": "mae", "cls_token": False}
TIMESTEP = {"base": 10000.0, "flip_sin_to_cos": False, "shift": 1.0, "scale": 1.0}

CASES = {
    "table": Case(
        "table", ["--d-model", 6, "--max-len", 7],
        lambda dt: {"table": fastpe.table(6, 7, dtype=dt, backend=DEFAULT)},
        "table", {"d_model": 6, "max_len": 7, "base": 10000.0, "layout": "interleaved", "denominator": "d",
                  "min_timescale": 1.0, "max_timescale": None},
        "pe_7x6.npy"),
    "grid-2d": Case(
        "grid", ["--height", 2, "--width", 3, "--d-model", 8],
        lambda dt: {"grid": fastpe.grid.sincos_2d(2, 3, 8, dtype=dt, backend=DEFAULT)},
        "grid.sincos_2d", {"height": 2, "width": 3, "d_model": 8, **GRID}, "grid_2x3x8.npy"),
    "grid-3d": Case(
        "grid", ["--frames", 2, "--height", 1, "--width", 2, "--d-model", 12, "--cls-token"],
        lambda dt: {"grid": fastpe.grid.sincos_3d(2, 1, 2, 12, cls_token=True, dtype=dt, backend=DEFAULT)},
        "grid.sincos_3d", {"frames": 2, "height": 1, "width": 2, "d_model": 12, **GRID, "cls_token": True},
        "grid_2x1x2x12.npy"),
    "timestep-steps": Case(
        "timestep", ["--d-model", 8, "--steps", 5],
        lambda dt: {"embedding": fastpe.timestep(np.arange(5.0), 8, dtype=dt, backend=DEFAULT)},
        "timestep", {"t": {"arange": 5}, "d_model": 8, **TIMESTEP}, "timestep_5x8.npy"),
    "timestep-values": Case(
        "timestep", ["--d-model", 6, "--t", "0,0.5,999.25", "--flip-sin-to-cos"],
        lambda dt: {"embedding": fastpe.timestep([0.0, 0.5, 999.25], 6, flip_sin_to_cos=True, dtype=dt,
                                                 backend=DEFAULT)},
        "timestep", {"t": [0.0, 0.5, 999.25], "d_model": 6, **TIMESTEP, "flip_sin_to_cos": True},
        "timestep_3x6.npy"),
    "alibi": Case(
        "alibi", ["--heads", 3, "--q-len", 4, "--k-len", 5, "--form", "causal"],
        lambda dt: {"bias": fastpe.alibi.bias(3, 4, 5, form="causal", dtype=dt, backend=DEFAULT)},
        "alibi.bias", {"n_heads": 3, "q_len": 4, "k_len": 5, "form": "causal", "max_bias": 8.0},
        "alibi_causal_3x4x5.npy"),
    "sandwich": Case(
        "sandwich", ["--heads", 3, "--q-len", 4, "--k-len", 6, "--hidden-size", 8, "--causal"],
        lambda dt: {"bias": fastpe.relative.sandwich_bias(3, 4, 6, hidden_size=8, bidirectional=False, dtype=dt,
                                                          backend=DEFAULT)},
        "relative.sandwich_bias", {"n_heads": 3, "q_len": 4, "k_len": 6, "hidden_size": 8, "bidirectional": False},
        "sandwich_3x4x6.npy"),
    "t5-buckets": Case(
        "t5-buckets", ["--q-len", 4, "--k-len", 6, "--unidirectional"],
        lambda dt: {"buckets": fastpe.relative.t5_bucket_matrix(4, 6, bidirectional=False, backend=DEFAULT)},
        "relative.t5_bucket_matrix", {"q_len": 4, "k_len": 6, "bidirectional": False, "num_buckets": 32,
                                      "max_distance": 128, "offset": 0, "dtype": "int64"},
        "t5_buckets_4x6.npy", dtype=False),
    "deberta": Case(
        "deberta", ["--q-len", 5, "--k-len", 300, "--bucket-size", 16, "--max-position", 20],
        lambda dt: {"positions": fastpe.relative.deberta_bucket_matrix(5, 300, bucket_size=16, max_position=20,
                                                                       backend=DEFAULT)},
        "relative.deberta_bucket_matrix", {"q_len": 5, "k_len": 300, "bucket_size": 16, "max_position": 20,
                                           "dtype": "int64"},
        "deberta_5x300.npy", dtype=False),
    "shaw": Case(
        "shaw", ["--q-len", 4, "--k-len", 9, "--max-relative-position", 3],
        lambda dt: {"positions": fastpe.relative.shaw_positions(4, 9, max_relative_position=3, backend=DEFAULT)},
        "relative.shaw_positions", {"q_len": 4, "k_len": 9, "max_relative_position": 3, "cache": False,
                                    "dtype": "int32"},
        "shaw_4x9.npy", dtype=False),
    "calendar": Case(
        "calendar", ["--timestamps", CALENDAR_PATH, "--freq", "H"],
        lambda dt: {"features": fastpe.time.calendar_features(CALENDAR_STAMPS, "H", dtype=dt, backend=DEFAULT)},
        "time.calendar_features", {"timestamps": CALENDAR_STAMPS.astype(np.int64).tolist(), "freq": "H",
                                   "index": False, "unit": "h"},
        "calendar_H.npy"),
    "fourier": Case(
        "fourier", ["--timestamps", FOURIER_PATH, "--period", 365.25, "--order", 3],
        lambda dt: {"features": fastpe.time.fourier_features(FOURIER_STAMPS, 365.25, 3, dtype=dt, backend=DEFAULT)},
        "time.fourier_features", {"timestamps": FOURIER_STAMPS.astype(np.int64).tolist(), "period": 365.25,
                                  "order": 3, "unit": "D", "timestamp_unit": "ns"},
        "fourier_365_25_3.npy"),
    "rope": Case(
        "rope", ["--head-dim", 8, "--max-len", 5], _rope,
        "rope.cos_sin", {"positions": {"arange": 5}, "head_dim": 8, "base": None, "rotary_dim": None, "scaling": {},
                         "seq_len": 5, "max_position_embeddings": None, "layout": "neox"},
        "rope_5x8.npz"),
    "rope-axial": Case(
        "rope-axial", ["--axes-dim", "4,6", "--grid", "2,3"], _rope_axial,
        "rope.axial_cos_sin", {"coords": {"index_grid": {"sizes": [2, 3], "centered": [False, False]}},
                               "axes_dim": [4, 6], "base": 10000.0, "layout": "gptj", "linear_factor": 1.0,
                               "ntk_factor": 1.0, "offset": 0.0},
        "rope_axial_2x3_10.npz"),
}

#: the float commands run with every dtype, the others with their one
CASE_DTYPES = [pytest.param(name, dt, id=f"{name}-{dt}") for name, case in CASES.items()
               for dt in (DTYPES if case.dtype else ["float32"])]


def check_spec(spec: dict, case: Case, dtype: str, expected: dict):
    """The spec names the function and every parameter, and they re-create the same bits."""
    assert spec["fastpe"] == fastpe.__version__ and spec["function"] == case.function
    assert set(spec) == ({"fastpe", "function", "params", "stacked"} if "stacked" in spec
                         else {"fastpe", "function", "params"})
    # every backend computes the same bits: the backend is not recorded
    assert spec["params"] == ({**case.params, "dtype": dtype} if case.dtype else case.params)
    again = rerun(spec)
    if case.function in ("rope.cos_sin", "rope.axial_cos_sin"):
        again = dict(zip(("cos", "sin"), again))
    else:
        again = {next(iter(expected)): again}
    for name, array in again.items():
        assert same_bits(array, expected[name]), name


# --------------------------------------------------------------------------- every command x every format


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name, dtype", CASE_DTYPES)
def test_every_command_writes_every_format(in_tmp, name, dtype, fmt):
    case = CASES[name]
    target = f"out{fmt}"
    result = run(*case.cli(dtype), "-o", target)
    assert result.exit_code == 0, (result.output, result.stderr)
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"wrote {target}: "), result.stdout
    if case.dtype:  # every command names the dtype in the same words, bfloat16's storage included
        shown = "bfloat16 (as uint16 bits)" if dtype == "bfloat16" and fmt != ".safetensors" else dtype
        what = "cos, sin " if case.command in ("rope", "rope-axial") else ""  # rope's line names its two arrays first
        assert lines[0].startswith(f"wrote {target}: {what}{shown} ("), lines[0]
    assert listing(in_tmp) == files_of(target)  # no temporary file left

    expected = case.expected(dtype)
    arrays, spec = read_file(target)
    check_spec(spec, case, dtype, expected)
    if fmt == ".npy":
        (array,) = arrays.values()
        if len(expected) > 1:  # rope: one array, cos and sin stacked on axis 0
            assert spec["stacked"] == ["cos", "sin"]
            assert array.shape == (2, *expected["cos"].shape)
            expected = {"cos": expected["cos"], "sin": expected["sin"]}
            arrays = {"cos": array[0], "sin": array[1]}
        else:
            assert "stacked" not in spec
            arrays = {next(iter(expected)): array}
    else:
        assert "stacked" not in spec
        assert sorted(arrays) == sorted(expected)
        if fmt == ".npz":  # the spec first, then the arrays in the command's order
            with np.load(target) as archive:
                assert archive.files == ["spec", *expected]
    for entry, array in expected.items():
        assert same_bits(arrays[entry], stored(np.asarray(array), fmt)), entry

    if name == "table" and (fmt != ".safetensors" or HAVE_SAFETENSORS):  # the library reads the same spec back
        assert _save.load_spec(target) == spec


def test_every_command_names_a_bfloat16_npy_alike(in_tmp):
    """Every command that writes bfloat16 says, in its summary, that a .npy or .npz holds it
    as uint16 bits, in the same words (_write.dtype_text); a .safetensors holds BF16."""
    takes_bfloat16 = {
        command.name for command in COMMANDS
        for p in command.params if p.name == "dtype" and "bfloat16" in getattr(p.type, "choices", ())
    }
    assert takes_bfloat16 == {case.command for case in CASES.values() if case.dtype}  # none untested
    for name, case in CASES.items():
        if not case.dtype:
            continue
        for fmt, shown in ((".npy", "bfloat16 (as uint16 bits)"), (".npz", "bfloat16 (as uint16 bits)"),
                           (".safetensors", "bfloat16")):
            target = f"{name}{fmt}"
            result = run(*case.cli("bfloat16"), "-o", target)
            assert result.exit_code == 0, (result.output, result.stderr)
            line = result.stdout.rstrip("\n")
            head = f"wrote {target}: {'cos, sin ' if case.command in ('rope', 'rope-axial') else ''}"
            assert line.startswith(head) and line[len(head):].split(" (")[0] == "bfloat16", line
            assert line.startswith(f"{head}{shown} ("), line
            assert ("uint16" in line) == (fmt != ".safetensors"), line


@pytest.mark.parametrize("name", list(CASES))
def test_the_default_file_names_stay(in_tmp, name):
    case = CASES[name]
    result = run(*case.cli())
    assert result.exit_code == 0, (result.output, result.stderr)
    assert listing(in_tmp) == files_of(case.default)


def test_safetensors_headers_are_the_formats(in_tmp):
    """Parsed by hand: 8-byte aligned data, every tensor's code, shape and offsets, in order
    and without gaps, and the spec in ``__metadata__``."""
    codes = {"float32": "F32", "float64": "F64", "float16": "F16", "bfloat16": "BF16", "int64": "I64", "int32": "I32"}
    for name, case in CASES.items():
        for dtype in (["bfloat16", "float64"] if case.dtype else ["float32"]):
            target = f"{name}-{dtype}.safetensors"
            assert run(*case.cli(dtype), "-o", target).exit_code == 0
            header, start = safetensors_header(target)
            assert start % 8 == 0
            metadata = header.pop("__metadata__")
            assert json.loads(metadata["spec"])["function"] == case.function
            expected = case.expected(dtype)
            assert list(header) == list(expected)
            offset = 0
            for entry, array in expected.items():
                array = np.asarray(array)
                assert header[entry] == {"dtype": codes[array.dtype.name], "shape": list(array.shape),
                                         "data_offsets": [offset, offset + array.nbytes]}
                offset += array.nbytes
            assert os.path.getsize(target) == start + offset
            with open(target, "rb") as f:
                data = f.read()[start:]
            assert data == b"".join(little_endian(np.asarray(a)) for a in expected.values())


def test_many_timesteps_are_recorded_by_count_and_digest(in_tmp, monkeypatch):
    import hashlib
    import importlib

    timestep_cli = importlib.import_module("fastpe.cli.timestep")  # (fastpe.cli.timestep is the command)

    t = np.linspace(-3.0, 900.0, 10, dtype=np.float32)
    np.save("t.npy", t)
    monkeypatch.setattr(timestep_cli, "SPEC_VALUES", 4)
    assert run("timestep", "--d-model", 6, "--from", "t.npy", "-o", "e.npz").exit_code == 0
    arrays, spec = read_file("e.npz")
    digest = hashlib.sha256(t.astype("<f8").tobytes()).hexdigest()
    assert spec["params"]["t"] == {"count": 10, "sha256": digest}
    assert same_bits(arrays["embedding"], fastpe.timestep(t, 6, backend=DEFAULT))
    monkeypatch.undo()
    monkeypatch.chdir(in_tmp)
    assert run("timestep", "--d-model", 6, "--from", "t.npy", "-o", "f.npz").exit_code == 0
    assert read_file("f.npz")[1]["params"]["t"] == t.astype(np.float64).tolist()  # few: listed


# --------------------------------------------------------------------------- the spec of another command


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", [n for n in CASES if n != "table"])
def test_table_from_the_spec_of_another_command_is_one_line_exit_2(in_tmp, name, fmt):
    skip_reading_safetensors_without_its_package(fmt)
    case = CASES[name]
    assert run(*case.cli("float32"), "-o", f"other{fmt}").exit_code == 0
    before = listing(in_tmp)
    line = assert_one_line_error(run("table", "--from-spec", f"other{fmt}", "-o", "again.npy"))
    assert (f"names function '{case.function}' (fastpe {case.command} wrote it); fastpe table and save_table "
            "re-run the specs of tables only ('table')") in line
    assert SPEC_COMMANDS[case.function] == case.command
    assert listing(in_tmp) == before


@pytest.mark.parametrize("fmt", FORMATS)
def test_table_from_a_table_spec_still_works(in_tmp, fmt):
    skip_reading_safetensors_without_its_package(fmt)
    assert run("table", "--d-model", 6, "--max-len", 7, "--dtype", "bfloat16", "-o", f"a{fmt}").exit_code == 0
    result = run("table", "--from-spec", f"a{fmt}", "-o", "b.npz")
    assert result.exit_code == 0, result.output
    arrays, spec = read_file("b.npz")
    assert same_bits(arrays["table"], fastpe.table(6, 7, dtype="bfloat16", backend=DEFAULT).view(np.uint16))
    assert spec == read_file(f"a{fmt}")[1]


# --------------------------------------------------------------------------- bad paths, sizes, failures


@pytest.mark.any_backend
@pytest.mark.parametrize("name", list(CASES))
def test_an_unknown_suffix_is_one_line_exit_2(in_tmp, name):
    case = CASES[name]
    for bad in ("out.txt", "out.npy.gz", "out"):
        line = assert_one_line_error(run(*case.cli("float32"), "-o", bad))
        assert "does not end in .npy, .npz or .safetensors" in line and case.command in line
    assert listing(in_tmp) == []


@pytest.mark.parametrize("name", ["grid-2d", "rope"])
def test_a_sidecar_place_that_is_a_directory_is_one_line_exit_2(in_tmp, name):
    (in_tmp / "out.npy.json").mkdir()
    line = assert_one_line_error(run(*CASES[name].cli("float32"), "-o", "out.npy"))
    assert "'out.npy.json', where the spec of 'out.npy' goes, exists and is not a regular file" in line
    assert listing(in_tmp) == ["out.npy.json"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", list(CASES))
def test_the_free_space_check_is_exact(in_tmp, monkeypatch, name, fmt):
    """Checked before any work, against exactly what is then written (sidecar included)."""
    case = CASES[name]
    assert run(*case.cli("float32"), "-o", f"probe{fmt}").exit_code == 0
    needed = sum(os.path.getsize(in_tmp / f) for f in files_of(f"probe{fmt}"))
    for f in files_of(f"probe{fmt}"):
        os.unlink(in_tmp / f)
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=needed - 1))
    line = assert_one_line_error(run(*case.cli("float32"), "-o", f"out{fmt}"), code=1)
    assert "[Errno 28] not enough free space" in line and f"needs {needed} bytes" in line
    assert listing(in_tmp) == []
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=needed))
    assert run(*case.cli("float32"), "-o", f"out{fmt}").exit_code == 0  # exactly enough is enough


@pytest.mark.any_backend
@pytest.mark.parametrize("fmt", [".npz", ".safetensors"])
@pytest.mark.parametrize("args", [
    ["grid", "--height", 256, "--width", 256, "--d-model", 8],
    ["alibi", "--heads", 32, "--q-len", 512],
    ["t5-buckets", "--q-len", 512],
    ["rope", "--head-dim", 128, "--max-len", 8192],
])
def test_arrays_larger_than_memory_are_refused_before_any_work(in_tmp, monkeypatch, args, fmt):
    monkeypatch.setattr(_save, "physical_memory", lambda: 1 << 20)

    def never(*a, **k):  # pragma: no cover - reached only if the size check is missing
        raise AssertionError("the library was called")

    for module, function in ((fastpe.grid, "sincos_2d"), (fastpe.alibi, "bias"),
                             (fastpe.relative, "t5_bucket_matrix"), (fastpe.rope, "cos_sin")):
        monkeypatch.setattr(module, function, never)
    line = assert_one_line_error(run(*args, "-o", f"big{fmt}"))
    assert "array needs " in line and "of memory, more than this machine's 1048576 bytes" in line
    assert "; ask for " in line  # what to do instead
    assert listing(in_tmp) == []


def _never_called(monkeypatch):
    def never(*a, **k):  # pragma: no cover - reached only if the size check is missing
        raise AssertionError("the library was called")

    for module, function in ((fastpe.grid, "sincos_2d"), (fastpe.grid, "sincos_3d"), (fastpe.alibi, "bias"),
                             (fastpe.relative, "t5_bucket_matrix"), (fastpe, "timestep")):
        monkeypatch.setattr(module, function, never)


#: requests no machine here holds, with the size each would take and what the message says to do
HUGE = [
    (["alibi", "--heads", 32, "--q-len", 100000], "32 x 100000 x 100000 float32", "1.2 TiB",
     "ask for fewer --heads or a shorter --q-len/--k-len"),
    # past the library's own limit too: still the size first
    (["alibi", "--heads", 65536, "--q-len", 100000000], "65536 x 100000000 x 100000000 float32", "2273.7 EiB",
     "ask for fewer --heads or a shorter --q-len/--k-len"),
    (["grid", "--height", 100000, "--width", 100000, "--d-model", 768], "10000000000 x 768 float32", "27.9 TiB",
     "ask for a smaller grid or --d-model"),
    (["grid", "--frames", 64, "--height", 1024, "--width", 1024, "--d-model", 768, "--dtype", "bfloat16"],
     "67108864 x 768 bfloat16", "96.0 GiB", "ask for a smaller grid or --d-model"),
    (["t5-buckets", "--q-len", 1000000], "1000000 x 1000000 int64", "7.3 TiB", "ask for a shorter --q-len/--k-len"),
    (["timestep", "--d-model", 4096, "--steps", 100000000, "--flip-sin-to-cos"], "100000000 x 4096 float32",
     "1.5 TiB", "ask for fewer timesteps or a smaller --d-model"),
]


@pytest.mark.any_backend
@pytest.mark.parametrize("args, held, size, advice", HUGE, ids=[" ".join(map(str, h[0][:3])) for h in HUGE])
def test_requests_too_large_for_memory_say_how_large_and_what_to_do(in_tmp, monkeypatch, args, held, size, advice):
    monkeypatch.setattr(_save, "physical_memory", lambda: 24 << 30)
    _never_called(monkeypatch)
    line = assert_one_line_error(run(*args))
    assert line.startswith(f"Error: the {held} array needs ") and f"({size}" in line, line
    assert "of memory, more than this machine's 25769803776 bytes (24.0 GiB); " + advice in line, line
    assert listing(in_tmp) == []


@pytest.mark.any_backend
@pytest.mark.parametrize("shift, denominator", [(1, "half-1"), (0, "d")])
def test_a_timestep_table_too_large_for_memory_points_at_fastpe_table(in_tmp, monkeypatch, shift, denominator):
    want = fastpe.timestep(np.arange(70.0), 4096, shift=shift, base=500.0, dtype="bfloat16", backend=DEFAULT)
    monkeypatch.setattr(_save, "physical_memory", lambda: 24 << 30)
    _never_called(monkeypatch)
    line = assert_one_line_error(run("timestep", "--d-model", 4096, "--steps", 100000000, "--shift", shift,
                                     "--base", 500, "--dtype", "bfloat16"))
    command = (f"fastpe table --d-model 4096 --max-len 100000000 --layout halves --denominator {denominator} "
               "--base 500.0 --dtype bfloat16")
    assert line.endswith(f"; {command} writes the same values a chunk at a time"), line
    # and it does: the same bits, on a size that fits
    small = command.replace("100000000", "70").split()[1:] + ["-o", "t.npy"]
    assert run(*small).exit_code == 0
    assert same_bits(np.load("t.npy"), want.view(np.uint16))


@pytest.mark.any_backend
@pytest.mark.parametrize("args", [
    ["grid", "--height", 65536, "--width", 65537, "--d-model", 4],
    ["alibi", "--heads", 1, "--q-len", 1 << 20, "--k-len", (1 << 20) + 1, "--dtype", "float16"],
    ["t5-buckets", "--q-len", 1 << 20, "--k-len", (1 << 20) + 1],
])
def test_past_the_librarys_limits_on_a_big_machine_the_limit_is_the_error(in_tmp, monkeypatch, args):
    """Memory enough, disk too small: the request is bad input (exit 2) before the disk matters."""
    monkeypatch.setattr(_save, "physical_memory", lambda: 1 << 80)
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=0))
    line = assert_one_line_error(run(*args, "-o", "big.npz"))
    assert "must be <= 2**40" in line or "tokens, more than" in line, line
    assert listing(in_tmp) == []


def _fail_after_some_bytes(exc):
    def write_data(f, layout, blocks):
        f.write(b"\0" * 100)
        f.flush()
        raise exc

    return write_data


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ["grid-2d", "t5-buckets", "rope"])
@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
def test_a_failure_or_ctrl_c_while_writing_leaves_nothing(in_tmp, monkeypatch, name, fmt, existing):
    target = f"out{fmt}"
    if existing:
        for f in files_of(target):
            (in_tmp / f).write_bytes(b"precious")
    case = CASES[name]
    monkeypatch.setattr(WRITERS[fmt], "write_data", _fail_after_some_bytes(OSError(28, "No space left on device")))
    line = assert_one_line_error(run(*case.cli("float32"), "-o", target), code=1)
    assert line == f"Error: could not write {target}: [Errno 28] No space left on device"
    monkeypatch.setattr(WRITERS[fmt], "write_data", _fail_after_some_bytes(KeyboardInterrupt()))
    result = run(*case.cli("float32"), "-o", target)
    assert result.exit_code == 130 and result.stderr.strip() == "Aborted!"
    assert listing(in_tmp) == (files_of(target) if existing else [])
    if existing:
        assert all((in_tmp / f).read_bytes() == b"precious" for f in files_of(target))


# --------------------------------------------------------------------------- help and the command list


@pytest.mark.any_backend
@pytest.mark.parametrize("command", sorted({case.command for case in CASES.values()}))
def test_the_output_help_names_every_format(command):
    result = run(command, "--help")
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    help_o = text[text.index("-o, --output"):]
    for fmt in FORMATS:
        assert fmt in help_o
    assert "PATH.json" in help_o
    if command == "rope":
        assert "(2, MAX_LEN, ROTARY_DIM), axis 0 = (cos, sin)" in help_o


@pytest.mark.any_backend
def test_every_command_of_the_group_is_in_commands():
    assert sorted(main.commands) == sorted(command.name for command in COMMANDS)
    assert all(main.commands[command.name] is command for command in COMMANDS)
    assert len({command.name for command in COMMANDS}) == len(COMMANDS)
    assert {case.command for case in CASES.values()} <= set(main.commands)


@pytest.mark.any_backend
def test_every_writer_is_tested():
    assert FORMATS == tuple(WRITERS) == (".npy", ".npz", ".safetensors")
