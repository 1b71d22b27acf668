"""``fastpe deberta`` and ``fastpe shaw`` through CliRunner.

Every written array is compared bit for bit with :func:`fastpe.relative.deberta_bucket_matrix`
/ :func:`fastpe.relative.shaw_positions` of the same arguments, and each option is shown to
reach the library.  Sizes stay small: the suite may run on the python backend.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from fastpe import relative
from conftest import DEFAULT
from support.cli import assert_one_line_error, ok, run, same_bits


# --------------------------------------------------------------------------- fastpe deberta


def test_deberta_default_name_values_and_summary(in_tmp):
    m = ok(run("deberta", "--q-len", 6, "--k-len", 200))
    assert m["path"] == "deberta_6x200.npy" and sorted(os.listdir(in_tmp)) == [m["path"], m["path"] + ".json"]
    assert (m["dtype"], m["shape"]) == ("int64", "6, 200")
    assert m["what"] == "DeBERTa buckets, bucket_size 256, max_position 512" and m["backend"] == DEFAULT
    assert same_bits(np.load(m["path"]), relative.deberta_bucket_matrix(6, 200, backend=DEFAULT))


@pytest.mark.parametrize(("cli", "kwargs"), [
    (["--bucket-size", 16], {"bucket_size": 16}),
    (["--bucket-size", 17, "--max-position", 11], {"bucket_size": 17, "max_position": 11}),
    (["--max-position", 200], {"max_position": 200}),
])
def test_deberta_options_reach_the_library(in_tmp, cli, kwargs):
    ok(run("deberta", "--q-len", 300, *cli, "-o", "d.npy"))
    got = np.load("d.npy")
    assert same_bits(got, relative.deberta_bucket_matrix(300, backend=DEFAULT, **kwargs))
    assert not same_bits(got, relative.deberta_bucket_matrix(300, backend=DEFAULT))


@pytest.mark.any_backend
def test_deberta_unbucketed_and_backend(in_tmp):
    m = ok(run("deberta", "--q-len", 2, "--k-len", 4, "--bucket-size", 0, "--backend", "python", "-o", "r.npz"))
    assert m["what"] == "DeBERTa relative positions, unbucketed" and m["backend"] == "python"
    with np.load("r.npz") as f:
        assert f["positions"].tolist() == [[0, -1, -2, -3], [1, 0, -1, -2]]


DEBERTA_ERRORS = [
    ([], "'--q-len'"),
    (["--q-len", 0], "'--q-len'"),
    (["--q-len", 4, "--k-len", 0], "'--k-len'"),
    (["--q-len", 4, "--bucket-size", 1], "bucket_size must be >= 2"),
    (["--q-len", 4, "--max-position", 100], "max_position must be >= bucket_size // 2 + 2 = 130"),
    (["--q-len", 4, "-o", "t.txt"], "does not end in .npy, .npz or .safetensors"),
    (["--q-len", 1 << 21, "--k-len", 1 << 20], "(16.0 TiB) of memory, more than this machine's"),
]


@pytest.mark.any_backend
@pytest.mark.parametrize(("args", "says"), DEBERTA_ERRORS)
def test_deberta_bad_input_is_one_line_exit_2_and_no_file(in_tmp, args, says):
    line = assert_one_line_error(run("deberta", *args))
    assert says in line
    assert os.listdir(in_tmp) == []


# ------------------------------------------------------------------------------ fastpe shaw


def test_shaw_default_name_values_and_summary(in_tmp):
    m = ok(run("shaw", "--q-len", 3, "--k-len", 5, "--max-relative-position", 2))
    assert m["path"] == "shaw_3x5.npy" and sorted(os.listdir(in_tmp)) == [m["path"], m["path"] + ".json"]
    assert (m["dtype"], m["shape"]) == ("int32", "3, 5")
    assert m["what"] == "Shaw clipped positions, max_relative_position 2"
    assert np.load(m["path"]).tolist() == [[0, 1, 2, 3, 4], [0, 0, 1, 2, 3], [0, 0, 0, 1, 2]]


def test_shaw_cache_row(in_tmp):
    m = ok(run("shaw", "--q-len", 1, "--k-len", 6, "--max-relative-position", 3, "--cache", "-o", "c.safetensors"))
    assert m["shape"] == "1, 6" and m["what"].endswith(", cache row")
    ok(run("shaw", "--q-len", 1, "--k-len", 6, "--max-relative-position", 3, "--cache", "-o", "c.npy"))
    assert same_bits(np.load("c.npy"), relative.shaw_positions(1, 6, max_relative_position=3, cache=True,
                                                               backend=DEFAULT))


SHAW_ERRORS = [
    (["--q-len", 4], "'--max-relative-position'"),
    (["--q-len", 4, "--max-relative-position", -1], "'--max-relative-position'"),
    (["--q-len", 5, "--k-len", 3, "--max-relative-position", 2], "q_len must be <= k_len"),
    (["--q-len", 4, "--max-relative-position", 2**31], "past int32"),
]


@pytest.mark.any_backend
@pytest.mark.parametrize(("args", "says"), SHAW_ERRORS)
def test_shaw_bad_input_is_one_line_exit_2_and_no_file(in_tmp, args, says):
    line = assert_one_line_error(run("shaw", *args))
    assert says in line
    assert os.listdir(in_tmp) == []


@pytest.mark.any_backend
def test_help_lists_both_commands():
    result = run("--help")
    assert result.exit_code == 0
    assert "deberta" in result.stdout and "shaw" in result.stdout
