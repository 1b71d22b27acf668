"""fastpe.cli.options: the shared options' validating callbacks, one by one."""

from __future__ import annotations

import math
import os

import click
import numpy as np
import pytest
from click.testing import CliRunner

from fastpe._backends.registry import BACKENDS
from fastpe.cli import options
from conftest import AVAILABLE
from support.cli import make_unavailable

#: every backend it calls is named, or it calls none: the first run of make test decides it
#: (tests/conftest.py deselects it in the default-only runs)
pytestmark = pytest.mark.any_backend


def call(handler, value):
    return handler(None, None, value)


# ---------------------------------------------------------------- numbers


@pytest.mark.parametrize("value", [1, 2, 63, 512, 65536, np.int64(8)])
def test_d_model_accepts(value):
    assert call(options.d_model_handler, value) == int(value)
    assert type(call(options.d_model_handler, value)) is int


@pytest.mark.parametrize(
    "value, match",
    [(0, "must be >= 1, got 0"), (-5, "must be >= 1"), (65537, "must be <= 65536"), (True, "integer"), (2.0, "integer")],
)
def test_d_model_refuses(value, match):
    with pytest.raises(click.BadParameter, match=match) as info:
        call(options.d_model_handler, value)
    assert not info.value.message.startswith("d_model")  # click names the option itself


def test_d_model_handles_multiple_values_and_none():
    assert call(options.d_model_handler, (8, 63)) == (8, 63)
    assert call(options.d_model_handler, ()) == ()
    assert call(options.d_model_handler, None) is None
    with pytest.raises(click.BadParameter):
        call(options.d_model_handler, (8, 0))


@pytest.mark.parametrize("value", [1, 2048, 2**32])
def test_max_len_accepts(value):
    assert call(options.max_len_handler, value) == value


@pytest.mark.parametrize("value, match", [(0, "must be >= 1"), (-1, "must be >= 1"), (2**32 + 1, "must be <=")])
def test_max_len_refuses(value, match):
    with pytest.raises(click.BadParameter, match=match):
        call(options.max_len_handler, value)


@pytest.mark.parametrize("value", [1.0000001, 2.0, 10000.0, 1e300])
def test_base_accepts(value):
    assert call(options.base_handler, value) == value


@pytest.mark.parametrize(
    "value, match",
    [(1.0, "greater than 1"), (0.5, "greater than 1"), (-3.0, "greater than 1"), (math.nan, "finite"),
     (math.inf, "finite"), (-math.inf, "finite")],
)
def test_base_refuses(value, match):
    with pytest.raises(click.BadParameter, match=match):
        call(options.base_handler, value)


# ---------------------------------------------------------------- backend


def test_backend_accepts_available_ones_and_none():
    assert call(options.backend_handler, None) is None
    assert call(options.backend_handler, ()) == ()
    for name in AVAILABLE:
        assert call(options.backend_handler, name) == name
        assert call(options.backend_handler, name.upper()) == name
    available = tuple(AVAILABLE)
    assert call(options.backend_handler, available) == available


def test_backend_refuses_unknown():
    with pytest.raises(click.BadParameter, match="not a fastpe backend"):
        call(options.backend_handler, "tensorflow")


@pytest.mark.parametrize("name", BACKENDS)
def test_backend_refuses_unavailable_and_says_why(monkeypatch, name):
    make_unavailable(monkeypatch, name)
    with pytest.raises(click.BadParameter, match=f"'{name}' is not available here: ImportError: simulated"):
        call(options.backend_handler, name)


# ---------------------------------------------------------------- output path


def test_output_accepts_new_and_existing_files(tmp_path, monkeypatch):
    assert options.check_output_path(str(tmp_path / "pe.npy")) == str(tmp_path / "pe.npy")
    assert options.check_output_path(str(tmp_path / "PE.NPY"))
    (tmp_path / "old.npy").write_bytes(b"x")
    assert options.check_output_path(str(tmp_path / "old.npy"))
    (tmp_path / "link.npy").symlink_to(tmp_path / "old.npy")
    assert options.check_output_path(str(tmp_path / "link.npy"))
    monkeypatch.chdir(tmp_path)
    assert options.check_output_path("pe.npy") == "pe.npy"  # relative: the current directory
    assert call(options.output_handler, None) is None
    assert call(options.output_handler, "pe.npy") == "pe.npy"


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda d: "", "empty"),
        (lambda d: str(d), "names a directory"),
        (lambda d: str(d / "sub.npy") + os.sep, "names a directory"),
        (lambda d: str(d / "pe.txt"), r"does not end in \.npy"),
        (lambda d: str(d / "pe.npy.gz"), r"does not end in \.npy"),
        (lambda d: str(d / "pe"), r"does not end in \.npy"),
        (lambda d: str(d / ".npy"), r"has no file name before \.npy"),
        (lambda d: str(d / "missing" / "pe.npy"), "does not exist"),
        (lambda d: str(d / "file.npy" / "pe.npy"), "does not exist"),
        (lambda d: str(d / "dir.npy"), "names a directory"),
        (lambda d: str(d / "fifo.npy"), "not a regular file"),
    ],
)
def test_output_refuses(tmp_path, make, match):
    (tmp_path / "file.npy").write_bytes(b"x")
    (tmp_path / "dir.npy").mkdir()
    os.mkfifo(tmp_path / "fifo.npy")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(click.BadParameter, match=match):
        options.check_output_path(make(tmp_path))
    assert sorted(os.listdir(tmp_path)) == before


def test_output_refuses_a_device():
    with pytest.raises(click.BadParameter):
        options.check_output_path("/dev/null")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_output_refuses_an_unwritable_directory(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(click.BadParameter, match="not writable"):
        options.check_output_path(str(locked / "pe.npy"))


# ---------------------------------------------------------------- through click


@click.command()
@options.d_model_opt
@options.max_len_opt
@options.base_opt
@options.backend_opt
@options.output_opt
def probe(d_model, max_len, base, backend, output):
    click.echo(repr((d_model, max_len, base, backend, output)))


def test_options_parse_and_default():
    result = CliRunner().invoke(probe, ["--d-model", "8"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == repr((8, 2048, 10000.0, None, None))


@pytest.mark.parametrize(
    "args, option",
    [
        (["--d-model", "0"], "--d-model"),
        (["--d-model", "x"], "--d-model"),
        (["--d-model", "8", "--max-len", "-1"], "--max-len"),
        (["--d-model", "8", "--base", "nan"], "--base"),
        (["--d-model", "8", "--backend", "gpu"], "--backend"),
        (["--d-model", "8", "-o", "out.txt"], "--output"),
    ],
)
def test_bad_options_exit_2_naming_the_option(args, option):
    result = CliRunner().invoke(probe, args)
    assert result.exit_code == 2
    assert option in result.stderr


def test_library_errors_become_input_errors():
    for exc in (ValueError("base must be finite"), TypeError("d_model must be an integer")):
        with pytest.raises(options.InputError) as info:
            with options.library_errors():
                raise exc
        assert info.value.exit_code == 2 and info.value.message == str(exc)
    with pytest.raises(RuntimeError):  # anything else is not the user's fault
        with options.library_errors():
            raise RuntimeError("bug")
