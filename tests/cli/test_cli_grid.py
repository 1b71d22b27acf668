"""``fastpe grid`` and ``fastpe timestep`` through CliRunner.

Every written array is compared bit for bit with :func:`fastpe.grid.sincos_2d` /
:func:`~fastpe.grid.sincos_3d` / :func:`fastpe.timestep` of the same arguments, and each
option is shown to reach the library (the file equals the library's output *with* that
option and differs from its output without it).  Sizes stay small: the suite may run on the
python backend.
"""

from __future__ import annotations

import os
import re

import ml_dtypes
import numpy as np
import pytest

import fastpe
from fastpe import grid as fg
from conftest import DEFAULT
from support.cli import assert_one_line_error, run, same_bits
from support.cli import ok as check_summary

SUMMARY = re.compile(
    r"wrote (?P<path>\S+): (?P<dtype>\w+)(?P<bits> \(as uint16 bits\))? \((?P<rows>\d+), (?P<cols>\d+)\), "
    r"(?P<what>.+), [\d.]+ (B|KiB|MiB|GiB), backend (?P<backend>\w+), [\d.]+ ms compute \+ [\d.]+ ms write"
)


def ok(result) -> re.Match:
    return check_summary(result, SUMMARY)


# --------------------------------------------------------------------------- fastpe grid


def test_grid_2d_default_name_values_and_summary(in_tmp):
    m = ok(run("grid", "--height", 3, "--width", 5, "--d-model", 8))
    assert m["path"] == "grid_3x5x8.npy" and sorted(os.listdir(in_tmp)) == ["grid_3x5x8.npy", "grid_3x5x8.npy.json"]
    assert (m["dtype"], m["rows"], m["cols"], m["bits"]) == ("float32", "15", "8", None)
    assert m["what"] == "2-D grid 3x5, order mae" and m["backend"] == DEFAULT
    assert same_bits(np.load("grid_3x5x8.npy"), fg.sincos_2d(3, 5, 8, backend=DEFAULT))


def test_grid_3d_default_name(in_tmp):
    m = ok(run("grid", "--frames", 2, "--height", 3, "--width", 4, "--d-model", 12))
    assert m["path"] == "grid_2x3x4x12.npy" and m["what"] == "3-D grid 2x3x4, order mae"
    assert (m["rows"], m["cols"]) == ("24", "12")
    assert same_bits(np.load(m["path"]), fg.sincos_3d(2, 3, 4, 12, backend=DEFAULT))


GRID_OPTIONS = [
    # (CLI options, library keywords); each differs from the default output
    (["--order", "timm"], {"order": "timm"}),
    (["--order", "TIMM"], {"order": "timm"}),
    (["--cls-token"], {"cls_token": True}),
    (["--base", 100], {"base": 100.0}),
    (["--dtype", "float64"], {"dtype": "float64"}),
    (["--dtype", "float16"], {"dtype": "float16"}),
    (["--order", "timm", "--cls-token", "--base", 500, "--dtype", "float64"],
     {"order": "timm", "cls_token": True, "base": 500.0, "dtype": "float64"}),
]


@pytest.mark.parametrize("frames", [None, 3])
@pytest.mark.parametrize(("cli", "kwargs"), GRID_OPTIONS)
def test_grid_options_reach_the_library(in_tmp, frames, cli, kwargs):
    sizes, d_model = ((4, 6), 8) if frames is None else ((frames, 4, 6), 12)
    front = [] if frames is None else ["--frames", frames]
    ok(run("grid", *front, "--height", 4, "--width", 6, "--d-model", d_model, *cli, "-o", "g.npy"))
    build = fg.sincos_2d if frames is None else fg.sincos_3d
    expected = build(*sizes, d_model, backend=DEFAULT, **kwargs)
    got = np.load("g.npy")
    assert same_bits(got, expected)
    plain = build(*sizes, d_model, backend=DEFAULT)
    assert not same_bits(got, plain)


def test_grid_summary_names_order_and_cls_token(in_tmp):
    m = ok(run("grid", "--height", 2, "--width", 2, "--d-model", 4, "--order", "timm", "--cls-token"))
    assert m["what"] == "2-D grid 2x2, order timm, cls token" and m["rows"] == "5"


