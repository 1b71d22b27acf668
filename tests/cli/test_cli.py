"""The ``fastpe`` command line, through click's CliRunner and as a real process.

Sizes stay small: the ``python`` backend (the reference) is slow, and the suite may run with
``FASTPE_BACKEND`` set to any backend.  Files are compared with ``fastpe.table`` on the same
backend, bit for bit.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import fastpe
from fastpe import _diagnostics as _check
from fastpe._io import save as _save
from fastpe._backends.registry import BACKENDS
from conftest import DEFAULT, FAST, fastpe_env, signals_at_default
from support.cli import assert_one_line_error, listing, make_unavailable, run, run_process, same_bits, signalled

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(fastpe.__file__)))

SUMMARY = re.compile(
    r"wrote (?P<path>\S+): float32 \((?P<rows>\d+), (?P<cols>\d+)\), [\d.]+ (B|KiB|MiB|GiB), "
    r"backend (?P<backend>\w+), [\d.]+ ms compute \+ [\d.]+ ms write"
)


# ======================================================================== table (CliRunner)


def test_table_writes_the_default_file_and_one_summary_line(in_tmp):
    result = run("table", "--d-model", "6", "--max-len", "5")
    assert result.exit_code == 0, result.output
    assert listing() == ["pe_5x6.npy", "pe_5x6.npy.json"]
    assert same_bits(np.load("pe_5x6.npy"), fastpe.table(6, 5, backend=DEFAULT))
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and result.stderr == ""
    match = SUMMARY.fullmatch(lines[0])
    assert match, lines[0]
    assert match["path"] == "pe_5x6.npy" and (match["rows"], match["cols"]) == ("5", "6")
    assert match["backend"] == DEFAULT


@pytest.mark.any_backend
def test_table_with_every_option(in_tmp, backend):
    (in_tmp / "sub").mkdir()
    result = run("table", "--d-model", "7", "--max-len", "9", "--base", "500.5", "--backend", backend,
                 "-o", "sub/out.npy")
    assert result.exit_code == 0, result.output
    assert listing("sub") == ["out.npy", "out.npy.json"] and listing() == ["sub"]
    loaded = np.load("sub/out.npy")
    assert same_bits(loaded, fastpe.table(7, 9, base=500.5, backend=backend))
    assert SUMMARY.fullmatch(result.stdout.strip())["backend"] == backend


def test_table_backend_name_is_case_insensitive(in_tmp):
    result = run("table", "--d-model", "4", "--max-len", "3", "--backend", DEFAULT.upper(), "-o", "a.npy")
    assert result.exit_code == 0, result.output
    assert f"backend {DEFAULT}," in result.stdout


def test_table_quiet_prints_nothing(in_tmp):
    result = run("-q", "table", "--d-model", "4", "--max-len", "3")
    assert result.exit_code == 0 and result.output == ""
    assert listing() == ["pe_3x4.npy", "pe_3x4.npy.json"]


def test_table_replaces_an_existing_file(in_tmp):
    (in_tmp / "pe.npy").write_bytes(b"old")
    (in_tmp / "pe.npy").chmod(0o640)
    result = run("table", "--d-model", "4", "--max-len", "3", "-o", "pe.npy")
    assert result.exit_code == 0, result.output
    assert same_bits(np.load("pe.npy"), fastpe.table(4, 3, backend=DEFAULT))
    assert (in_tmp / "pe.npy").stat().st_mode & 0o777 == 0o640
    assert listing() == ["pe.npy", "pe.npy.json"]


BAD_TABLE_ARGS = [
    pytest.param([], "Missing option '--d-model'", id="no-d-model"),
    pytest.param(["--d-model", "0"], "--d-model", id="d-model-0"),
    pytest.param(["--d-model", "-4"], "--d-model", id="d-model-negative"),
    pytest.param(["--d-model", "1.5"], "not a valid integer", id="d-model-float"),
    pytest.param(["--d-model", "abc"], "not a valid integer", id="d-model-text"),
    pytest.param(["--d-model", "65537"], "must be <= 65536", id="d-model-too-big"),
    pytest.param(["--d-model", "8", "--max-len", "0"], "--max-len", id="max-len-0"),
    pytest.param(["--d-model", "8", "--max-len", "-3"], "--max-len", id="max-len-negative"),
    pytest.param(["--d-model", "8", "--max-len", "2.5"], "--max-len", id="max-len-float"),
    pytest.param(["--d-model", "8", "--base", "1"], "greater than 1", id="base-1"),
    pytest.param(["--d-model", "8", "--base", "0.5"], "greater than 1", id="base-below-1"),
    pytest.param(["--d-model", "8", "--base", "-2"], "greater than 1", id="base-negative"),
    pytest.param(["--d-model", "8", "--base", "nan"], "finite", id="base-nan"),
    pytest.param(["--d-model", "8", "--base", "inf"], "finite", id="base-inf"),
    pytest.param(["--d-model", "8", "--base", "-inf"], "finite", id="base-minus-inf"),
    pytest.param(["--d-model", "8", "--base", "ten"], "--base", id="base-text"),
    pytest.param(["--d-model", "8", "--backend", "gpu"], "--backend", id="backend-unknown"),
    pytest.param(["--d-model", "8", "-o", "missing/pe.npy"], "does not exist", id="out-no-dir"),
    pytest.param(["--d-model", "8", "-o", "adir"], "names a directory", id="out-is-dir"),
    pytest.param(["--d-model", "8", "-o", "adir/"], "names a directory", id="out-trailing-slash"),
    pytest.param(["--d-model", "8", "-o", "pe.txt"], "does not end in .npy", id="out-not-npy"),
    pytest.param(["--d-model", "8", "-o", ""], "empty", id="out-empty"),
    pytest.param(["--d-model", "8", "--bogus"], "No such option", id="unknown-option"),
]


@pytest.mark.any_backend
@pytest.mark.parametrize("args, message", BAD_TABLE_ARGS)
def test_table_bad_input_exits_2_with_one_line_and_writes_nothing(in_tmp, args, message):
    (in_tmp / "adir").mkdir()
    result = run("table", *args)
    assert result.exit_code == 2, result.output
    assert message in assert_one_line_error(result)
    assert result.stdout == ""
    assert listing() == ["adir"] and listing("adir") == []


@pytest.mark.any_backend
@pytest.mark.parametrize("name", BACKENDS)
def test_table_unavailable_backend_exits_2(in_tmp, monkeypatch, name):
    make_unavailable(monkeypatch, name)
    result = run("table", "--d-model", "8", "--backend", name)
    assert result.exit_code == 2
    assert "not available here: ImportError: simulated" in assert_one_line_error(result)
    assert listing() == []


@pytest.mark.parametrize("value, message", [("bogus", "not a fastpe backend"), ("UNAVAILABLE", "not available")])
def test_table_bad_env_backend_exits_2(in_tmp, monkeypatch, value, message):
    if value == "UNAVAILABLE":
        value = DEFAULT
        make_unavailable(monkeypatch, value)
    result = run("table", "--d-model", "8", "--max-len", "2", env={"FASTPE_BACKEND": value})
    assert result.exit_code == 2
    line = assert_one_line_error(result)
    assert "FASTPE_BACKEND" in line and message in line
    assert listing() == []


@pytest.mark.any_backend
@pytest.mark.parametrize("exc, shown", [
    (ValueError("base must be finite, got nan"), "Invalid value for '--base': must be finite, got nan"),
    (TypeError("d_model must be an integer"), "Invalid value for '--d-model': must be an integer"),
    (ValueError("the table would not fit"), "the table would not fit"),
])
def test_table_library_value_and_type_errors_exit_2(in_tmp, monkeypatch, exc, shown):
    """save_table checks every parameter (once); an error naming one is reported against its
    option, any other as one line."""
    def fail(*args, **kwargs):
        raise exc

    monkeypatch.setattr(fastpe, "save_table", fail)
    result = run("table", "--d-model", "8", "--max-len", "2")
    assert result.exit_code == 2
    assert assert_one_line_error(result) == f"Error: {shown}"
    assert listing() == []


def test_table_in_a_vanished_directory_fails_in_one_line(tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    result = run("table", "--d-model", "8", "--max-len", "2")
    assert result.exit_code == 1
    line = assert_one_line_error(result, 1)
    assert line.startswith("Error: could not write pe_2x8.npy: ") and "No such file or directory" in line
    assert listing(tmp_path) == []


# ------------------------------------------------------------- failures while writing


def save_then(exc: BaseException):
    """A stand-in for the .npy writer of save_table that writes part of the file, then
    fails with ``exc``."""

    def write(file, layout, stream):
        file.write(b"\x93NUMPY" + b"\0" * 4096)
        file.flush()
        raise exc

    return write


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
def test_table_disk_full_exits_1_leaving_no_partial_file(in_tmp, monkeypatch, existing):
    if existing:
        (in_tmp / "pe.npy").write_bytes(b"precious")
    monkeypatch.setattr(_save.WRITERS[".npy"], "write_data", save_then(OSError(errno.ENOSPC, "No space left on device")))
    result = run("table", "--d-model", "8", "--max-len", "4", "-o", "pe.npy")
    assert result.exit_code == 1
    line = assert_one_line_error(result, 1)
    assert line.startswith("Error: could not write pe.npy: ") and "No space left on device" in line
    assert result.stdout == ""
    if existing:
        assert listing() == ["pe.npy"] and (in_tmp / "pe.npy").read_bytes() == b"precious"
    else:
        assert listing() == []


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
def test_table_interrupted_exits_130_leaving_no_partial_file(in_tmp, monkeypatch, existing):
    if existing:
        (in_tmp / "pe.npy").write_bytes(b"precious")
    monkeypatch.setattr(_save.WRITERS[".npy"], "write_data", save_then(KeyboardInterrupt()))
    result = run("table", "--d-model", "8", "--max-len", "4", "-o", "pe.npy")
    assert result.exit_code == 130
    assert result.stderr.strip() == "Aborted!"
    if existing:
        assert listing() == ["pe.npy"] and (in_tmp / "pe.npy").read_bytes() == b"precious"
    else:
        assert listing() == []


@pytest.mark.any_backend
def test_unexpected_errors_are_one_line_exit_1_and_v_shows_the_traceback(in_tmp, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("something broke")

    monkeypatch.setattr(fastpe, "save_table", fail)
    result = run("table", "--d-model", "8", "--max-len", "2")
    assert result.exit_code == 1
    line = assert_one_line_error(result, 1)
    assert "RuntimeError: something broke" in line and "-v" in line
    verbose = run("-v", "table", "--d-model", "8", "--max-len", "2")
    assert verbose.exit_code == 1
    assert "Traceback" in verbose.stderr and verbose.stderr.rstrip().splitlines()[-1].startswith("Error: RuntimeError")
    assert listing() == []


def test_table_chunk_larger_than_memory_exits_2_naming_chunk_mb(in_tmp, monkeypatch):
    monkeypatch.setattr(_save, "physical_memory", lambda: 1 << 20)
    result = run("table", "--d-model", "1024", "--max-len", "1000", "--chunk-mb", "2", "--backend", DEFAULT)
    assert result.exit_code == 2
    line = assert_one_line_error(result)
    assert line.startswith("Error: Invalid value for '--chunk-mb': must fit in memory: a chunk of 512 rows needs "
                           "2097152 bytes (2.0 MiB) of memory, more than this machine's 1048576 bytes (1.0 MiB)")
    assert listing() == []
    # a budget that holds the whole table is the table's size, not the budget
    result = run("table", "--d-model", "8", "--max-len", "10", "--chunk-mb", "100000", "--backend", DEFAULT)
    assert result.exit_code == 0, result.output


def test_table_too_big_for_the_disk_exits_1(in_tmp):
    """The table streams (its memory is the chunk budget); 1 PiB fails the free-space check."""
    result = run("table", "--d-model", "65536", "--max-len", str(2**32), "--backend", DEFAULT)
    assert result.exit_code == 1
    assert "[Errno 28] not enough free space" in assert_one_line_error(result, 1)
    assert listing() == []


# ======================================================================== info


def test_info_lists_version_backends_default_and_threads(monkeypatch):
    result = run("info")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    expected = fastpe.info()
    assert lines[0] == f"fastpe {fastpe.__version__}"
    for name in BACKENDS:
        (line,) = [x for x in lines if x.startswith(f"  {name} ")]
        status = expected["backends"][name]
        assert line.endswith("available") if status == "available" else f"unavailable: {status}" in line
    assert f"default backend: {DEFAULT} " in result.stdout
    assert any(x.startswith("numba threading layer: ") for x in lines)
    assert f"threads: {expected['threads']}" in result.stdout


def test_info_says_why_a_backend_is_unavailable(monkeypatch):
    make_unavailable(monkeypatch, next(b for b in BACKENDS if b != DEFAULT))
    result = run("info")
    assert result.exit_code == 0
    assert "unavailable: ImportError: simulated for a test" in result.stdout


def test_info_json_is_the_info_dict():
    result = run("info", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == fastpe.info()


@pytest.mark.any_backend
def test_info_with_a_bad_env_backend_reports_it():
    """info is the diagnostic command: a bad $FASTPE_BACKEND is shown, not fatal."""
    result = run("info", env={"FASTPE_BACKEND": "bogus"})
    assert result.exit_code == 0, result.output
    line = next(l for l in result.stdout.splitlines() if l.startswith("default backend:"))
    assert "$FASTPE_BACKEND ignored" in line and "'bogus' is not a fastpe backend" in line


# ======================================================================== check


@pytest.mark.any_backend
def test_check_runs_the_real_comparison():
    result = run("check", "--d-model", "8", "--d-model", "5", "--per-octave", "1")
    assert result.exit_code == 0, result.output
    if not FAST:
        assert "nothing to check" in result.stdout
        return
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["backend", "d_model", "values", "worst"]
    rows = [line.split() for line in lines[1:-1]]
    assert sorted((r[0], r[1]) for r in rows) == sorted((b, d) for b in FAST for d in ("8", "5"))
    assert all(int(r[3]) <= 1 for r in rows)
    assert lines[-1].startswith("ok: all ")


@pytest.mark.any_backend
def test_check_passes_its_options_to_run_check(monkeypatch):
    seen = {}

    def fake(**kwargs):
        seen.update(kwargs)
        return [_check.CheckResult("numba", 16, 1000, 1, 999)]

    monkeypatch.setattr(_check, "run_check", fake)
    result = run("check", "--d-model", "16", "--per-octave", "3", "--seed", "7", "--base", "20")
    assert result.exit_code == 0, result.output
    assert seen == dict(d_models=(16,), n_per_octave=3, base=20.0, seed=7, backends=None)
    assert "99.900% (999)" in result.stdout


@pytest.mark.any_backend
def test_check_reports_more_than_1_ulp_and_exits_1(monkeypatch):
    results = [_check.CheckResult("numba", 8, 100, 0, 100), _check.CheckResult("numba", 63, 100, 3, 90)]
    monkeypatch.setattr(_check, "run_check", lambda **kwargs: results)
    result = run("check")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert re.fullmatch(r"numba\s+8\s+100\s+0\s+100% \(100\)", lines[1])
    assert re.fullmatch(r"numba\s+63\s+100\s+3\s+90\.000% \(90\)", lines[2])
    assert lines[-1].startswith("FAIL: 1 of 2 checks exceed 1 ULP (worst: numba, d_model 63, 3 ULP)")
    quiet = run("-q", "check")  # only the failing row and the verdict
    assert quiet.exit_code == 1 and len(quiet.stdout.splitlines()) == 3


@pytest.mark.any_backend
def test_check_quiet_success_prints_nothing(monkeypatch):
    monkeypatch.setattr(_check, "run_check", lambda **kwargs: [_check.CheckResult("numba", 8, 10, 0, 10)])
    result = run("-q", "check")
    assert result.exit_code == 0 and result.output == ""


@pytest.mark.any_backend
def test_check_python_alone_has_nothing_to_compare():
    result = run("check", "--backend", "python", "--d-model", "4", "--per-octave", "1")
    assert result.exit_code == 0, result.output
    assert "nothing to check" in result.stdout


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "args", [["--d-model", "0"], ["--per-octave", "0"], ["--seed", "-1"], ["--base", "nan"], ["--backend", "gpu"]]
)
def test_check_bad_input_exits_2(args):
    result = run("check", *args)
    assert result.exit_code == 2
    assert_one_line_error(result)


@pytest.mark.any_backend
def test_check_that_cannot_fit_in_memory_exits_2_before_any_work(monkeypatch):
    def never(**kwargs):  # pragma: no cover - reached only if the size check is missing
        raise AssertionError("run_check was called")

    monkeypatch.setattr(_check, "run_check", never)
    monkeypatch.setattr(_save, "physical_memory", lambda: 1 << 30)
    # 32 * 1000 + 3 positions at d_model 1024, 64 bytes a value: 2.0 GiB
    result = run("check", "--per-octave", "1000", "--d-model", "8", "--d-model", "1024")
    assert result.exit_code == 2
    line = assert_one_line_error(result)
    assert line.startswith("Error: checking 32003 positions at d_model 1024 needs 2097348608 bytes (2.0 GiB) of memory")


# ======================================================================== group


@pytest.mark.any_backend
def test_version():
    for flag in ("--version", "-V"):
        result = run(flag)
        assert result.exit_code == 0 and result.stdout == f"fastpe {fastpe.__version__}\n"


@pytest.mark.any_backend
def test_help_lists_the_commands():
    result = run("--help")
    assert result.exit_code == 0
    for command in ("table", "info", "check"):
        assert re.search(rf"^\s+{command}\s", result.stdout, re.M)
    assert run("-h").stdout == result.stdout


@pytest.mark.any_backend
def test_help_says_what_fastpe_covers_and_the_default_backend_order():
    text = " ".join(run("--help").stdout.split())
    for covered in ("sinusoidal tables", "RoPE", "ALiBi", "T5", "grids", "timestep", "heatmaps"):
        assert covered in text, covered
    order = text.index("in the order the default tries them")
    positions = [text.index(name, order) for name in BACKENDS]
    assert positions == sorted(positions) and BACKENDS[0] == "cython", (BACKENDS, text[order:])


#: each array command, as small as it goes
SMALL = {
    "table": ("--d-model", "4", "--max-len", "3"),
    "grid": ("--height", "2", "--width", "2", "--d-model", "8"),
    "timestep": ("--d-model", "4", "--steps", "3"),
    "alibi": ("--heads", "2", "--q-len", "3"),
    "t5-buckets": ("--q-len", "3"),
}


@pytest.mark.parametrize("command", sorted(SMALL))
def test_quiet_and_verbose_go_before_or_after_the_command(in_tmp, command):
    args = (command, *SMALL[command])
    assert run(*args).stdout.startswith("wrote ")
    for quiet in (("-q", *args), (*args, "-q"), (*args, "--quiet")):
        result = run(*quiet)
        assert result.exit_code == 0 and result.stdout == "", (quiet, result.output)
    # the counts add up wherever they are: -q before and -v after is the default's output
    assert run("-q", *args, "-v").stdout.startswith("wrote ")
    assert run("-v", *args, "-q").stdout.startswith("wrote ")


@pytest.mark.any_backend
def test_verbose_after_the_command_shows_more_and_the_traceback(in_tmp, monkeypatch):
    assert "spec in " in run("table", "--d-model", "4", "--max-len", "3", "-v").stdout

    def fail(*args, **kwargs):
        raise RuntimeError("something broke")

    monkeypatch.setattr(fastpe, "save_table", fail)
    verbose = run("table", "--d-model", "8", "--max-len", "2", "-v")
    assert verbose.exit_code == 1 and "Traceback" in verbose.stderr


@pytest.mark.any_backend
def test_every_command_takes_quiet_and_verbose_with_the_groups_help():
    from fastpe.cli import COMMANDS, main
    from fastpe.cli.options import QUIET_HELP, VERBOSE_HELP

    for command in (main, *COMMANDS):
        helps = {opt: p.help for p in command.params for opt in getattr(p, "opts", ())}
        assert (helps["-q"], helps["--quiet"], helps["-v"], helps["--verbose"]) == (
            QUIET_HELP, QUIET_HELP, VERBOSE_HELP, VERBOSE_HELP), command.name
        assert "-q" in run(*([] if command is main else [command.name]), "--help").stdout


@pytest.mark.any_backend
def test_bare_fastpe_shows_the_help():
    result = run()
    assert result.exit_code in (0, 2)  # click < 8.2 exits 0, later versions 2
    assert "Commands:" in result.output and "Error" not in result.output


@pytest.mark.any_backend
def test_unknown_command_exits_2_with_one_line():
    result = run("tabel")
    assert result.exit_code == 2
    assert "No such command" in assert_one_line_error(result)


# ======================================================================== real processes


def test_help_and_version_do_not_import_numba(tmp_path):
    code = textwrap.dedent(
        """
        import json, sys
        from fastpe.cli import main
        seen = {}
        for args in (["--help"], ["--version"], ["table", "--help"], ["info", "--help"], ["check", "--help"]):
            try:
                main(args, prog_name="fastpe")
            except SystemExit as exc:
                assert exc.code == 0, (args, exc.code)
            seen[" ".join(args)] = sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "llvmlite"))
        sys.stderr.write(json.dumps(seen))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=fastpe_env(keep_backend=True), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stderr) == dict.fromkeys(json.loads(proc.stderr), [])


