"""``fastpe fourier``: Prophet's Fourier features of a ``.npy`` of timestamps, written to every
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
    ts = np.arange("1969-12-31T20", "1970-01-01T04", dtype="datetime64[h]").astype("datetime64[ns]").reshape(2, 4)
    np.save("ts.npy", ts)
    return ts


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_every_format_and_dtype(in_tmp, stamps, fmt, dtype):
    skip_reading_safetensors_without_its_package(fmt)
    target = f"out{fmt}"
    result = run("fourier", "--timestamps", "ts.npy", "--period", 1, "--order", 3, "--dtype", dtype,
                 "--backend", DEFAULT, "-o", target)
    assert result.exit_code == 0, (result.output, result.stderr)
    shown = "bfloat16 (as uint16 bits)" if dtype == "bfloat16" and fmt != ".safetensors" else dtype
    (line,) = result.stdout.splitlines()
    assert line.startswith(f"wrote {target}: {shown} (2, 4, 6), Prophet Fourier features, period 1 D, order 3, "
                           "timestamps in ns"), line
    assert listing(in_tmp) == sorted(["ts.npy", *files_of(target)])
    expected = ft.fourier_features(stamps, 1.0, 3, dtype=dtype, backend=DEFAULT)
    arrays, spec = read_file(target)
    (array,) = arrays.values()
    assert same_bits(array, stored(expected, fmt))
    assert spec["function"] == "time.fourier_features"
    params = spec["params"]
    assert params == {"timestamps": stamps.astype(np.int64).tolist(), "period": 1.0, "order": 3, "unit": "D",
                      "timestamp_unit": "ns", "dtype": dtype}
    assert same_bits(ft.fourier_features(**params, backend=DEFAULT), expected)  # the spec re-creates the bits


def test_integers_with_their_unit_and_the_default_name(in_tmp):
    hours = np.array([0, 6, 12, 18, -6, 24 * 365], dtype=np.int64)
    np.save("h.npy", hours)
    result = run("fourier", "--timestamps", "h.npy", "--unit", "h", "--period", 24, "--order", 2)
    assert result.exit_code == 0, result.output
    assert listing(in_tmp) == ["fourier_24_2.npy", "fourier_24_2.npy.json", "h.npy"]
    got = np.load("fourier_24_2.npy")
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, ft.fourier_features(hours, 24, 2, unit="h"))
    assert got[1].tolist() == [1.0, 0.0, 0.0, -1.0]  # a quarter turn: exactly
    ns = hours * 3600 * 10**9
    np.save("ns.npy", ns)
    assert run("fourier", "--timestamps", "ns.npy", "--timestamp-unit", "ns", "--period", 1, "--order", 2,
               "-o", "ns.npz").exit_code == 0
    assert same_bits(read_file("ns.npz")[0]["features"], got)
    assert run("-q", "fourier", "--timestamps", "h.npy", "--unit", "h", "--period", 24, "--order", 1,
               "-o", "q.npy").stdout == ""


def test_many_timestamps_are_recorded_by_shape_and_digest(in_tmp, monkeypatch):
    import hashlib
    import importlib

    cli = importlib.import_module("fastpe.cli.fourier")
    monkeypatch.setattr(cli, "SPEC_VALUES", 3)
    ts = np.arange(10).astype("datetime64[D]")
    np.save("d.npy", ts)
    assert run("fourier", "--timestamps", "d.npy", "--period", 7, "--order", 1, "-o", "d.npz").exit_code == 0
    spec = read_file("d.npz")[1]
    digest = hashlib.sha256(ts.astype("<i8").tobytes()).hexdigest()
    assert spec["params"]["timestamps"] == {"shape": [10], "sha256": digest}


@pytest.mark.any_backend
@pytest.mark.parametrize("args, words", [
    (["--period", 0, "--order", 2], "--period': must be > 0"),
    (["--period", "nan", "--order", 2], "--period': must be finite"),
    (["--period", 7, "--order", 0], "--order': must be >= 1"),
    (["--period", 7, "--order", 2.5], "order"),
    (["--period", 7], "Missing option '--order'"),
    (["--period", 7, "--order", 2, "--timestamp-unit", "s"], "--timestamp-unit is for integer timestamps"),
    (["--period", 7, "--order", 2, "--unit", "M"], "--unit"),
    (["--period", 7, "--order", 2, "--dtype", "int32"], "--dtype"),
    (["--period", 7, "--order", 2, "-o", "out.txt"], "does not end in .npy"),
])
def test_bad_input_is_one_line_exit_2(in_tmp, stamps, args, words):
    line = assert_one_line_error(run("fourier", "--timestamps", "ts.npy", *args))
    assert words in line, line
    assert listing(in_tmp) == ["ts.npy"]


@pytest.mark.any_backend
def test_bad_timestamp_files_are_one_line_exit_2(in_tmp):
    np.save("f.npy", np.array([0.5]))
    np.save("nat.npy", np.array(["NaT", "2020-01-01"], dtype="datetime64[s]"))
    with open("bad.npy", "w") as f:
        f.write("not numpy")
    for name, words in (("f.npy", "float64"), ("nat.npy", "NaT"), ("bad.npy", "not a .npy file"),
                        ("missing.npy", "missing.npy")):
        line = assert_one_line_error(run("fourier", "--timestamps", name, "--period", 7, "--order", 1))
        assert words in line, (name, line)
    assert sorted(listing(in_tmp)) == ["bad.npy", "f.npy", "nat.npy"]