def test_grid_bfloat16_is_stored_as_uint16_bits(in_tmp):
    m = ok(run("grid", "--frames", 2, "--height", 3, "--width", 2, "--d-model", 6, "--dtype", "bfloat16", "-o", "b.npy"))
    assert m["dtype"] == "bfloat16" and m["bits"] == " (as uint16 bits)"
    raw = np.load("b.npy")
    assert raw.dtype == np.uint16
    expected = fg.sincos_3d(2, 3, 2, 6, dtype="bfloat16", backend=DEFAULT)
    assert same_bits(raw.view(ml_dtypes.bfloat16), expected)
    assert np.array_equal(raw.view(ml_dtypes.bfloat16).astype(np.float32), expected.astype(np.float32))


def test_grid_backend_option(in_tmp):
    m = ok(run("grid", "--height", 2, "--width", 3, "--d-model", 4, "--backend", "python", "-o", "p.npy"))
    assert m["backend"] == "python"
    assert same_bits(np.load("p.npy"), fg.sincos_2d(2, 3, 4, backend=DEFAULT))


def test_grid_quiet_prints_nothing_and_writes(in_tmp):
    result = run("-q", "grid", "--height", 2, "--width", 2, "--d-model", 4)
    assert result.exit_code == 0 and result.stdout == "" and result.stderr == ""
    assert same_bits(np.load("grid_2x2x4.npy"), fg.sincos_2d(2, 2, 4, backend=DEFAULT))


def test_grid_replaces_an_existing_file(in_tmp):
    (in_tmp / "g.npy").write_bytes(b"old")
    ok(run("grid", "--height", 2, "--width", 2, "--d-model", 4, "-o", "g.npy"))
    assert same_bits(np.load("g.npy"), fg.sincos_2d(2, 2, 4, backend=DEFAULT))
    assert sorted(os.listdir(in_tmp)) == ["g.npy", "g.npy.json"]


GRID_ERRORS = [
    (["--height", 2, "--width", 2, "--d-model", 10], "divisible by 4"),
    (["--frames", 2, "--height", 2, "--width", 2, "--d-model", 8], "divisible by 6"),
    (["--height", -1, "--width", 2, "--d-model", 8], "'--height'"),
    (["--height", 2, "--width", 0, "--d-model", 8], "'--width'"),
    (["--frames", -3, "--height", 2, "--width", 2, "--d-model", 12], "'--frames'"),
    (["--height", 2, "--width", 2, "--d-model", -4], "'--d-model': must be >= 1"),
    (["--height", 2, "--width", 2, "--d-model", 0], "'--d-model': must be >= 1"),
    (["--height", 2, "--width", 2, "--d-model", 8, "--base", 1], "'--base'"),
    (["--height", 2, "--width", 2, "--d-model", 8, "--order", "vit"], "'--order'"),
    (["--height", 2, "--width", 2, "--d-model", 8, "--dtype", "int8"], "'--dtype'"),
    (["--height", 2, "--width", 2, "--d-model", 8, "-o", "g.txt"], "does not end in .npy"),
    (["--height", 2, "--width", 2, "--d-model", 8, "-o", "missing/g.npy"], "does not exist"),
    # past the library's token limit: first the memory it would take (the limit: test_cli_formats.py)
    (["--height", 1 << 16, "--width", 1 << 16, "--d-model", 4096], "(64.0 TiB) of memory, more than this machine's"),
    (["--height", "two", "--width", 2, "--d-model", 8], "'--height'"),
    (["--width", 2, "--d-model", 8], "'--height'"),
]


@pytest.mark.any_backend
@pytest.mark.parametrize(("args", "says"), GRID_ERRORS)
def test_grid_bad_input_is_one_line_exit_2_and_no_file(in_tmp, args, says):
    line = assert_one_line_error(run("grid", *args))
    assert says in line
    assert os.listdir(in_tmp) == []


# --------------------------------------------------------------------------- fastpe timestep


def test_timestep_steps_default_name_values_and_summary(in_tmp):
    m = ok(run("timestep", "--d-model", 16, "--steps", 10))
    assert m["path"] == "timestep_10x16.npy"
    assert sorted(os.listdir(in_tmp)) == ["timestep_10x16.npy", "timestep_10x16.npy.json"]
    assert (m["dtype"], m["rows"], m["cols"]) == ("float32", "10", "16")
    assert m["what"] == "t 0 .. 9, sin|cos" and m["backend"] == DEFAULT
    expected = fastpe.timestep(np.arange(10.0), 16, backend=DEFAULT)
    assert same_bits(np.load(m["path"]), expected)


