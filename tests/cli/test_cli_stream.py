"""``fastpe table`` streaming through fastpe.save_table: formats, dtypes and conventions,
``--chunk-mb``, ``--from-spec``, and what is left behind (nothing) after every failure.

Sizes stay small (the suite also runs with the ``python`` backend); ``--chunk-mb`` is a few
hundred bytes, so every write runs through many chunks.  Files are compared with
``fastpe.table`` on the same backend, bit for bit.
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

import fastpe
from fastpe import sinusoid as _api, _dtypes
from fastpe._io import save as _save
table_cli = importlib.import_module("fastpe.cli.table")  # the package exports the command under this name
from conftest import DEFAULT, FAST, fastpe_env, signals_at_default
from support.cli import assert_one_line_error, listing, read_table, run, same_bits

D, L = 10, 203
ROWS = 23  # rows per chunk: 9 chunks, the last of 19 rows

SUMMARY = re.compile(
    r"wrote (?P<path>\S+): (?P<dtype>\w+)(?P<bits> \(as uint16 bits\))? \((?P<rows>\d+), (?P<cols>\d+)\), "
    r"[\d.]+ (B|KiB|MiB|GiB), "
    r"backend (?P<backend>\w+), [\d.]+ ms compute \+ [\d.]+ ms write"
)


def chunk_mb(rows: int, d_model: int = D, dtype="float32") -> str:
    """A --chunk-mb that holds exactly ``rows`` rows (a fraction of a MiB)."""
    return repr(_save._chunk_bytes(rows, d_model, _dtypes.resolve(dtype)) / (1 << 20))


@pytest.fixture
def chunk_starts(monkeypatch):
    """The start row of every chunk computed (fill_config still does the work)."""
    starts = []
    real = _api.fill_config

    def recording(module, config, positions, start, out):
        starts.append((start, out.shape[0]))
        return real(module, config, positions, start, out)

    monkeypatch.setattr(_api, "fill_config", recording)
    return starts


# ======================================================================== writing


@pytest.mark.parametrize("dtype", _dtypes.DTYPES)
@pytest.mark.parametrize("fmt", _save.FORMATS)
def test_every_format_and_dtype_streams_in_chunks(in_tmp, chunk_starts, fmt, dtype):
    result = run("table", "--d-model", str(D), "--max-len", str(L), "--dtype", dtype, "-o", f"pe{fmt}",
                 "--chunk-mb", chunk_mb(ROWS, D, dtype))
    assert result.exit_code == 0, result.output
    match = SUMMARY.fullmatch(result.stdout.strip())
    assert match and (match["path"], match["dtype"], match["rows"], match["cols"]) == (f"pe{fmt}", dtype, str(L), str(D))
    assert match["bits"] == (" (as uint16 bits)" if dtype == "bfloat16" and fmt != ".safetensors" else None)
    assert match["backend"] == DEFAULT and result.stderr == ""
    assert chunk_starts == [(r, min(ROWS, L - r)) for r in range(0, L, ROWS)]  # before table's own
    assert same_bits(read_table(f"pe{fmt}", dtype), fastpe.table(D, L, dtype=dtype, backend=DEFAULT))
    assert listing() == (["pe.npy", "pe.npy.json"] if fmt == ".npy" else [f"pe{fmt}"])
    assert _save.load_spec(f"pe{fmt}")["params"]["dtype"] == dtype


def test_the_conventions_reach_the_library(in_tmp):
    result = run("table", "--d-model", "11", "--max-len", "40", "--layout", "halves", "--denominator", "half-1",
                 "--min-timescale", "0.5", "--max-timescale", "300", "-o", "t2t.npz")
    assert result.exit_code == 0, result.output
    kwargs = dict(layout="halves", denominator="half-1", min_timescale=0.5, max_timescale=300.0)
    assert same_bits(read_table("t2t.npz"), fastpe.table(11, 40, backend=DEFAULT, **kwargs))
    assert _save.load_spec("t2t.npz")["params"] == {"d_model": 11, "max_len": 40, "base": 10000.0, **kwargs,
                                                  "dtype": "float32"}


def test_choices_are_case_insensitive(in_tmp):
    result = run("table", "--d-model", "4", "--max-len", "3", "--layout", "HALVES", "--dtype", "Float16")
    assert result.exit_code == 0, result.output
    assert _save.load_spec("pe_3x4.npy")["params"]["layout"] == "halves"
    assert same_bits(np.load("pe_3x4.npy"), fastpe.table(4, 3, layout="halves", dtype="float16", backend=DEFAULT))


def test_verbose_names_the_sidecar(in_tmp):
    result = run("-v", "table", "--d-model", "4", "--max-len", "3")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1] == "spec in pe_3x4.npy.json"


@pytest.mark.any_backend
def test_help_lists_the_new_options():
    result = run("table", "--help")
    assert result.exit_code == 0
    for flag in ("--layout", "--denominator", "--min-timescale", "--max-timescale", "--dtype", "--chunk-mb",
                 "--from-spec", "interleaved|halves", "float32|float64|float16|bfloat16"):
        assert flag in result.stdout


# ======================================================================== --from-spec


@pytest.mark.parametrize("source", ["pe.npy.json", "pe.npy", "pe.npz", "pe.safetensors"])
@pytest.mark.parametrize("fmt", _save.FORMATS)
def test_from_spec_reproduces_the_same_bytes(in_tmp, source, fmt):
    kwargs = dict(base=500.5, layout="halves", denominator="half-1", dtype="bfloat16")
    fastpe.save_table(source.removesuffix(".json"), D, L, **kwargs)
    fastpe.save_table(f"first{fmt}", D, L, **kwargs)
    result = run("table", "--from-spec", source, "-o", f"again{fmt}", "--chunk-mb", chunk_mb(7, D, "bfloat16"))
    assert result.exit_code == 0, result.output
    assert (in_tmp / f"again{fmt}").read_bytes() == (in_tmp / f"first{fmt}").read_bytes()
    if fmt == ".npy":
        assert (in_tmp / "again.npy.json").read_bytes() == (in_tmp / "first.npy.json").read_bytes()


def test_from_spec_default_path_comes_from_the_spec(in_tmp):
    fastpe.save_table("a.npz", 6, 5)
    result = run("table", "--from-spec", "a.npz")
    assert result.exit_code == 0, result.output
    assert SUMMARY.fullmatch(result.stdout.strip())["path"] == "pe_5x6.npy"
    assert same_bits(np.load("pe_5x6.npy"), fastpe.table(6, 5, backend=DEFAULT))


def test_options_given_with_from_spec_override_it(in_tmp):
    fastpe.save_table("a.npy", D, L, base=500.5, layout="halves")
    result = run("table", "--from-spec", "a.npy.json", "--dtype", "float16", "--max-len", "50", "-o", "b.npy")
    assert result.exit_code == 0, result.output
    params = _save.load_spec("b.npy")["params"]
    assert params == {**_save.load_spec("a.npy")["params"], "dtype": "float16", "max_len": 50}
    assert same_bits(np.load("b.npy"), fastpe.table(D, 50, base=500.5, layout="halves", dtype="float16",
                                                    backend=DEFAULT))


def test_a_default_given_explicitly_also_overrides(in_tmp):
    fastpe.save_table("a.npy", D, 7, layout="halves")
    result = run("table", "--from-spec", "a.npy", "--layout", "interleaved", "-o", "b.npy")
    assert result.exit_code == 0, result.output
    assert _save.load_spec("b.npy")["params"]["layout"] == "interleaved"


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "content, message",
    [
        ("{oops", "is not valid JSON"),
        (json.dumps({"fastpe": "9.0.0", "function": "table", "params": {}}), "major version differs"),
        (json.dumps({"fastpe": fastpe.__version__, "function": "alibi", "params": {}}), "names function 'alibi'"),
    ],
)
def test_bad_specs_exit_2_with_one_line(in_tmp, content, message):
    (in_tmp / "spec.json").write_text(content)
    line = assert_one_line_error(run("table", "--from-spec", "spec.json"), 2)
    assert "--from-spec" in line and message in line
    assert listing() == ["spec.json"]


@pytest.mark.any_backend
def test_from_spec_of_a_missing_file_or_a_file_without_a_spec(in_tmp):
    assert "does not exist" in assert_one_line_error(run("table", "--from-spec", "nope.json"), 2)
    np.save("plain.npy", np.zeros(3))
    assert "has no spec" in assert_one_line_error(run("table", "--from-spec", "plain.npy"), 2)
    assert listing() == ["plain.npy"]


@pytest.mark.any_backend
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_from_spec_of_a_pipe_exits_2_instead_of_waiting_for_it(in_tmp):
    os.mkfifo("spec.json")
    np.save("plain.npy", np.zeros(3))
    os.mkfifo("plain.npy.json")  # a .npy's spec is read from its sidecar
    for source, pipe in (("spec.json", "spec.json"), ("plain.npy", "plain.npy.json")):
        line = assert_one_line_error(run("table", "--from-spec", source, "-o", "out.npy"), 2)
        assert line == f"Error: Invalid value for '--from-spec': {pipe!r} is not a regular file"
    np.save("bare.npy", np.zeros(3))
    line = assert_one_line_error(run("table", "--from-spec", "bare.npy"), 2)
    assert line == ("Error: Invalid value for '--from-spec': bare.npy has no spec: "
                    "its sidecar bare.npy.json does not exist")  # no '[Errno 2]' in front
    assert listing() == ["bare.npy", "plain.npy", "plain.npy.json", "spec.json"]


@pytest.mark.any_backend
@pytest.mark.parametrize("fmt", _save.FORMATS)
def test_from_spec_of_a_file_written_again_since_exits_2(in_tmp, fmt):
    """The README's save_table("pe.npy", 4096, ...) then open_memmap("pe.npy", ...) of
    another shape: the spec no longer describes the file, and is not re-run."""
    saved = fastpe.save_table(f"pe{fmt}", 64, 32, backend="python")
    if fmt == ".npy":
        target = np.lib.format.open_memmap("pe.npy", mode="w+", dtype=np.float32, shape=(32, 32))
        del target
    elif fmt == ".npz":
        np.savez("pe.npz", spec=np.array(json.dumps(saved.spec)), table=np.zeros((32, 32), np.float32))
    else:
        from safetensors.numpy import save_file

        save_file({"table": np.zeros((32, 32), np.float32)}, "pe.safetensors", metadata={"spec": json.dumps(saved.spec)})
    before = listing()
    line = assert_one_line_error(run("table", "--from-spec", f"pe{fmt}", "-o", "x.npy"))
    assert line.startswith("Error: Invalid value for '--from-spec': ") and "holds float32 (32, 32), but " in line
    assert "describes a float32 (32, 64) table: the spec is stale" in line
    assert listing() == before


def test_an_override_that_contradicts_the_spec_exits_2(in_tmp):
    fastpe.save_table("a.npy", D, L, base=500.5)
    line = assert_one_line_error(run("table", "--from-spec", "a.npy", "--max-timescale", "20"), 2)
    assert "give base or max_timescale, not both" in line


# ======================================================================== bad input


BAD = [
    pytest.param(["--layout", "neox"], "--layout", id="layout"),
    pytest.param(["--denominator", "2i"], "--denominator", id="denominator"),
    pytest.param(["--dtype", "int8"], "--dtype", id="dtype"),
    pytest.param(["--min-timescale", "0"], "Invalid value for '--min-timescale': must be > 0", id="min-ts-0"),
    pytest.param(["--min-timescale", "nan"], "'--min-timescale': must be finite", id="min-ts-nan"),
    pytest.param(["--min-timescale", "0.0001"], "'--min-timescale': must be >= 1/1024", id="min-ts-tiny"),
    pytest.param(["--max-timescale", "-3"], "'--max-timescale': must be > 0", id="max-ts-negative"),
    pytest.param(["--max-timescale", "0.5"], "must be greater than min_timescale", id="max-ts-below-min"),
    pytest.param(["--base", "100", "--max-timescale", "50"], "give base or max_timescale, not both", id="base-and-max"),
    pytest.param(["--denominator", "half-1", "--d-model", "1"], "'--d-model': must be >= 2 with denominator",
                 id="half-1-d-1"),
    pytest.param(["--chunk-mb", "0"], "'--chunk-mb': must be a finite number of MiB > 0", id="chunk-0"),
    pytest.param(["--chunk-mb", "-1"], "'--chunk-mb'", id="chunk-negative"),
    pytest.param(["--chunk-mb", "nan"], "'--chunk-mb'", id="chunk-nan"),
    pytest.param(["--chunk-mb", "0.00001"], "'--chunk-mb': must hold at least one row: 32 bytes", id="chunk-small"),
    pytest.param(["-o", "pe.txt"], "does not end in .npy, .npz or .safetensors", id="extension"),
    pytest.param(["-o", "pe"], "does not end in .npy, .npz or .safetensors", id="no-extension"),
    pytest.param(["-o", "side.npy"], "'side.npy.json', where the spec of 'side.npy' goes, exists and is not a regular",
                 id="sidecar-is-a-directory"),
    pytest.param(["-o", "adir/.npz"], "has no file name before .npz", id="only-extension"),
]


@pytest.mark.any_backend
@pytest.mark.parametrize("args, message", BAD)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(in_tmp, args, message):
    (in_tmp / "adir").mkdir()
    (in_tmp / "side.npy.json").mkdir()
    line = assert_one_line_error(run("table", "--d-model", "8", *args), 2)
    assert message in line
    assert listing() == ["adir", "side.npy.json"] and listing("adir") == []


@pytest.mark.any_backend
def test_safetensors_without_its_package_exits_2(in_tmp, monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors", None)
    line = assert_one_line_error(run("table", "--d-model", "8", "-o", "pe.safetensors"), 2)
    assert "pip install safetensors" in line
    assert listing() == []


# ======================================================================== failures


@pytest.fixture
def precious(in_tmp):
    def make(name):
        (in_tmp / name).write_bytes(b"precious")
        if name.endswith(".npy"):
            (in_tmp / (name + ".json")).write_bytes(b"old spec")

    return make


def assert_untouched(name, existing):
    if not existing:
        assert listing() == []
        return
    assert listing() == sorted([name, name + ".json"] if name.endswith(".npy") else [name])
    with open(name, "rb") as f:
        assert f.read() == b"precious"
    if name.endswith(".npy"):
        with open(name + ".json", "rb") as f:
            assert f.read() == b"old spec"


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
@pytest.mark.parametrize("fmt", _save.FORMATS)
def test_too_little_disk_space_exits_1_before_writing(in_tmp, monkeypatch, precious, fmt, existing):
    name = f"pe{fmt}"
    if existing:
        precious(name)
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=1000))
    line = assert_one_line_error(run("table", "--d-model", str(D), "--max-len", str(L), "-o", name), 1)
    assert line.startswith(f"Error: could not write {name}: [Errno 28] not enough free space in '.': {name} needs ")
    assert line.endswith("1000 bytes (1000 B) are free")
    assert_untouched(name, existing)


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
@pytest.mark.parametrize("fmt", _save.FORMATS)
def test_disk_full_while_writing_exits_1_leaving_nothing(in_tmp, monkeypatch, precious, fmt, existing):
    name = f"pe{fmt}"
    if existing:
        precious(name)
    write = _save.WRITERS[fmt].write_data

    class Full:
        def __init__(self, f):
            self._f, self._left = f, 500

        def write(self, data):
            n = memoryview(data).nbytes
            if n > self._left:
                raise OSError(errno.ENOSPC, "No space left on device")
            self._left -= n
            return self._f.write(data)

        def __getattr__(self, attr):
            return getattr(self._f, attr)

    monkeypatch.setattr(_save.WRITERS[fmt], "write_data", lambda f, layout, blocks: write(Full(f), layout, blocks))
    line = assert_one_line_error(run("table", "--d-model", str(D), "--max-len", str(L), "-o", name,
                                     "--chunk-mb", chunk_mb(ROWS)), 1)
    assert line == f"Error: could not write {name}: [Errno 28] No space left on device"
    assert_untouched(name, existing)


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
@pytest.mark.parametrize("fmt", _save.FORMATS)
def test_ctrl_c_mid_way_exits_130_leaving_nothing(in_tmp, monkeypatch, precious, fmt, existing):
    name = f"pe{fmt}"
    if existing:
        precious(name)
    real = _api.fill_config
    calls = []

    def interrupted(module, config, positions, start, out):
        calls.append(start)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(module, config, positions, start, out)

    monkeypatch.setattr(_api, "fill_config", interrupted)
    result = run("table", "--d-model", str(D), "--max-len", str(L), "-o", name, "--chunk-mb", chunk_mb(ROWS))
    assert result.exit_code == 130
    assert result.stderr.strip() == "Aborted!" and result.stdout == ""
    assert len(calls) == 4
    assert_untouched(name, existing)


def test_unexpected_errors_exit_1_and_v_shows_the_traceback(in_tmp, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("something broke")

    monkeypatch.setattr(_api, "fill_config", fail)
    line = assert_one_line_error(run("table", "--d-model", "8", "--max-len", "2"), 1)
    assert "RuntimeError: something broke" in line and "-v" in line
    verbose = run("-v", "table", "--d-model", "8", "--max-len", "2")
    assert verbose.exit_code == 1 and "Traceback" in verbose.stderr
    assert listing() == []


def test_a_table_larger_than_any_disk_exits_1(in_tmp):
    line = assert_one_line_error(run("table", "--d-model", "65536", "--max-len", str(2**32)), 1)
    assert "[Errno 28] not enough free space" in line and "needs 1125899906843" in line
    assert listing() == []


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names a synced descriptor's file through /proc")
def test_a_npy_and_its_sidecar_are_synced_once_each_in_order(in_tmp, monkeypatch):
    """Durable and in order, without a sync too many: the data are synced, then the sidecar,
    which is renamed into place (and its directory synced) before the data are renamed
    (and the directory synced again); each file once."""
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            events.append(("sync", "dir"))
        else:  # a temporary file, .<target name>.<12 hex digits>.tmp
            name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
            events.append(("sync", re.fullmatch(r"\.(.+)\.[0-9a-f]{12}\.tmp", name)[1]))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("rename", os.path.basename(dst)))
        real_replace(src, dst)

    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", fsync)
        patch.setattr(os, "replace", replace)
        result = run("table", "--d-model", 8, "--max-len", 5, "-o", "pe.npy")
    assert result.exit_code == 0, result.output
    assert events == [("sync", "pe.npy"), ("sync", "pe.npy.json"), ("rename", "pe.npy.json"), ("sync", "dir"),
                      ("rename", "pe.npy"), ("sync", "dir")]
    assert listing() == ["pe.npy", "pe.npy.json"]
    assert same_bits(np.load("pe.npy"), fastpe.table(8, 5, backend=DEFAULT))


# ======================================================================== progress bar


def test_the_progress_bar_follows_the_chunks(in_tmp, monkeypatch):
    monkeypatch.setattr(table_cli, "_wants_bar", lambda ctx: True)
    updates = []
    import click

    real_bar = click.progressbar

    def bar(**kwargs):
        progress = real_bar(**kwargs)
        update = progress.update
        progress.update = lambda n, *a: (updates.append(n), update(n, *a))[1]
        return progress

    monkeypatch.setattr(click, "progressbar", bar)
    result = run("table", "--d-model", str(D), "--max-len", str(L), "-o", "pe.npz", "--chunk-mb", chunk_mb(ROWS))
    assert result.exit_code == 0, result.output
    assert updates == [ROWS] * 8 + [L - 8 * ROWS]
    assert "writing pe.npz" in result.stderr
    assert SUMMARY.fullmatch(result.stdout.strip())


@pytest.mark.any_backend
@pytest.mark.parametrize("stdout_tty, stderr_tty, verbosity, wanted", [
    (True, True, 0, True), (True, True, 1, True), (True, True, -1, False),
    (False, True, 0, False), (True, False, 0, False), (False, False, 0, False),
])
def test_a_bar_only_on_a_terminal_and_never_with_q(monkeypatch, stdout_tty, stderr_tty, verbosity, wanted):
    monkeypatch.setattr(sys, "stdout", types.SimpleNamespace(isatty=lambda: stdout_tty))
    monkeypatch.setattr(sys, "stderr", types.SimpleNamespace(isatty=lambda: stderr_tty))
    ctx = types.SimpleNamespace(obj={"verbosity": verbosity})
    assert table_cli._wants_bar(ctx) is wanted


# ======================================================================== real processes


@pytest.mark.slow
def test_process_ctrl_c_while_streaming_exits_130_leaving_nothing(tmp_path):
    """A real SIGINT arriving between two chunks of a half-written file."""
    (tmp_path / "pe.npy").write_bytes(b"precious")
    (tmp_path / "pe.npy.json").write_bytes(b"old spec")
    code = textwrap.dedent(
        """
        import sys, time
        from fastpe import sinusoid as _api
        from fastpe.cli import main

        real, calls = _api.fill_config, []

        def slow_rows(*args, **kwargs):
            calls.append(1)
            if len(calls) == 3:
                print("writing", flush=True)
                time.sleep(60)
            return real(*args, **kwargs)

        _api.fill_config = slow_rows
        main(["table", "--d-model", "16", "--max-len", "400", "--chunk-mb", "0.001", "-o", sys.argv[1]],
             prog_name="fastpe")
        """
    )
    for target in ("new.npy", "pe.npy", "new.npz"):
        child = subprocess.Popen([sys.executable, "-c", code, target], cwd=tmp_path, env=fastpe_env(keep_backend=True),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 preexec_fn=signals_at_default)
        try:
            assert child.stdout.readline() == "writing\n"
            assert len(listing(tmp_path)) == 3  # the old pair plus one temporary file
            child.send_signal(signal.SIGINT)
            out, err = child.communicate(timeout=60)
        finally:
            child.kill()
            child.wait()
        assert child.returncode == 130, err
        assert err.strip() == "Aborted!"
        assert listing(tmp_path) == ["pe.npy", "pe.npy.json"]
        assert (tmp_path / "pe.npy").read_bytes() == b"precious"
        assert (tmp_path / "pe.npy.json").read_bytes() == b"old spec"


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="resource is POSIX")
def test_process_memory_stays_flat_while_a_table_larger_than_the_budget_streams(tmp_path):
    """A 256 MiB table through an 8 MiB budget: the peak RSS of the process that writes it
    stays within the budget (plus slack) of one that writes a tiny table."""
    code = textwrap.dedent(
        """
        import resource, sys
        from fastpe.cli import main

        try:
            main(["-q", "table", "--d-model", "1024", "--max-len", sys.argv[1], "--chunk-mb", "8",
                  "-o", sys.argv[2]], prog_name="fastpe")
        except SystemExit as exc:
            assert exc.code == 0, exc.code
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        """
    )

    if not FAST:
        pytest.skip("64M values need a compiled backend; the python reference is for checking")

    def peak(max_len, name):
        proc = subprocess.run([sys.executable, "-c", code, str(max_len), name], cwd=tmp_path,
                              env={**fastpe_env(), "FASTPE_BACKEND": FAST[0]},
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return int(proc.stdout)

    baseline = peak(8, "tiny.npy")
    big = peak(65536, "big.npy")  # 256 MiB
    assert os.path.getsize(tmp_path / "big.npy") > 256 << 20
    assert big - baseline < (8 + 24) << 20, (baseline, big)
