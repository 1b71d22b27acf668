"""What a command run imports: only what that run needs.

A ``fastpe table`` run is mostly interpreter start and imports, so the modules it does not
need stay out of it: numba (when the backend is cython), the other commands' modules, the
diagnostics, the ``.npz`` and ``.safetensors`` code for a ``.npy``, ``secrets`` (a temporary
file's name is ``os.urandom``), ml_dtypes for a float32 table.  Each check runs the command line's ``main`` in a fresh interpreter and reads
``sys.modules`` at its end; nothing here is timed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastpe
from conftest import fastpe_env

#: runs ``main`` with the arguments given, then writes the sorted module names to stderr
_RUN_MAIN = textwrap.dedent(
    """
    import json, sys
    from fastpe.cli import main
    try:
        main(sys.argv[1:], prog_name="fastpe")
    except SystemExit as exc:
        assert exc.code == 0, exc.code
    sys.stderr.write(json.dumps(sorted(sys.modules)))
    """
)

#: the command modules a ``table`` run does not need
OTHER_COMMANDS = ("alibi", "check", "grid", "info", "plot", "rope", "rope_axial", "t5", "timestep")


def _modules_after(args, cwd, **env) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", _RUN_MAIN, *args], cwd=cwd, env=fastpe_env(**env),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stderr))


def _tops(modules: set[str], *names: str) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in names)


def _needs_cython():
    if "cython" not in fastpe.available_backends():
        pytest.skip("the cython backend is not built here")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["--backend", "FASTPE_BACKEND", "automatic"])
def test_table_run_with_cython_imports_only_what_it_needs(tmp_path, how):
    _needs_cython()
    args = ["table", "--d-model", "512", "--max-len", "2048"]
    env = {}
    if how == "--backend":
        args += ["--backend", "cython"]
    elif how == "FASTPE_BACKEND":
        env["FASTPE_BACKEND"] = "cython"
    modules = _modules_after(args, tmp_path, **env)
    assert "fastpe._backends.cython" in modules and "fastpe.cli.table" in modules  # it did run
    assert _tops(modules, "numba", "llvmlite") == []
    assert sorted(m for m in modules if m.startswith("fastpe._backends.numba")) == []
    assert sorted(m for m in modules if m.startswith("fastpe.cli.") and m.split(".")[2] in OTHER_COMMANDS) == []
    assert "fastpe._diagnostics" not in modules
    assert {"fastpe._io._npz", "fastpe._io._safetensors"}.isdisjoint(modules)  # the other formats' code
    assert _tops(modules, "secrets", "hmac", "random", "ml_dtypes") == []
    saved = np.load(tmp_path / "pe_2048x512.npy")
    assert saved.tobytes() == fastpe.table(512, 2048, backend="cython").tobytes()


@pytest.mark.slow
def test_help_loads_every_command_and_one_command_only_its_own(tmp_path):
    assert {f"fastpe.cli.{name}" for name in OTHER_COMMANDS} <= _modules_after(["--help"], tmp_path)
    only_rope = _modules_after(["rope", "--help"], tmp_path)
    assert "fastpe.cli.rope" in only_rope
    assert sorted(m for m in only_rope if m.startswith("fastpe.cli.") and m.split(".")[2] in
                  set(OTHER_COMMANDS) - {"rope"} | {"table"}) == []


@pytest.mark.slow
def test_import_fastpe_leaves_the_writers_and_diagnostics_for_first_use(tmp_path):
    code = textwrap.dedent(
        """
        import sys
        import fastpe
        before = sorted(sys.modules)
        import json
        from fastpe import *  # every name of __all__ resolves
        from fastpe._io.save import save_table
        from fastpe._diagnostics import info
        assert fastpe.save_table is save_table and fastpe.info is info
        assert {"save_table", "info", "rope", "alibi"} <= set(dir(fastpe))
        sys.stderr.write(json.dumps(before))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=fastpe_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    before = set(json.loads(proc.stderr))
    assert {"fastpe._io.save", "fastpe._io.writers", "fastpe._io.atomic", "fastpe._diagnostics"}.isdisjoint(before)
    assert _tops(before, "numba", "llvmlite", "click", "json", "shutil", "secrets", "ml_dtypes") == []


@pytest.mark.slow
def test_commands_register_once_when_threads_ask_together(tmp_path):
    code = textwrap.dedent(
        """
        import threading
        import fastpe.cli as cli
        got, start = [], threading.Barrier(8)

        def ask():
            start.wait()
            got.append(cli.main.get_command(None, "rope"))

        threads = [threading.Thread(target=ask) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(got) == 8 and all(c is got[0] for c in got), got
        opts = [o for p in got[0].params for o in getattr(p, "opts", ())]
        assert opts.count("-q") == 1 and opts.count("-v") == 1, opts
        assert [c.name for c in cli.COMMANDS] == list(cli._COMMAND_SOURCES)
        assert sorted(cli.main.commands) == sorted(cli._COMMAND_SOURCES)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=fastpe_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
