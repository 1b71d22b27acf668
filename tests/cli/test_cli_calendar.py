"""``fastpe calendar``: GluonTS calendar features of a ``.npy`` of timestamps, written to every
format, its spec re-creating the same bits, bad input one line and exit 2, nothing left behind."""

from __future__ import annotations

import numpy as np
import pytest

import fastpe.time as ft
from fastpe._io.writers import FORMATS
from conftest import DEFAULT
from support.cli import assert_one_line_error, listing, run, same_bits
from test_cli_formats import files_of, read_file, skip_reading_safetensors_without_its_package, stored


@pytest.fixture
def stamps(in_tmp):
    ts = np.arange("2023-12-30T20", "2024-01-01T04", dtype="datetime64[h]").reshape(4, 8)
    np.save("ts.npy", ts)
    return ts


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_every_format_and_dtype(in_tmp, stamps, fmt, dtype):
    skip_reading_safetensors_without_its_package(fmt)
    target = f"out{fmt}"
    result = run("calendar", "--timestamps", "ts.npy", "--freq", "H", "--dtype", dtype, "--backend", DEFAULT,
                 "-o", target)
    assert result.exit_code == 0, (result.output, result.stderr)
    shown = "bfloat16 (as uint16 bits)" if dtype == "bfloat16" and fmt != ".safetensors" else dtype
    (line,) = result.stdout.splitlines()
    assert line.startswith(f"wrote {target}: {shown} (4, 8, 4), GluonTS features of freq H (4), unit h"), line
    assert listing(in_tmp) == sorted(["ts.npy", *files_of(target)])
    expected = ft.calendar_features(stamps, "H", dtype=dtype, backend=DEFAULT)
    arrays, spec = read_file(target)
    (array,) = arrays.values()
    assert same_bits(array, stored(expected, fmt))
    assert spec["function"] == "time.calendar_features"
    params = spec["params"]
    assert params == {"timestamps": stamps.astype(np.int64).tolist(), "freq": "H", "index": False, "unit": "h",
                      "dtype": dtype}
    assert same_bits(ft.calendar_features(**params, backend=DEFAULT), expected)  # the spec re-creates the bits


def test_index_integers_with_their_unit_and_the_default_name(in_tmp):
    seconds = np.array([0, 59, 3600 * 25 + 61, -1], dtype=np.int64)
    np.save("s.npy", seconds)
    result = run("calendar", "--timestamps", "s.npy", "--unit", "s", "--freq", "15min", "--index", "--dtype", "int32")
    assert result.exit_code == 0, result.output
    assert listing(in_tmp) == ["calendar_15min.npy", "calendar_15min.npy.json", "s.npy"]
    got = np.load("calendar_15min.npy")
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, ft.calendar_features(seconds, "15min", unit="s", index=True, dtype="int32"))
    assert got[3].tolist() == [59, 23, 2, 30, 364]  # 1969-12-31T23:59:59, a Wednesday
    assert run("-q", "calendar", "--timestamps", "s.npy", "--unit", "s", "--freq", "W", "-o", "w.npz").stdout == ""


def test_many_timestamps_are_recorded_by_shape_and_digest(in_tmp, monkeypatch):
    import hashlib
    import importlib

    cli = importlib.import_module("fastpe.cli.calendar")
    monkeypatch.setattr(cli, "SPEC_VALUES", 3)
    ts = np.arange(10).astype("datetime64[D]")
    np.save("d.npy", ts)
    assert run("calendar", "--timestamps", "d.npy", "--freq", "D", "-o", "d.npz").exit_code == 0
    spec = read_file("d.npz")[1]
    digest = hashlib.sha256(ts.astype("<i8").tobytes()).hexdigest()
    assert spec["params"]["timestamps"] == {"shape": [10], "sha256": digest}


@pytest.mark.any_backend
@pytest.mark.parametrize("args, words", [
    (["--freq", "ms"], "not a frequency GluonTS"),
    (["--freq", "H", "--dtype", "int32"], "--index features only"),
    (["--freq", "H", "--unit", "s"], "--unit is for integer timestamps"),
    (["--freq", "H", "-o", "out.txt"], "does not end in .npy"),
    (["--freq"], "requires an argument"),
])
def test_bad_input_is_one_line_exit_2(in_tmp, stamps, args, words):
    line = assert_one_line_error(run("calendar", "--timestamps", "ts.npy", *args))
    assert words in line, line
    assert listing(in_tmp) == ["ts.npy"]


@pytest.mark.any_backend
def test_bad_timestamp_files_are_one_line_exit_2(in_tmp):
    np.save("f.npy", np.array([0.5]))
    np.save("i.npy", np.array([1, 2]))
    np.save("nat.npy", np.array(["NaT", "2020-01-01"], dtype="datetime64[s]"))
    with open("bad.npy", "w") as f:
        f.write("not numpy")
    for name, words in (("f.npy", "float64"), ("i.npy", "give --unit"), ("nat.npy", "NaT"),
                        ("bad.npy", "not a .npy file"), ("missing.npy", "missing.npy")):
        line = assert_one_line_error(run("calendar", "--timestamps", name, "--freq", "H"))
        assert words in line, (name, line)
    assert sorted(listing(in_tmp)) == ["bad.npy", "f.npy", "i.npy", "nat.npy"]