@pytest.mark.slow
def test_python_m_fastpe_help_lists_every_command(tmp_path):
    # (what --help imports is checked above and in test_cli_imports.py; its time is the
    # benchmarks' to measure, not a test's to assert)
    from fastpe.cli import COMMANDS

    proc = run_process("--help", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    listed = proc.stdout.split("Commands:", 1)[1]
    assert [line.split()[0] for line in listed.splitlines() if line.startswith("  ") and not line.startswith("   ")] \
        == sorted(command.name for command in COMMANDS)


@pytest.mark.slow
def test_process_table_writes_the_file(tmp_path):
    proc = run_process("table", "--d-model", "16", "--max-len", "8", "--backend", DEFAULT, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    match = SUMMARY.fullmatch(proc.stdout.rstrip("\n"))
    assert match and match["path"] == "pe_8x16.npy" and match["backend"] == DEFAULT
    assert listing(tmp_path) == ["pe_8x16.npy", "pe_8x16.npy.json"]
    assert same_bits(np.load(tmp_path / "pe_8x16.npy"), fastpe.table(16, 8, backend=DEFAULT))


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["--d-model", "0"],
        ["--d-model", "x"],
        ["--d-model", "8", "--max-len", "0"],
        ["--d-model", "8", "--base", "nan"],
        ["--d-model", "8", "--backend", "gpu"],
        ["--d-model", "8", "-o", "missing/pe.npy"],
        ["--d-model", "8", "-o", "pe.txt"],
        ["--d-model", "8", "-o", "."],
    ],
)
def test_process_bad_input_exits_2_with_one_line(tmp_path, args):
    proc = run_process("table", *args, cwd=tmp_path)
    assert proc.returncode == 2
    assert_one_line_error(proc)
    assert proc.stdout == "" and listing(tmp_path) == []


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="needs RLIMIT_FSIZE")
def test_process_real_write_failure_exits_1_leaving_nothing(tmp_path):
    """A genuine write error: a file-size limit below the table's size (Python ignores
    SIGXFSZ, so the write fails with EFBIG, as it would with ENOSPC on a full disk)."""
    (tmp_path / "pe.npy").write_bytes(b"precious")
    backend, (d_model, max_len) = (FAST[0], (512, 2048)) if FAST else ("python", (16, 64))
    limit = d_model * max_len  # a quarter of the table
    code = textwrap.dedent(
        f"""
        import resource, runpy, sys
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
        sys.argv[0] = "fastpe"
        runpy.run_module("fastpe", run_name="__main__", alter_sys=True)
        """
    )
    for target in ("new.npy", "pe.npy"):
        args = ["table", "--d-model", str(d_model), "--max-len", str(max_len), "--backend", backend, "-o", target]
        proc = subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, env=fastpe_env(keep_backend=True),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1, proc.stderr
        line = assert_one_line_error(proc, 1)  # numpy reports a short write, without errno
        assert line.startswith(f"Error: could not write {target}: ")
        assert listing(tmp_path) == ["pe.npy"]
        assert (tmp_path / "pe.npy").read_bytes() == b"precious"


