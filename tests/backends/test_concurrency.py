"""Safe under threads and fork: the conditions fastpe is imported under as a backend.

Measured facts these guard: numba's ``workqueue`` layer aborts the process on concurrent
callers; GNU OpenMP (numba's ``omp`` layer, or torch) leaves forked children hanging.  The
fork cases run in a fresh interpreter so a hang or an abort fails one test, with a timeout,
instead of taking the test run down.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import fastpe
from fastpe import PosEncConfig
from fastpe._diagnostics import ulp_distance
from conftest import fastpe_env

#: every backend it calls is named, or it calls none: the first run of make test decides it
#: (tests/conftest.py deselects it in the default-only runs)
pytestmark = pytest.mark.any_backend

N_THREADS = 16
N_CALLS = 50


def _shape(backend):
    # large enough that the compiled backends take their parallel path (>= 2**15 values)
    return (8, 10) if backend == "python" else (520, 126)


def test_sixteen_threads_at_once(backend):
    n, d = _shape(backend)
    calls = N_CALLS if backend != "python" else 3
    cfg = PosEncConfig(d)
    rng = np.random.default_rng(7)
    positions = [rng.integers(0, 2**32, size=n, dtype=np.uint64) for _ in range(N_THREADS)]
    exact = [fastpe.forward(p, cfg, np.empty((n, d), np.float32), backend="python") for p in positions]
    expected = [fastpe.forward(p, cfg, np.empty((n, d), np.float32), backend=backend) for p in positions]
    for e, x in zip(expected, exact):
        assert ulp_distance(e, x).max() <= 1
    failures: list[str] = []
    barrier = threading.Barrier(N_THREADS)

    def worker(k: int) -> None:
        try:
            barrier.wait()
            out = np.empty((n, d), np.float32)
            for _ in range(calls):
                out.fill(np.nan)
                fastpe.forward(positions[k], cfg, out, backend=backend)
                if not np.array_equal(out.view(np.uint32), expected[k].view(np.uint32)):
                    failures.append(f"thread {k}: result differs")
                    return
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(f"thread {k}: {exc!r}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not failures, failures


def test_threads_calling_table_and_forward_mixed(fast_backend):
    """Different kernels and sizes at once (small ones run serially, large ones in parallel)."""
    want_big = fastpe.table(130, 600, backend=fast_backend)
    want_small = fastpe.table(7, 5, backend=fast_backend)
    errors: list[str] = []

    def big():
        for _ in range(20):
            if not np.array_equal(fastpe.table(130, 600, backend=fast_backend), want_big):
                errors.append("big")

    def tiny():
        for _ in range(200):
            if not np.array_equal(fastpe.table(7, 5, backend=fast_backend), want_small):
                errors.append("small")

    threads = [threading.Thread(target=f) for f in (big, tiny, big, tiny, big)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors


def test_threads_calling_the_families(fast_backend):
    """The family kernels (tables in other layouts and dtypes, timesteps, grids, ALiBi, T5
    buckets) from many threads at once, large enough for their parallel paths: same bits
    as alone."""
    calls = {
        "halves": lambda: fastpe.table(130, 600, layout="halves", denominator="half-1", backend=fast_backend),
        "float64": lambda: fastpe.table(130, 600, dtype="float64", backend=fast_backend),
        "float16": lambda: fastpe.table(64, 300, dtype="float16", backend=fast_backend),
        "timestep": lambda: fastpe.timestep(np.linspace(0, 999, 600), 128, backend=fast_backend),
        "grid": lambda: fastpe.grid.sincos_2d(48, 48, 256, backend=fast_backend),
        "alibi": lambda: fastpe.alibi.bias(12, 200, form="causal", backend=fast_backend),
        "t5": lambda: fastpe.relative.t5_bucket_matrix(400, 300, backend=fast_backend),
    }
    want = {k: f() for k, f in calls.items()}
    errors: list[str] = []
    barrier = threading.Barrier(2 * len(calls))

    def worker(key):
        try:
            barrier.wait()
            for _ in range(10):
                if not np.array_equal(calls[key](), want[key]):
                    errors.append(key)
                    return
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(f"{key}: {exc!r}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in list(calls) * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors


FORK_SCRIPT = r"""
import os, sys, multiprocessing as mp
import numpy as np
import fastpe
from fastpe import PosEncConfig
from fastpe._diagnostics import ulp_distance

BACKEND = sys.argv[1]
WITH_TORCH = sys.argv[2] == "1"
N, D = (6, 10) if BACKEND == "python" else (600, 128)
CFG = PosEncConfig(D)
POS = np.random.default_rng(3).integers(0, 2**32, size=N, dtype=np.uint64)
EXACT = np.array(__import__("fastpe._exact.sinusoid_decimal", fromlist=["x"]).sinusoid(POS.tolist(), D, 1e4), np.float32)

