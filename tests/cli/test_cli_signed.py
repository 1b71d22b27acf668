"""``fastpe table --start/--step`` (signed and backward runs) and ``fastpe sandwich``: the
files hold exactly the library's values, bad values are one line and exit status 2 with
nothing written."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

import fastpe
from fastpe.cli import main


def _spec(path):
    with open(path) as f:
        return json.load(f)


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize("start, step, n", [(2, -1, 5), (-7, 1, 9), (10, -1, 21), (2**32 - 1, -3, 4)])
def test_table_start_step(in_tmp, start, step, n):
    r = _run("table", "--d-model", 8, "--max-len", n, "--start", start, "--step", step, "-o", "t.npy")
    assert r.exit_code == 0, r.output
    got = np.load("t.npy")
    assert np.array_equal(got, fastpe.table(8, n, start=start, step=step))
    spec = _spec("t.npy.json")
    assert spec["function"] == "table" and spec["params"].get("start", 0) == start and spec["params"].get("step", 1) == step
    # the recorded spec re-creates the same bits through the library
    params = dict(spec["params"])
    assert np.array_equal(fastpe.table(**params), got)


def test_table_conformer_run_as_the_helper(in_tmp):
    r = _run("table", "--d-model", 16, "--max-len", 2 * 30 - 1, "--start", 29, "--step", -1, "--dtype", "float16",
             "-o", "c.npz")
    assert r.exit_code == 0, r.output
    with np.load("c.npz") as z:
        assert np.array_equal(z["table"], fastpe.conformer_embedding(30, 16, dtype="float16"))


def test_table_default_run_unchanged(in_tmp):
    r = _run("table", "--d-model", 6, "--max-len", 7, "-o", "p.npy")
    assert r.exit_code == 0, r.output
    assert "start" not in _spec("p.npy.json")["params"]


@pytest.mark.parametrize("args, text", [(["--step", 0], "step"), (["--start", -(2**32)], "start"),
                                        (["--start", 2**32 - 2, "--step", 1, "--max-len", 5], "last position"),
                                        (["--start", "x"], "--start")])
def test_table_bad_start_step(in_tmp, args, text):
    r = _run("table", "--d-model", 4, "--max-len", 3, *args, "-o", "bad.npy")
    assert r.exit_code == 2 and text in r.output
    assert not os.path.exists("bad.npy")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("suffix, dtype", [(".npy", "float32"), (".npz", "float64"), (".npy", "float16")])
def test_sandwich(in_tmp, causal, suffix, dtype):
    args = ["sandwich", "--heads", 3, "--q-len", 4, "--k-len", 6, "--hidden-size", 8, "--dtype", dtype]
    r = _run(*args, *(["--causal"] if causal else []), "-o", "s" + suffix)
    assert r.exit_code == 0, r.output
    if suffix == ".npy":
        got = np.load("s.npy")
    else:
        with np.load("s.npz") as z:
            got = z["bias"]
    want = fastpe.relative.sandwich_bias(3, 4, 6, hidden_size=8, bidirectional=not causal, dtype=dtype)
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_sandwich_default_name_and_spec(in_tmp):
    r = _run("sandwich", "--heads", 2, "--q-len", 5, "--hidden-size", 4)
    assert r.exit_code == 0, r.output
    spec = _spec("sandwich_2x5x5.npy.json")
    assert spec["function"] == "relative.sandwich_bias"
    assert np.array_equal(np.load("sandwich_2x5x5.npy"), fastpe.relative.sandwich_bias(**spec["params"]))


@pytest.mark.parametrize("args, text", [(["--hidden-size", 7], "even"), (["--hidden-size", 0], "hidden"),
                                        (["--heads", 0, "--hidden-size", 8], "heads"),
                                        (["--hidden-size", 8, "--k-len", 0], "k-len")])
def test_sandwich_bad_input(in_tmp, args, text):
    base = {"--heads": 2, "--q-len": 3}
    argv = ["sandwich"]
    for k, v in base.items():
        if k not in args:
            argv += [k, v]
    r = _run(*argv, *args, "-o", "bad.npy")
    assert r.exit_code == 2 and text in r.output, r.output
    assert not os.path.exists("bad.npy")
