"""``fastpe alibi`` and ``fastpe t5-buckets`` through CliRunner.

Every written array is compared bit for bit with :func:`fastpe.alibi.bias` /
:func:`fastpe.relative.t5_bucket_matrix` of the same arguments, and each option is shown to
reach the library.  Sizes stay small: the suite may run on the python backend.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from fastpe import alibi, relative
from conftest import DEFAULT
from support.cli import assert_one_line_error, ok, run, same_bits


# --------------------------------------------------------------------------- fastpe alibi


def test_alibi_default_name_values_and_summary(in_tmp):
    m = ok(run("alibi", "--heads", 12, "--q-len", 5))
    assert m["path"] == "alibi_symmetric_12x5x5.npy" and sorted(os.listdir(in_tmp)) == [m["path"], m["path"] + ".json"]
    assert (m["dtype"], m["shape"], m["bits"]) == ("float32", "12, 5, 5", None)
    assert m["what"] == "ALiBi symmetric, max_bias 8" and m["backend"] == DEFAULT
    assert same_bits(np.load(m["path"]), alibi.bias(12, 5, backend=DEFAULT))


ALIBI_OPTIONS = [
    # (CLI options, library keywords); each differs from the default output
    (["--k-len", 9], {"k_len": 9}),
    (["--form", "causal"], {"form": "causal"}),
    (["--form", "MPT", "--k-len", 3], {"form": "mpt", "k_len": 3}),
    (["--form", "bloom"], {"form": "bloom"}),
    (["--max-bias", 5.5], {"max_bias": 5.5}),
    (["--max-bias", 2.0**-16], {"max_bias": 2.0**-16}),
    (["--dtype", "float64"], {"dtype": "float64"}),
    (["--dtype", "float16"], {"dtype": "float16"}),
    (["--dtype", "float16", "--form", "causal", "--k-len", 3000, "--max-bias", 7.3],
     {"dtype": "float16", "form": "causal", "k_len": 3000, "max_bias": 7.3}),
    (["--form", "causal", "--k-len", 8, "--max-bias", 3, "--dtype", "float64"],
     {"form": "causal", "k_len": 8, "max_bias": 3.0, "dtype": "float64"}),
]


@pytest.mark.parametrize(("cli", "kwargs"), ALIBI_OPTIONS)
def test_alibi_options_reach_the_library(in_tmp, cli, kwargs):
    ok(run("alibi", "--heads", 6, "--q-len", 4, *cli, "-o", "a.npy"))
    kwargs = dict(kwargs)
    k_len = kwargs.pop("k_len", None)
    got = np.load("a.npy")
    assert same_bits(got, alibi.bias(6, 4, k_len, backend=DEFAULT, **kwargs))
    plain = alibi.bias(6, 4, backend=DEFAULT)
    assert not same_bits(got, plain)


def test_alibi_bfloat16_is_stored_as_uint16_bits(in_tmp):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    m = ok(run("alibi", "--heads", 5, "--q-len", 3, "--k-len", 6, "--form", "causal", "--dtype", "bfloat16"))
    assert m["path"] == "alibi_causal_5x3x6.npy" and m["bits"] == " (as uint16 bits)"
    raw = np.load(m["path"])
    assert raw.dtype == np.uint16
    assert same_bits(raw.view(ml_dtypes.bfloat16), alibi.bias(5, 3, 6, form="causal", dtype="bfloat16", backend=DEFAULT))


def test_alibi_backend_option_and_quiet(in_tmp):
    m = ok(run("alibi", "--heads", 3, "--q-len", 4, "--backend", "python", "-o", "p.npy"))
    assert m["backend"] == "python"
    assert same_bits(np.load("p.npy"), alibi.bias(3, 4, backend=DEFAULT))
    result = run("-q", "alibi", "--heads", 3, "--q-len", 2)
    assert result.exit_code == 0 and result.stdout == "" and result.stderr == ""
    assert same_bits(np.load("alibi_symmetric_3x2x2.npy"), alibi.bias(3, 2, backend=DEFAULT))


ALIBI_ERRORS = [
    (["--heads", 0, "--q-len", 4], "'--heads'"),
    (["--heads", 70000, "--q-len", 4], "must be <= 65536"),
    (["--heads", "two", "--q-len", 4], "'--heads'"),
    (["--heads", 4], "'--q-len'"),
    (["--heads", 4, "--q-len", 0], "'--q-len'"),
    (["--heads", 4, "--q-len", 5, "--k-len", -1], "'--k-len'"),
    (["--heads", 4, "--q-len", 5, "--k-len", 3], "k_len must be >= q_len for form 'symmetric'"),
    (["--heads", 4, "--q-len", 5, "--k-len", 3, "--form", "causal"], "k_len must be >= q_len for form 'causal'"),
    (["--heads", 4, "--q-len", 5, "--form", "t5"], "'--form'"),
    (["--heads", 4, "--q-len", 5, "--max-bias", 0], "'--max-bias'"),
    (["--heads", 4, "--q-len", 5, "--max-bias", "nan"], "'--max-bias'"),
    (["--heads", 4, "--q-len", 5, "--max-bias", 100], "must be <= 64"),
    (["--heads", 4, "--q-len", 5, "--max-bias", "1e-300"], "must be >= 2**-16"),
    (["--heads", 4, "--q-len", 5, "--max-bias", "1e400"], "'--max-bias'"),
    (["--heads", 4, "--q-len", 5, "--dtype", "int8"], "'--dtype'"),
    (["--heads", 4, "--q-len", 5, "-o", "a.txt"], "does not end in .npy"),
    (["--heads", 4, "--q-len", 5, "-o", "missing/a.npy"], "does not exist"),
    # past the library's limit: first the memory it would take (test_cli_formats.py has the limit itself)
    (["--heads", 1024, "--q-len", 1 << 20, "--k-len", 1 << 21], "(8.0 PiB) of memory, more than this machine's"),
]


@pytest.mark.any_backend
@pytest.mark.parametrize(("args", "says"), ALIBI_ERRORS)
def test_alibi_bad_input_is_one_line_exit_2_and_no_file(in_tmp, args, says):
    line = assert_one_line_error(run("alibi", *args))
    assert says in line
    assert os.listdir(in_tmp) == []


def test_alibi_error_keeps_an_existing_file(in_tmp):
    (in_tmp / "a.npy").write_bytes(b"old")
    assert_one_line_error(run("alibi", "--heads", 4, "--q-len", 5, "--k-len", 2, "-o", "a.npy"))
    assert (in_tmp / "a.npy").read_bytes() == b"old" and os.listdir(in_tmp) == ["a.npy"]
    ok(run("alibi", "--heads", 4, "--q-len", 5, "-o", "a.npy"))
    assert same_bits(np.load("a.npy"), alibi.bias(4, 5, backend=DEFAULT))
    assert sorted(os.listdir(in_tmp)) == ["a.npy", "a.npy.json"]


# --------------------------------------------------------------------------- fastpe t5-buckets


def test_t5_default_name_values_and_summary(in_tmp):
    m = ok(run("t5-buckets", "--q-len", 6))
    assert m["path"] == "t5_buckets_6x6.npy" and sorted(os.listdir(in_tmp)) == [m["path"], m["path"] + ".json"]
    assert (m["dtype"], m["shape"]) == ("int64", "6, 6")
    assert m["what"] == "T5 buckets bidirectional, num_buckets 32, max_distance 128, offset 0"
    assert same_bits(np.load(m["path"]), relative.t5_bucket_matrix(6, backend=DEFAULT))


T5_OPTIONS = [
    (["--k-len", 9], {"k_len": 9}),
    (["--unidirectional"], {"bidirectional": False}),
    (["--num-buckets", 16], {"num_buckets": 16}),
    (["--max-distance", 9], {"max_distance": 9}),
    (["--offset", 20, "--k-len", 30, "--unidirectional"], {"offset": 20, "k_len": 30, "bidirectional": False}),
    (["--num-buckets", 36, "--max-distance", 50, "--unidirectional", "--k-len", 40, "--offset", 35],
     {"num_buckets": 36, "max_distance": 50, "bidirectional": False, "k_len": 40, "offset": 35}),
]


@pytest.mark.parametrize(("cli", "kwargs"), T5_OPTIONS)
def test_t5_options_reach_the_library(in_tmp, cli, kwargs):
    ok(run("t5-buckets", "--q-len", 20, *cli, "-o", "t.npy"))
    kwargs = dict(kwargs)
    k_len = kwargs.pop("k_len", None)
    got = np.load("t.npy")
    assert same_bits(got, relative.t5_bucket_matrix(20, k_len, backend=DEFAULT, **kwargs))
    assert not same_bits(got, relative.t5_bucket_matrix(20, backend=DEFAULT))


@pytest.mark.any_backend
def test_t5_summary_and_backend(in_tmp):
    m = ok(run("t5-buckets", "--q-len", 1, "--k-len", 7, "--unidirectional", "--offset", 6,
               "--backend", "python", "-o", "d.npy"))
    assert m["what"] == "T5 buckets unidirectional, num_buckets 32, max_distance 128, offset 6"
    assert m["backend"] == "python" and m["shape"] == "1, 7"
    assert np.load("d.npy").tolist() == [[6, 5, 4, 3, 2, 1, 0]]


T5_ERRORS = [
    (["--q-len", 0], "'--q-len'"),
    ([], "'--q-len'"),
    (["--q-len", 4, "--k-len", 0], "'--k-len'"),
    (["--q-len", 4, "--num-buckets", 3], "num_buckets must be >= 4"),
    (["--q-len", 4, "--num-buckets", 1, "--unidirectional"], "'--num-buckets'"),
    (["--q-len", 4, "--max-distance", 8], "max_distance must be greater than max_exact = 8"),
    (["--q-len", 4, "--offset", -1], "'--offset'"),
    (["--q-len", 4, "--num-buckets", 5000], "'--num-buckets'"),
    (["--q-len", 4, "-o", "t.txt"], "does not end in .npy, .npz or .safetensors"),
    (["--q-len", 1 << 21, "--k-len", 1 << 20], "(16.0 TiB) of memory, more than this machine's"),
]


@pytest.mark.any_backend
@pytest.mark.parametrize(("args", "says"), T5_ERRORS)
def test_t5_bad_input_is_one_line_exit_2_and_no_file(in_tmp, args, says):
    line = assert_one_line_error(run("t5-buckets", *args))
    assert says in line
    assert os.listdir(in_tmp) == []


@pytest.mark.any_backend
def test_help_lists_both_commands():
    result = run("--help")
    assert result.exit_code == 0
    assert "alibi" in result.stdout and "t5-buckets" in result.stdout


def _never(*args, **kwargs):  # pragma: no cover - reached only if the size check is missing
    raise AssertionError("the library was called")


@pytest.mark.any_backend
@pytest.mark.parametrize(("args", "array"), [
    (["alibi", "--heads", 32, "--q-len", 4096, "--k-len", 8192], "32 x 4096 x 8192 float32"),
    (["alibi", "--heads", 8, "--q-len", 4096, "--dtype", "float16"], "8 x 4096 x 4096 float16"),
    (["t5-buckets", "--q-len", 4096, "--k-len", 8192], "4096 x 8192 int64"),
])
def test_an_array_larger_than_memory_is_refused_before_any_work(in_tmp, monkeypatch, args, array):
    from fastpe._io import save as _save

    monkeypatch.setattr(_save, "physical_memory", lambda: 1 << 20)
    monkeypatch.setattr(alibi, "bias", _never)
    monkeypatch.setattr(relative, "t5_bucket_matrix", _never)
    line = assert_one_line_error(run(*args))
    assert f"the {array} array needs " in line and "of memory, more than this machine's 1048576 bytes" in line
    assert os.listdir(in_tmp) == []