@pytest.mark.slow
def test_process_ctrl_c_while_writing_exits_130_leaving_nothing(tmp_path):
    """A real SIGINT arriving while the file is half written."""
    (tmp_path / "pe.npy").write_bytes(b"precious")
    code = textwrap.dedent(
        f"""
        import sys, time
        from fastpe._io import save as _save
        from fastpe.cli import main

        def slow_write(file, layout, stream):
            file.write(b"\\x93NUMPY" + bytes(4096))
            file.flush()
            print("writing", flush=True)
            for _ in range(600):
                time.sleep(0.1)

        _save.WRITERS[".npy"].write_data = slow_write
        main(["table", "--d-model", "8", "--max-len", "4", "--backend", {DEFAULT!r}, "-o", sys.argv[1]],
             prog_name="fastpe")
        """
    )
    for target in ("new.npy", "pe.npy"):
        child = subprocess.Popen([sys.executable, "-c", code, target], cwd=tmp_path, env=fastpe_env(keep_backend=True),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 preexec_fn=signals_at_default)
        try:
            assert child.stdout.readline() == "writing\n"
            assert len(listing(tmp_path)) == 2  # the target (or not yet) plus the temporary file
            child.send_signal(signal.SIGINT)
            out, err = child.communicate(timeout=60)
        finally:
            child.kill()
            child.wait()
        assert child.returncode == 130, err
        assert err.strip() == "Aborted!"
        assert listing(tmp_path) == ["pe.npy"]
        assert (tmp_path / "pe.npy").read_bytes() == b"precious"