def test_timestep_value_list(in_tmp):
    m = ok(run("timestep", "--d-model", 9, "--t=-2.5, 0,0.1,999.75,1e3"))
    assert m["path"] == "timestep_5x9.npy" and m["what"] == "t -2.5 .. 1000, sin|cos"
    expected = fastpe.timestep([-2.5, 0.0, 0.1, 999.75, 1000.0], 9, backend=DEFAULT)
    assert same_bits(np.load(m["path"]), expected)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.uint8])
def test_timestep_from_file(in_tmp, dtype):
    t = np.array([3, 0, 17, 250, 1], dtype=dtype)
    if dtype in (np.float64, np.float32):
        t = t + dtype(0.25)
    np.save("t.npy", t)
    m = ok(run("timestep", "--d-model", 12, "--from", "t.npy", "-o", "e.npy"))
    assert m["rows"] == "5"
    assert same_bits(np.load("e.npy"), fastpe.timestep(t, 12, backend=DEFAULT))
    assert sorted(os.listdir(in_tmp)) == ["e.npy", "e.npy.json", "t.npy"]


TIMESTEP_OPTIONS = [
    (["--flip-sin-to-cos"], {"flip_sin_to_cos": True}),
    (["--shift", 0], {"shift": 0.0}),
    (["--shift", 0.5], {"shift": 0.5}),
    (["--scale", 1000], {"scale": 1000.0}),
    (["--base", 50], {"base": 50.0}),
    (["--dtype", "float64"], {"dtype": "float64"}),
    (["--dtype", "float16"], {"dtype": "float16"}),
    (["--flip-sin-to-cos", "--shift", 0, "--scale", 2.5, "--base", 1000, "--dtype", "FLOAT64"],
     {"flip_sin_to_cos": True, "shift": 0.0, "scale": 2.5, "base": 1000.0, "dtype": "float64"}),
]


@pytest.mark.parametrize(("cli", "kwargs"), TIMESTEP_OPTIONS)
def test_timestep_options_reach_the_library(in_tmp, cli, kwargs):
    t = np.array([0.0, 1.0, 7.5, 400.0, 999.0])
    ok(run("timestep", "--d-model", 10, "--t", "0,1,7.5,400,999", *cli, "-o", "e.npy"))
    got = np.load("e.npy")
    assert same_bits(got, fastpe.timestep(t, 10, backend=DEFAULT, **kwargs))
    assert not same_bits(got, fastpe.timestep(t, 10, backend=DEFAULT))


def test_timestep_summary_names_the_column_order(in_tmp):
    m = ok(run("timestep", "--d-model", 4, "--steps", 3, "--flip-sin-to-cos"))
    assert m["what"] == "t 0 .. 2, cos|sin"


def test_timestep_bfloat16_is_stored_as_uint16_bits(in_tmp):
    m = ok(run("timestep", "--d-model", 8, "--steps", 20, "--dtype", "bfloat16", "-o", "b.npy"))
    assert m["dtype"] == "bfloat16" and m["bits"] == " (as uint16 bits)"
    raw = np.load("b.npy")
    assert raw.dtype == np.uint16
    assert same_bits(raw.view(ml_dtypes.bfloat16), fastpe.timestep(np.arange(20.0), 8, dtype="bfloat16",
                                                                   backend=DEFAULT))


def test_timestep_quiet_prints_nothing_and_writes(in_tmp):
    result = run("--quiet", "timestep", "--d-model", 4, "--steps", 2)
    assert result.exit_code == 0 and result.stdout == "" and result.stderr == ""
    assert same_bits(np.load("timestep_2x4.npy"), fastpe.timestep([0.0, 1.0], 4, backend=DEFAULT))


@pytest.fixture
def inputs(in_tmp):
    """--from files (all bad but one); returns the names present before the command runs."""
    np.save("good.npy", np.arange(3.0))
    np.save("grid2d.npy", np.zeros((2, 3)))
    np.save("empty.npy", np.zeros(0))
    np.save("flags.npy", np.array([True, False]))
    np.save("text.npy", np.array(["1", "2"]))
    np.savez("both.npz", a=np.zeros(3))
    os.rename("both.npz", "archive.npy")
    (in_tmp / "junk.npy").write_bytes(b"not an array")
    return sorted(os.listdir(in_tmp))


