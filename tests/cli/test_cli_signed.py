"""``fastpe table --start/--step`` (signed and backward runs, streamed, re-run from their
spec) and ``fastpe sandwich``: the files hold exactly the library's values, bad values and
damaged or stale specs are one line and exit status 2 with nothing written."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
from click.testing import CliRunner

import fastpe
from fastpe import _dtypes, sinusoid as _api
from fastpe._dtypes import DTYPES
from fastpe._io import save as _save
from fastpe._io.writers import WRITERS
from fastpe.cli import main
from conftest import DEFAULT
from support.cli import assert_one_line_error, listing, read_table, run, same_bits


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


@pytest.mark.any_backend
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


@pytest.mark.any_backend
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


# ---------------------------------------------------------------- signed runs: streamed, and re-run from their spec

FORMATS = tuple(WRITERS)
#: (start, step, max_len): below 0, backwards to 0, backwards through 0, all negative with a stride
SIGNED_RUNS = [(-5, 1, 29), (28, -1, 29), (14, -1, 29), (-3, -2, 29)]
RUN_SUMMARY = re.compile(r"wrote (?P<path>\S+): \w+( \(as uint16 bits\))? \((?P<rows>\d+), (?P<cols>\d+)\), "
                         r"positions (?P<start>-?\d+), step (?P<step>-?\d+), [\d.]+ (B|KiB|MiB), backend \w+, "
                         r"[\d.]+ ms compute \+ [\d.]+ ms write")


def _chunk_mb(rows: int, d_model: int, dtype: str) -> str:
    """A --chunk-mb holding exactly ``rows`` rows of a signed or backward run."""
    return repr(_save._chunk_bytes(rows, d_model, _dtypes.resolve(dtype), True) / (1 << 20))


@pytest.mark.parametrize("start, step, n", SIGNED_RUNS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_signed_run_from_its_spec_recreates_the_same_bits(in_tmp, fmt, dtype, start, step, n):
    r = run("table", "--d-model", 6, "--max-len", n, "--start", start, "--step", step, "--dtype", dtype,
            "--chunk-mb", _chunk_mb(5, 6, dtype), "-o", f"a{fmt}")
    assert r.exit_code == 0, r.output
    line = RUN_SUMMARY.fullmatch(r.stdout.strip())
    assert line and (line["rows"], line["start"], line["step"]) == (str(n), str(start), str(step)), r.stdout
    want = fastpe.table(6, n, start=start, step=step, dtype=dtype, backend=DEFAULT)
    assert same_bits(read_table(f"a{fmt}", dtype), want)
    spec = fastpe.load_spec(f"a{fmt}")
    assert (spec["params"].get("start", 0), spec["params"].get("step", 1)) == (start, step)
    sources = [f"a{fmt}"] + (["a.npy.json"] if fmt == ".npy" else [])
    for source in sources:  # the file itself, and a .npy's sidecar named
        for again in FORMATS:
            r = run("table", "--from-spec", source, "-o", f"b{again}")
            assert r.exit_code == 0, r.output
            assert same_bits(read_table(f"b{again}", dtype), want), (source, again)
            assert fastpe.load_spec(f"b{again}") == spec


def test_a_signed_run_is_streamed(in_tmp, monkeypatch):
    """Chunk by chunk, never the whole table in memory: fastpe.table is not called, each
    chunk fills at most its rows, and a table larger than memory is written when its chunk fits."""
    n, d, rows = 101, 8, 9
    want = fastpe.table(d, n, start=50, step=-1, backend=DEFAULT)
    calls = []
    real = _api.fill_config

    def recording(module, config, positions, start, out):
        calls.append((None if positions is None else (int(positions[0]), len(positions)), out.shape[0]))
        return real(module, config, positions, start, out)

    def whole(*args, **kwargs):
        raise AssertionError("fastpe table computed the whole table")

    monkeypatch.setattr(_api, "fill_config", recording)
    monkeypatch.setattr(_api, "table", whole)
    monkeypatch.setattr(fastpe, "table", whole)
    monkeypatch.setattr(_save, "physical_memory", lambda: n * d * 4 // 2)  # half the table
    r = run("table", "--d-model", d, "--max-len", n, "--start", 50, "--step", -1, "--chunk-mb",
            _chunk_mb(rows, d, "float32"), "-o", "s.npy")
    assert r.exit_code == 0, r.output
    assert calls == [((50 - r0, min(rows, n - r0)), min(rows, n - r0)) for r0 in range(0, n, rows)]
    assert same_bits(np.load("s.npy"), want)


def test_from_spec_takes_start_and_step_from_the_command_line_over_the_spec(in_tmp):
    assert run("table", "--d-model", 4, "--max-len", 9, "--start", 4, "--step", -1, "-o", "a.npz").exit_code == 0
    r = run("table", "--from-spec", "a.npz", "--start", -2, "-o", "b.npz")  # the spec's step stays
    assert r.exit_code == 0, r.output
    assert same_bits(read_table("b.npz"), fastpe.table(4, 9, start=-2, step=-1, backend=DEFAULT))
    assert fastpe.load_spec("b.npz")["params"] == {**fastpe.load_spec("a.npz")["params"], "start": -2}
    r = run("table", "--from-spec", "a.npz", "--start", 0, "--step", 1, "-o", "c.npy")  # an ordinary table again
    assert r.exit_code == 0, r.output
    assert same_bits(np.load("c.npy"), fastpe.table(4, 9, backend=DEFAULT))
    assert "start" not in _spec("c.npy.json")["params"] and "step" not in _spec("c.npy.json")["params"]
    r = run("table", "--from-spec", "a.npz", "--max-len", 6, "-o", "d.npy")  # 4 .. -1
    assert r.exit_code == 0, r.output
    assert same_bits(np.load("d.npy"), fastpe.table(4, 6, start=4, step=-1, backend=DEFAULT))


@pytest.mark.parametrize("change, text", [
    ({"step": 0}, "params: step must be a non-zero integer, got 0"),
    ({"step": "x"}, "params: step must be an integer, got str"),
    ({"start": 1.5}, "params: start must be an integer, got float"),
    ({"start": True}, "params: start must be an integer, got bool"),
    ({"start": None}, "params: start must be an integer, got NoneType"),
    ({"start": -(2**32)}, f"params: start must be in (-2**32, 2**32), got {-(2**32)}"),
    ({"max_len": 2**31}, "params: the last position, start + (max_len - 1) * step must be in (-2**32, 2**32)"),
    ({"steps": -1}, "unknown params 'steps'"),
])
@pytest.mark.parametrize("source", ["a.npy", "a.npy.json"])
def test_a_damaged_start_or_step_is_one_line_exit_2(in_tmp, change, text, source):
    assert run("table", "--d-model", 4, "--max-len", 5, "--start", -3, "--step", -2, "-o", "a.npy").exit_code == 0
    spec = _spec("a.npy.json")
    spec["params"].update(change)
    with open("a.npy.json", "w") as f:
        json.dump(spec, f)
    line = assert_one_line_error(run("table", "--from-spec", source, "-o", "again.npy"))
    assert "--from-spec" in line and "a.npy.json: " + text in line, line
    assert listing() == ["a.npy", "a.npy.json"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_stale_signed_spec_is_one_line_exit_2(in_tmp, fmt):
    """A file written again after fastpe wrote it (here with fewer rows) under its spec."""
    assert run("table", "--d-model", 4, "--max-len", 7, "--start", 3, "--step", -1, "-o", f"a{fmt}").exit_code == 0
    spec_text = json.dumps(fastpe.load_spec(f"a{fmt}"))
    rows = read_table(f"a{fmt}")[:5]
    if fmt == ".npy":
        np.save("a.npy", rows)
    elif fmt == ".npz":
        np.savez("a.npz", table=rows, spec=np.array(spec_text))
    else:
        from safetensors.numpy import save_file

        save_file({"table": rows}, "a.safetensors", metadata={"spec": spec_text})
    line = assert_one_line_error(run("table", "--from-spec", f"a{fmt}", "-o", "again.npy"))
    assert "holds float32 (5, 4), but" in line and "describes a float32 (7, 4) table: the spec is stale" in line, line
    assert sorted(listing()) == sorted([f"a{fmt}"] + (["a.npy.json"] if fmt == ".npy" else []))