@pytest.mark.slow
def test_process_info_and_version(tmp_path):
    proc = run_process("info", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"fastpe {fastpe.__version__}\nbackends:\n")
    assert "default backend: " in proc.stdout
    version = run_process("--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout == f"fastpe {fastpe.__version__}\n"


# ======================================================================== signals

posix_signals = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="SIGTERM and SIGHUP are POSIX signals")

#: every command that writes a file, on small requests and the reference backend (the child
#: need not load numba)
WRITERS = {
    "table": ["table", "--d-model", "8", "--max-len", "16", "-o", "out.npy"],
    "rope": ["rope", "--head-dim", "8", "--max-len", "16", "-o", "out.npz"],
    "rope-axial": ["rope-axial", "--axes-dim", "4,4", "--grid", "2,2", "-o", "out.npz"],
    "alibi": ["alibi", "--heads", "2", "--q-len", "8", "-o", "out.npy"],
    "t5-buckets": ["t5-buckets", "--q-len", "8", "-o", "out.npy"],
    "grid": ["grid", "--height", "2", "--width", "2", "--d-model", "8", "-o", "out.npy"],
    "timestep": ["timestep", "--d-model", "8", "--steps", "4", "-o", "out.npy"],
    "plot": ["plot", "--d-model", "8", "--max-len", "8", "-o", "out.png"],
}