TIMESTEP_ERRORS = [
    (["--steps", 3, "--t", "1"], "exactly one of --steps, --t or --from (got --steps and --t)"),
    (["--t", "1", "--from", "good.npy"], "(got --t and --from)"),
    (["--steps", 2, "--t", "1", "--from", "good.npy"], "(got --steps, --t and --from)"),
    ([], "exactly one of --steps, --t or --from"),
    (["--steps", 0], "'--steps'"),
    (["--steps", -5], "'--steps'"),
    (["--t", "1,,2"], "empty item"),
    (["--t", ""], "empty item"),
    (["--t", "1,x"], "'x' is not a number"),
    (["--t", "0,nan"], "'nan' is not finite"),
    (["--t", "inf"], "not finite"),
    (["--t", "5e9"], "t must be in (-2**32, 2**32)"),
    (["--from", "missing.npy"], "does not exist"),
    (["--from", "grid2d.npy"], "1-D array"),
    (["--from", "empty.npy"], "no timesteps"),
    (["--from", "flags.npy"], "real numbers"),
    (["--from", "text.npy"], "real numbers"),
    (["--from", "archive.npy"], ".npz archive"),
    (["--from", "junk.npy"], "does not start with NumPy's magic string"),
    (["--from", "."], "'--from'"),
    (["--steps", 4, "--d-model", 1], "'--d-model': must be >= 2"),
    (["--steps", 4, "--shift", 4], "d_model // 2 - shift must be > 0"),
    (["--steps", 4, "--scale", 0], "scale must be > 0"),
    (["--steps", 4, "--scale", -1], "scale must be > 0"),
    (["--steps", 4, "--base", 0.5], "base must be >= 1"),
    (["--steps", 4, "--base", "nan"], "base must be finite"),
    (["--steps", 4, "--dtype", "float8"], "'--dtype'"),
    (["--steps", 4, "-o", "e.txt"], "does not end in .npy, .npz or .safetensors"),
]


@pytest.mark.any_backend
@pytest.mark.parametrize(("args", "says"), TIMESTEP_ERRORS)
def test_timestep_bad_input_is_one_line_exit_2_and_no_file(inputs, args, says):
    if "--d-model" not in args:
        args = ["--d-model", 8, *args]
    line = assert_one_line_error(run("timestep", *args))
    assert says in line
    assert sorted(os.listdir()) == inputs


# --------------------------------------------------------------------------- both


@pytest.mark.parametrize(("command", "function"), [
    (["grid", "--height", 2, "--width", 2, "--d-model", 4], "fastpe.grid.sincos_2d"),
    (["timestep", "--d-model", 4, "--steps", 3], "fastpe.timestep"),
])
def test_interrupt_or_failure_leaves_no_file_and_keeps_the_old_one(in_tmp, monkeypatch, command, function):
    (in_tmp / "old.npy").write_bytes(b"previous")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(function, interrupted)
    result = run(*command, "-o", "old.npy")
    assert result.exit_code == 130
    monkeypatch.undo()
    monkeypatch.chdir(in_tmp)

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("fastpe._io.writers.NpyWriter.write_data", full_disk)
    line = assert_one_line_error(run(*command, "-o", "old.npy"), code=1)
    assert "could not write old.npy" in line and "No space left" in line
    assert os.listdir(in_tmp) == ["old.npy"] and (in_tmp / "old.npy").read_bytes() == b"previous"


@pytest.mark.any_backend
def test_help_lists_both_commands_and_the_bfloat16_storage():
    listing = run("--help")
    assert listing.exit_code == 0
    commands = listing.stdout.split("Commands:")[1]
    assert re.search(r"^\s+grid\s", commands, re.M) and re.search(r"^\s+timestep\s", commands, re.M)
    for command in ("grid", "timestep"):
        text = " ".join(run(command, "--help").stdout.split())
        assert "stored as its raw bits, dtype uint16" in text
        assert "numpy.load(PATH).view(ml_dtypes.bfloat16)" in text