def families():
    small = BACKEND == "python"
    n = 8 if small else 600
    return [
        fastpe.table(10 if small else 130, n, layout="halves", denominator="half-1", backend=BACKEND),
        fastpe.table(10 if small else 130, n, dtype="float64", backend=BACKEND),
        fastpe.timestep(np.linspace(0, 999, n), 64, backend=BACKEND),
        fastpe.grid.sincos_2d(3 if small else 40, 4 if small else 40, 16 if small else 256, backend=BACKEND),
        fastpe.alibi.bias(3 if small else 12, 5 if small else 200, form="causal", backend=BACKEND),
        fastpe.relative.t5_bucket_matrix(6 if small else 400, 7 if small else 300, backend=BACKEND),
    ]

FAMILIES = families()

def run():
    out = fastpe.forward(POS, CFG, np.empty((N, D), np.float32), backend=BACKEND)
    if not all(np.array_equal(a, b) for a, b in zip(families(), FAMILIES)):
        return 99
    return int(ulp_distance(out, EXACT).max())

def pool_task(_):
    return run()

assert run() <= 1                       # the parent uses fastpe (parallel path) first
if WITH_TORCH:
    import torch
    torch.set_num_threads(2)
    x = torch.rand(2000, 2000)
    (x @ x).sin().sum().item()          # torch's OpenMP pool is now running in the parent

pid = os.fork()
if pid == 0:                            # child: must complete, exactly
    code = 0 if run() <= 1 else 3
    os._exit(code)
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"os.fork child: status {status}"

ctx = mp.get_context("fork")
with ctx.Pool(2) as pool:
    worst = pool.map(pool_task, range(4))
assert max(worst) <= 1, worst
assert run() <= 1                       # and the parent still works afterwards
print("fork-ok", BACKEND, WITH_TORCH)
"""


def _torch_available() -> bool:
    try:
        import importlib.util

        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


@pytest.mark.slow
@pytest.mark.parametrize("with_torch", [False, True], ids=["plain", "after-torch-openmp"])
def test_fork_after_use(backend, with_torch, tmp_path):
    if with_torch and not _torch_available():
        pytest.skip("torch is not installed (an optional peer)")
    script = tmp_path / "fork_case.py"
    script.write_text(textwrap.dedent(FORK_SCRIPT))
    env = fastpe_env()
    try:
        proc = subprocess.run(
            [sys.executable, str(script), backend, "1" if with_torch else "0"],
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
            cwd=tmp_path,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"fork case hung: {exc}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fork-ok" in proc.stdout


#: a host process that starts numba's thread pool (on the layer $NUMBA_THREADING_LAYER
#: names) before fastpe loads; prints what fastpe then warned about
POOL_FIRST_SCRIPT = r"""
import warnings
import numba

@numba.njit(parallel=True)
def total(n):
    s = 0
    for i in numba.prange(n):
        s += i
    return s

try:
    total(1000)
except Exception as exc:  # the layer asked for does not load here
    print("no-layer", type(exc).__name__)
    raise SystemExit(0)
from numba.np.ufunc import omppool
print("layer", numba.threading_layer(), getattr(omppool, "openmp_vendor", None))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import fastpe
    fastpe.table(8, 4, backend="numba")  # the line that loads fastpe's numba backend
for w in caught:
    print("warning", w.category.__name__, w.filename, w.lineno, "|", str(w.message))
from fastpe._backends.numba import backend as _numba
print("fork-safe", _numba.THREADING.fork_safe)
"""


@pytest.mark.slow
@pytest.mark.parametrize("layer", ["omp", "workqueue"])
def test_a_pool_started_before_fastpe_on_gnu_openmp_warns(tmp_path, layer):
    """The layer is fixed once numba's pool runs; on GNU OpenMP a fork after a parallel
    kernel kills or hangs the child, so fastpe warns, naming the layer and the ways out."""
    proc = subprocess.run([sys.executable, "-c", POOL_FIRST_SCRIPT], capture_output=True, text=True, timeout=240,
                          env=fastpe_env(NUMBA_THREADING_LAYER=layer), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    if lines[0].startswith("no-layer"):
        pytest.skip(f"numba's {layer} layer does not load here ({lines[0]})")
    _, got, vendor = lines[0].split()
    assert got == layer
    warned = [line for line in lines if line.startswith("warning ")]
    if layer == "omp" and vendor != "Intel":  # Intel's OpenMP survives fork; GNU's does not
        (line,) = warned
        head, message = line.split(" | ")
        caller = next(n for n, text in enumerate(POOL_FIRST_SCRIPT.splitlines(), 1) if "loads fastpe's numba" in text)
        assert head.split()[1:] == ["RuntimeWarning", "<string>", str(caller)]  # points at the caller's line
        assert "'omp' threading layer" in message and "fork()" in message
        assert "'spawn' or 'forkserver'" in message and "NUMBA_THREADING_LAYER=workqueue" in message
        assert lines[-1] == "fork-safe False"
    else:
        assert warned == [] and lines[-1] == "fork-safe True"