#: what each signal ends a command with: 128 + its number, as shells report, and one line
SIGNAL_ENDS = {"SIGINT": (130, "Aborted!"), "SIGTERM": (143, "Aborted! (SIGTERM)"), "SIGHUP": (129, "Aborted! (SIGHUP)")}

@pytest.mark.slow
@posix_signals
def test_process_signal_while_writing_leaves_nothing(tmp_path):
    """Every writing command, sent each signal while its temporary file exists: the exit
    status is 128 + the signal's number, stderr one line, and the directory as it was.  The
    children run side by side, one per command and signal (each spends most of its life
    starting Python)."""
    children = {}
    try:
        for signame in SIGNAL_ENDS:
            for name, args in WRITERS.items():
                cwd = tmp_path / f"{name}-{signame}"
                cwd.mkdir()
                children[name, signame] = signalled([*args, "--backend", "python"], cwd, wait=True)
        for (name, signame), child in children.items():
            assert child.stdout.readline() == "temporary file written\n", (name, signame, child.stderr.read())
            (temporary,) = listing(tmp_path / f"{name}-{signame}")
            assert temporary.startswith(".out.") and temporary.endswith(".tmp"), name
            child.send_signal(getattr(signal, signame))
        for (name, signame), child in children.items():
            out, err = child.communicate(timeout=60)
            assert (child.returncode, err.strip(), out) == (*SIGNAL_ENDS[signame], ""), (name, signame, err)
            assert listing(tmp_path / f"{name}-{signame}") == [], (name, signame)
    finally:
        for child in children.values():
            child.kill()
            child.wait()