# --------------------------------------------------------------------------- sizes

#: requests whose array, with the machine's memory set to 1 MiB, cannot be held: refused
#: before anything is allocated (the library is never called) -- (args, shape, dtype name)
TOO_BIG = [
    (["grid", "--height", 256, "--width", 256, "--d-model", 8], "65536 x 8 float32"),
    (["grid", "--height", 256, "--width", 256, "--d-model", 16, "--cls-token", "--dtype", "float16"], "65537 x 16 float16"),
    (["grid", "--frames", 64, "--height", 64, "--width", 64, "--d-model", 6], "262144 x 6 float32"),
    (["timestep", "--d-model", 64, "--steps", 4096], "4096 x 64 float32"),
    (["timestep", "--d-model", 2, "--steps", 2**32, "--dtype", "float64"], "4294967296 x 2 float64"),
]


def _never(*args, **kwargs):  # pragma: no cover - reached only if the size check is missing
    raise AssertionError("the library was called")


@pytest.mark.any_backend
@pytest.mark.parametrize(("args", "array"), TOO_BIG)
def test_an_array_larger_than_memory_is_refused_before_any_work(in_tmp, monkeypatch, args, array):
    from fastpe._io import save as _save

    monkeypatch.setattr(_save, "physical_memory", lambda: 1 << 20)
    for name in ("sincos_2d", "sincos_3d"):
        monkeypatch.setattr(fg, name, _never)
    monkeypatch.setattr(fastpe, "timestep", _never)
    monkeypatch.setattr(np, "arange", _never)  # --steps' own timesteps come after the check too
    line = assert_one_line_error(run(*args))
    assert f"the {array} array needs " in line and "of memory, more than this machine's 1048576 bytes" in line
    assert os.listdir(in_tmp) == []


@pytest.mark.parametrize("args", [["grid", "--height", 4, "--width", 4, "--d-model", 8],
                                  ["timestep", "--d-model", 8, "--steps", 16]])
def test_an_array_larger_than_the_free_space_exits_1_before_any_work(in_tmp, monkeypatch, args):
    import shutil

    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=128 + 16 * 8 * 4 - 1))
    monkeypatch.setattr(fg, "sincos_2d", _never)
    monkeypatch.setattr(fastpe, "timestep", _never)
    line = assert_one_line_error(run(*args), code=1)
    assert "[Errno 28] not enough free space" in line
    needed = int(re.search(r"needs (\d+) bytes", line)[1])  # 640 and the spec beside the file
    assert os.listdir(in_tmp) == []
    monkeypatch.undo()
    monkeypatch.chdir(in_tmp)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=needed))
    assert run(*args).exit_code == 0  # exactly enough is enough
    assert sum(os.path.getsize(name) for name in os.listdir(in_tmp)) == needed
    assert os.path.getsize(next(name for name in os.listdir(in_tmp) if name.endswith(".npy"))) == 128 + 16 * 8 * 4


@pytest.mark.any_backend
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_timestep_from_a_pipe_exits_2_instead_of_waiting_for_it(in_tmp):
    os.mkfifo("t.npy")
    line = assert_one_line_error(run("timestep", "--d-model", 4, "--from", "t.npy"))
    assert line == "Error: Invalid value for '--from': 't.npy' is not a regular file"
    assert os.listdir(in_tmp) == ["t.npy"]


def test_running_out_of_memory_anyway_is_one_line_exit_1(in_tmp, monkeypatch):
    def no_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 16.0 GiB for an array with shape (1048576, 4096)")

    monkeypatch.setattr(fg, "sincos_2d", no_memory)
    line = assert_one_line_error(run("grid", "--height", 2, "--width", 2, "--d-model", 4), code=1)
    assert line == "Error: not enough memory: Unable to allocate 16.0 GiB for an array with shape (1048576, 4096)"
    assert os.listdir(in_tmp) == []


def test_timestep_from_a_file_of_nan_names_the_option_and_the_file(in_tmp):
    np.save("t.npy", np.array([1.0, np.nan]))
    line = assert_one_line_error(run("timestep", "--d-model", 4, "--from", "t.npy"))
    assert "'--from'" in line and "'t.npy'" in line and "t must be finite" in line
    assert sorted(os.listdir(in_tmp)) == ["t.npy"]
