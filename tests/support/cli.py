"""Running the ``fastpe`` command line and judging what it prints and writes.

* :func:`run` -- in-process, through click's CliRunner; :func:`run_process` -- ``python -m
  fastpe`` in a child that imports the same fastpe and keeps this run's backend choice;
* :func:`ok` -- a success that printed exactly one summary line; :func:`assert_one_line_error`
  -- a failure that printed exactly one ``Error: ...`` line and nothing else;
* :func:`same_bits` -- two arrays (or tensors) of the same dtype, shape and bytes;
  :func:`listing` -- a directory's entries; :func:`read_table` -- a table file read back by
  its format's own reader; :func:`make_unavailable` -- a backend that fails to load.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
from click.testing import CliRunner

from conftest import fastpe_env, signals_at_default
from fastpe import _backends, _dtypes
from fastpe.cli import main

__all__ = ["run", "run_process", "ok", "assert_one_line_error", "same_bits", "listing", "read_table",
           "make_unavailable", "SIGNALLED_CLI", "signalled"]


def run(*args, env=None):
    """``fastpe ARGS`` in this process (each argument ``str()``-ed); ``env`` is set for the run."""
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def run_process(*args, cwd, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """``python -m fastpe ARGS`` in a child process (text output captured), in ``cwd``, with
    this process's ``$FASTPE_BACKEND`` and this fastpe importable."""
    return subprocess.run(
        [sys.executable, "-m", "fastpe", *map(str, args)], cwd=cwd, env=fastpe_env(keep_backend=True),
        capture_output=True, text=True, timeout=timeout, **kwargs,
    )


#: the summary line of a command writing one array: its path, dtype, shape, what it holds, its
#: size, the backend and the times
SUMMARY = re.compile(
    r"wrote (?P<path>\S+): (?P<dtype>\w+)(?P<bits> \(as uint16 bits\))? \((?P<shape>[\d, ]+)\), "
    r"(?P<what>.+), [\d.]+ (B|KiB|MiB|GiB), backend (?P<backend>\w+), [\d.]+ ms compute \+ [\d.]+ ms write"
)


def ok(result, summary: re.Pattern = SUMMARY) -> re.Match:
    """A successful run printed exactly one line, matching ``summary``."""
    assert result.exit_code == 0, (result.output, result.stderr)
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    match = summary.fullmatch(lines[0])
    assert match, lines[0]
    return match


def assert_one_line_error(result, code: int = 2) -> str:
    """A failed run -- a CliRunner result or a finished child process -- exited with
    ``code`` and printed one ``Error: ...`` line on stderr (blank lines aside), no traceback,
    and nothing on stdout.  Returns that line."""
    exit_code = result.exit_code if hasattr(result, "exit_code") else result.returncode
    assert exit_code == code, (exit_code, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ") and "Traceback" not in result.stderr, result.stderr
    assert result.stdout == "", result.stdout
    return lines[0]


def _bytes(x) -> tuple:
    """``(dtype, shape, bytes)`` of an array, an array-like or a torch tensor."""
    if type(x).__module__.startswith("torch"):
        import torch

        t = x.detach().cpu().contiguous()
        return t.dtype, tuple(t.shape), t.reshape(-1).view(torch.uint8).numpy().tobytes()
    a = np.asarray(x)
    return a.dtype, a.shape, a.tobytes()


def same_bits(a, b) -> bool:
    """The same dtype, the same shape and the same bytes (so -0.0 is not 0.0, and a NaN only
    matches its own bits): arrays, array-likes, or torch tensors."""
    return _bytes(a) == _bytes(b)


def listing(directory=".") -> list[str]:
    """The names in ``directory``, sorted."""
    return sorted(os.listdir(directory))


def read_table(path, dtype="float32") -> np.ndarray:
    """The table in ``path`` (.npy, .npz or .safetensors), through the format's own reader;
    an .npz or .safetensors file holds the table and, in an .npz, its spec, and nothing else."""
    path = os.fspath(path)
    if path.endswith(".npy"):
        array = np.load(path, allow_pickle=False)
    elif path.endswith(".npz"):
        with np.load(path, allow_pickle=False) as archive:
            assert sorted(archive.files) == ["spec", "table"]
            array = archive["table"]
    else:
        from safetensors import safe_open

        with safe_open(path, framework="numpy") as f:
            assert list(f.keys()) == ["table"]
            array = f.get_tensor("table")
    if dtype == "bfloat16" and not path.endswith(".safetensors"):  # stored as its uint16 bits
        assert array.dtype == np.dtype("<u2")
        array = array.view(_dtypes.resolve(dtype))
    return array


def make_unavailable(monkeypatch, name):
    """Make ``name`` fail to load in this process, as when its import fails."""
    monkeypatch.delitem(_backends._modules, name, raising=False)
    monkeypatch.setitem(_backends._failures, name, "ImportError: simulated for a test")


#: the command line in a child whose signals are at their defaults, as a shell starts a
#: program (whatever this test run inherited); with "wait" first, its fsync of the complete
#: temporary file announces itself and waits there for the signal
SIGNALLED_CLI = textwrap.dedent(
    """
    import os, signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    if sys.argv[1] == "wait":
        real_fsync = os.fsync

        def fsync(fd):
            print("temporary file written", flush=True)
            time.sleep(60)
            real_fsync(fd)

        os.fsync = fsync
    from fastpe.cli import main
    main(sys.argv[2:], prog_name="fastpe")
    """
)


def signalled(args, cwd, wait: bool) -> subprocess.Popen:
    """``fastpe ARGS`` in a child started as a shell starts it (signals at their defaults);
    with ``wait``, it announces its complete temporary file and waits there for a signal."""
    return subprocess.Popen([sys.executable, "-c", SIGNALLED_CLI, "wait" if wait else "run", *args], cwd=cwd,
                            env=fastpe_env(keep_backend=True), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=signals_at_default)