@pytest.mark.slow
@posix_signals
@pytest.mark.parametrize(("signame", "args"), [
    # the finding: `timeout` sending SIGTERM to a table being written
    ("SIGTERM", ["table", "--d-model", "64", "--max-len", "100000", "-o", "big.npy"]),
    ("SIGHUP", ["timestep", "--d-model", "64", "--steps", "20000", "-o", "big.npy"]),
])
def test_process_signal_during_a_long_request_leaves_nothing(tmp_path, signame, args):
    """No help from the test: a request that the reference backend takes tens of seconds
    over, signalled once its temporary file appears."""
    (tmp_path / "big.npy").write_bytes(b"precious")
    child = signalled([*args, "--backend", "python"], tmp_path, wait=False)
    try:
        deadline = time.monotonic() + 60
        while len(listing(tmp_path)) < 2 and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(listing(tmp_path)) == 2, child.stderr.read() if child.poll() is not None else "no temporary file"
        child.send_signal(getattr(signal, signame))
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
        child.wait()
    assert (child.returncode, err.strip(), out) == (*SIGNAL_ENDS[signame], ""), err
    assert listing(tmp_path) == ["big.npy"] and (tmp_path / "big.npy").read_bytes() == b"precious"


@pytest.fixture
def default_signals():
    """SIGTERM at its default and SIGHUP ignored (as under nohup) for one in-process run."""
    saved = {signal.SIGTERM: signal.signal(signal.SIGTERM, signal.SIG_DFL),
             signal.SIGHUP: signal.signal(signal.SIGHUP, signal.SIG_IGN)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


@posix_signals
def test_commands_hold_sigterm_for_their_run_and_leave_an_ignored_sighup_alone(in_tmp, monkeypatch, default_signals):
    seen = {}
    real = fastpe.grid.sincos_2d

    def spy(*args, **kwargs):
        seen.update({s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)})
        return real(*args, **kwargs)

    monkeypatch.setattr(fastpe.grid, "sincos_2d", spy)
    result = run("grid", "--height", "2", "--width", "2", "--d-model", "4", "-o", "g.npy")
    assert result.exit_code == 0, result.output
    assert callable(seen[signal.SIGTERM]) and seen[signal.SIGHUP] == signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL and signal.getsignal(signal.SIGHUP) == signal.SIG_IGN


@posix_signals
def test_a_sigterm_mid_command_exits_143_keeping_the_old_file(in_tmp, monkeypatch, default_signals):
    (in_tmp / "old.npy").write_bytes(b"previous")

    def terminated(*args, **kwargs):
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)  # what Python does when it arrives

    monkeypatch.setattr(fastpe, "timestep", terminated)
    result = run("timestep", "--d-model", "4", "--steps", "3", "-o", "old.npy")
    assert (result.exit_code, result.stderr, result.stdout) == (143, "Aborted! (SIGTERM)\n", "")
    assert listing() == ["old.npy"] and (in_tmp / "old.npy").read_bytes() == b"previous"
