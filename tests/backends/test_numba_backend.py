"""The numba backend's policy: lazy, cached when it can be, safe when TBB is missing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import AVAILABLE, fastpe_env

#: every child it starts names its backend: the first run of make test decides it
#: (tests/conftest.py deselects it in the default-only runs)
pytestmark = [
    pytest.mark.skipif("numba" not in AVAILABLE, reason="numba backend not available"),
    pytest.mark.any_backend,
]


def _run(code: str, tmp_path, **env_extra) -> subprocess.CompletedProcess:
    env = fastpe_env(**env_extra)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )


def test_import_fastpe_does_not_import_numba(tmp_path):
    proc = _run(
        """
        import sys, fastpe
        assert "numba" not in sys.modules, "import fastpe pulled in numba"
        print("ok")
        """,
        tmp_path,
    )
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr


@pytest.mark.slow
def test_unwritable_cache_falls_back_to_uncached_compilation(tmp_path):
    """No cache directory can be created (a path below a regular file fails even for root)."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    proc = _run(
        """
        import numpy as np, fastpe
        from fastpe._backends.numba import kernels
        t = fastpe.table(6, 40000, backend="numba")
        ref = fastpe.table(6, 3, backend="python")
        assert np.array_equal(t[:3], ref)
        assert not kernels.sinusoid_range_parallel.cached
        print("ok")
        """,
        tmp_path,
        NUMBA_CACHE_DIR=str(blocker / "cache"),
        NUMBA_CACHE_LOCATOR_CLASSES="UserProvidedCacheLocator",
    )
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.slow
def test_cache_is_written_and_reused(tmp_path):
    cache = tmp_path / "cache"
    code = """
        import fastpe
        from fastpe._backends.numba import kernels
        fastpe.table(6, 40000, backend="numba")
        assert kernels.sinusoid_range_parallel.cached
        print("ok")
        """
    env = dict(NUMBA_CACHE_DIR=str(cache))
    first = _run(code, tmp_path, **env)
    assert first.returncode == 0, first.stderr
    files = sorted(p.name for p in cache.rglob("*") if p.is_file())
    assert any(name.endswith(".nbi") for name in files), files
    second = _run(code, tmp_path, **env)
    assert second.returncode == 0, second.stderr
    assert sorted(p.name for p in cache.rglob("*") if p.is_file()) == files


@pytest.mark.slow
def test_without_tbb_concurrent_callers_are_safe(tmp_path):
    """Where TBB cannot be loaded the workqueue layer is used; it would abort the process on
    concurrent parallel calls, so all but one caller must be routed to the serial kernel."""
    proc = _run(
        """
        import threading
        import numpy as np
        import fastpe._backends.numba._threads as th
        th._preload_tbb = lambda: None          # as on a machine without the tbb wheel
        import fastpe
        from fastpe._backends.numba import backend as _numba
        assert _numba.threading_layer() == "workqueue", _numba.threading_layer()
        assert not _numba.THREADING.thread_safe
        want = fastpe.table(128, 600, backend="numba")
        bad = []
        def work():
            for _ in range(30):
                if not np.array_equal(fastpe.table(128, 600, backend="numba"), want):
                    bad.append(1)
        ts = [threading.Thread(target=work) for _ in range(16)]
        [t.start() for t in ts]; [t.join() for t in ts]
        assert not bad
        print("ok")
        """,
        tmp_path,
    )
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr


def test_serial_and_parallel_twins_agree_bit_for_bit():
    from fastpe._backends.numba.backend import _planned
    from fastpe._backends.numba import kernels
    from fastpe._plans.words import sinusoid_turns

    turns, steps = _planned(sinusoid_turns, 131, 10000.0)
    pos = np.random.default_rng(1).integers(0, 2**32, size=999, dtype=np.uint64).astype(np.uint32)
    a = np.empty((999, 131), np.float32)
    b = np.empty_like(a)
    kernels.sinusoid_forward_parallel(pos, turns, steps, a)
    kernels.sinusoid_forward_serial(pos, turns, steps, b)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    kernels.sinusoid_range_parallel(2**32 - 999, turns, steps, a)
    kernels.sinusoid_range_serial(2**32 - 999, turns, steps, b)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_threading_layer_is_tbb_where_the_wheel_is_installed():
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("tbb")
    except PackageNotFoundError:
        pytest.skip("tbb wheel not installed")
    from fastpe._backends.numba import backend as _numba

    assert _numba.threading_layer() == "tbb", _numba.THREADING.note
