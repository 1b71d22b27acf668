"""fastpe against its peers and this machine's write limit, in one pytest-benchmark run.

One group per workload; in each, every fastpe backend, the peers and the yardstick are timed
in the same process, one after the other (see ``peers.py`` for what each row computes).
Two more groups hold the CLI goal (whole-process time) and the peak-memory figure (a test
here asserts its limit; the report shows it).

The machine this runs on may be small and shared, so: every implementation is warmed up
(JIT compiled or loaded from cache, thread pools started, allocator primed) before timing;
each is then timed for a fixed budget of rounds, and the report uses medians.  A round is
one call, except for work of microseconds (a decode step's rotation): there the timer's
resolution and the cost of the timing loop itself would be a large part of one call, so a
round times a batch of calls (enough for :data:`BATCH_S`) and pytest-benchmark divides by
their number (``iterations``); the report says so beside those rows.  ``python -m pytest bench/ --benchmark-json=RUN.json`` takes a few minutes;
``python bench/report.py RUN.json`` turns the result into the README's table.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import fastpe
from peers import (
    CASES,
    IMPLEMENTATIONS,
    ROPE_INV_FREQ,
    WORKLOADS,
    Implementation,
    Unavailable,
    Workload,
    fastpe_family,
    reference_slice,
)

#: $FASTPE_BENCH_SCALE multiplies the timing budgets (bench/compare.py re-measures with 2)
SCALE = float(os.environ.get("FASTPE_BENCH_SCALE", "1") or 1)
#: seconds of timed rounds per implementation and workload (after warm-up): fastpe's own
#: rows get more, since bench-compare gates on their medians
BUDGET_S = {"fastpe": 3.0 * SCALE, "yardstick": 1.5 * SCALE, "peer": 1.5 * SCALE}
#: warm-up: one uncounted call, then timed calls until WARM_S has passed (at least one, at most MAX_WARM)
WARM_S, MAX_WARM = 0.3, 20
#: rounds: medians need enough of them; the slow peers on the large table get the minimum
MIN_ROUNDS = {"fastpe": 10, "yardstick": 5, "peer": 3, "reference": 3}
MAX_ROUNDS = int(300 * SCALE)
#: calls faster than this are timed in batches: a round lasts at least BATCH_S
BATCH_BELOW_S, BATCH_S = 100e-6, 2e-3

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(fastpe.__file__)))
MiB = 1 << 20


def child_env() -> dict[str, str]:
    """Environment for child interpreters: the fastpe under test, the automatic backend."""
    env = dict(os.environ)
    env.pop("FASTPE_BACKEND", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    return env


def warm_up(fn) -> float:
    """Call ``fn`` until warm; return the fastest warm call's time in seconds.

    A callable with a ``setup`` (an in-place workload) has its input restored before every
    call, untimed, here as in the timed rounds.
    """
    setup = getattr(fn, "setup", None) or (lambda: None)
    setup()
    fn()  # the first call compiles or loads the JIT cache: never counted
    best = math.inf
    start = time.perf_counter()
    for _ in range(MAX_WARM):
        setup()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        if time.perf_counter() - start >= WARM_S:
            break
    return best


def iterations_for(fn, seconds_per_call: float) -> int:
    """Calls per round: 1, or a batch lasting about BATCH_S for calls of microseconds (a
    callable with a ``setup`` restores its input before every call: always 1)."""
    if getattr(fn, "setup", None) is not None or seconds_per_call >= BATCH_BELOW_S:
        return 1
    return max(1, math.ceil(BATCH_S / max(seconds_per_call, 1e-9)))


def rounds_for(im: Implementation, seconds_per_call: float) -> int:
    if im.role == "reference":
        return MIN_ROUNDS["reference"]
    wanted = math.ceil(BUDGET_S[im.role] / max(seconds_per_call, 1e-9))
    return int(min(MAX_ROUNDS, max(MIN_ROUNDS[im.role], wanted)))


def info(w: Workload, im: Implementation, **more) -> dict:
    rows = w.rows_measured(im.role)
    label, note = reference_slice(w) if (w.is_family and im.role == "reference") else (im.label_for(w), im.note)
    return {
        "workload": w.key,
        "workload_title": w.title,
        "kind": w.kind,
        "implementation": im.key,
        "label": label,
        "role": im.role,
        "backend": im.backend,
        "rows": w.rows,
        "rows_measured": rows,
        "d_model": w.d_model,
        "bytes_written": rows * w.d_model * w.itemsize,
        "bytes": w.nbytes,
        "dtype": w.dtype,
        "output": _output(w),
        "note": note,
        **more,
    }


def _output(w: Workload) -> str:
    if w.kind == "add":
        return "in place (input restored before each round, untimed)"
    if w.kind in ("rope_apply_qk", "rope_decode", "xpos_qk", "xpos_decode"):
        return "in place"
    if w.kind == "forward":
        return "preallocated once"
    return "fresh array per call"


#: the workload on which every fastpe backend and peer is first checked against fastpe
CHECKED = "table-2048x512"


def check_agrees(result, w: Workload) -> None:
    """The row computes the same table (layout included), to float32-formula accuracy.

    Guards the peers' code: a row that timed a different table would compare nothing.  The
    tutorial formula in float32 is off by up to ~n * 2**-24 radians at position n.
    """
    got = np.asarray(result).reshape(w.rows, w.d_model)
    want = fastpe.table(w.d_model, w.rows)
    err = float(np.max(np.abs(got.astype(np.float64) - want)))
    assert err < 4 * w.rows * 2.0**-24, f"differs from fastpe.table by up to {err:.3g}"


def check_table_f16_agrees(result, w: Workload, role: str) -> None:
    """A float16 table row: fastpe's backends give the correctly rounded values (identical to
    the default backend's); a peer's float32 table cast to float16 is within half a float16
    ULP at 1 (2**-11) plus its float32 formula's error."""
    got = np.asarray(result).reshape(w.rows, w.d_model)
    assert got.dtype == np.float16, f"a {got.dtype} table, not float16"
    want = fastpe.table(w.d_model, w.rows, dtype="float16")
    err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
    tol = 0.0 if role == "fastpe" else 2.0**-11 + 4 * w.rows * 2.0**-24
    assert err <= tol, f"differs from fastpe.table(dtype='float16') by up to {err:.3g}"


def check_rope_agrees(result, w: Workload) -> None:
    """A RoPE row computes RoPE (NeoX layout), to float32-formula accuracy: float32 angles
    ``p * f`` are off by up to ``p * 2**-24`` radians.  Checked on a slice, in float64."""
    positions = w.rope_positions.astype(np.float64)
    angle = positions[:, None] * ROPE_INV_FREQ[None, :]
    cos, sin = np.cos(angle), np.sin(angle)
    tol = 8 * (float(positions.max()) + 1) * 2.0**-24
    if w.kind == "rope_cos_sin":
        got_c, got_s = (np.asarray(a, dtype=np.float64).reshape(w.shape) for a in result)  # HF: (1, n, d)
        for got, want in ((got_c, cos), (got_s, sin)):
            assert got.shape == w.shape
            err = float(np.max(np.abs(got - np.concatenate([want, want], axis=1))))
            assert err < tol, f"differs from cos/sin by up to {err:.3g}"
        return
    half = w.shape[-1] // 2
    for got, x in zip(result, w.rope_qk):
        x = x[:1, :2].astype(np.float64)
        got = np.asarray(got)[:1, :2].astype(np.float64)
        x1, x2 = x[..., :half], x[..., half:]
        want = np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
        err = float(np.max(np.abs(got - want)))
        assert err < tol * float(np.max(np.abs(x))), f"differs from the rotation by up to {err:.3g}"


def _family_tolerance(w: Workload, role: str, want: np.ndarray):
    """How far a row may be from fastpe's values: the error of the peers' float32 formulas
    (angles ``p * w`` rounded: about ``p * 2**-24`` radians at position ``p``).  fastpe's own
    float16 rows must be identical: the correctly rounded value is unique."""
    f32 = 2.0**-24
    if w.kind == "family_table":
        if w.dtype == "float16":
            return 0.0 if role != "peer" else 2.0**-11 + 4 * w.rows * f32
        return 4 * w.rows * f32
    if w.kind == "grid":
        return 8 * max(w.shape) * f32 + 2 * f32
    if w.kind == "timestep":
        return 8 * float(w.timesteps.max()) * f32 + 2 * f32
    if w.kind == "add":  # the encoding's error, plus a few ULPs of x * s + pe
        return 4 * w.shape[1] * f32 + 4 * f32 * float(np.max(np.abs(want)))
    if w.kind == "alibi":
        # a float32 slope times the distance: a few ULPs of the value; BLOOM raises a float32
        # base to the head's power, off by up to ~10 * 2**-24 (relative) at 32 heads
        return lambda v: np.where(np.isfinite(v), 16 * f32 * np.abs(v), 0.0)
    if w.kind == "axial":  # FLUX forms its angles in float64 and rounds each value once
        return 4 * f32
    if w.kind == "relative_table":  # Transformer-XL's and NeMo's float32 angles p * w
        return 4 * w.rows * f32
    if w.kind == "sandwich":  # NeMo sums hundreds of float32 cosines of float32 angles
        return lambda v: 2.0**-12 * np.maximum(np.abs(v), 1.0)
    if w.kind == "fourier":  # Prophet's float64 angles 2 pi k t / P of day counts near 2e4
        return 0.0 if role != "peer" else 1e-9
    if w.kind == "time_encoding":  # TGN's float32 products t * w of times up to ~4 months in seconds
        return 0.0 if role != "peer" else 4 * 30 * 86400 * f32 + 2 * f32
    return 0.0  # T5/DeBERTa buckets, Shaw, M-RoPE: integers; calendar: rationals;
    # temporal: the module's sums with fastpe's tables plugged in


#: values compared at a time (the ALiBi bias is 128M values: a float64 copy of it is 1 GiB)
_CHUNK = 1 << 22


def check_family_agrees(result, w: Workload, im: Implementation) -> dict:
    """A family row computes what fastpe computes (same shape of values, same layout), within
    :func:`_family_tolerance`.  Returns the figures for the report: the largest difference and
    how many values are not identical to fastpe's."""
    want_fn = fastpe_family(w, None, w.rows_measured(im.role))
    if hasattr(want_fn, "setup"):
        want_fn.setup()
    want = np.asarray(want_fn())
    got = np.asarray(result)
    assert got.size == want.size, f"{got.shape} values, fastpe has {want.shape}"
    got, want = got.reshape(-1), want.reshape(-1)
    tol = _family_tolerance(w, im.role, want)
    worst, differing, bad = 0.0, 0, 0
    for i in range(0, want.size, _CHUNK):
        g = got[i:i + _CHUNK].astype(np.float64)
        v = want[i:i + _CHUNK].astype(np.float64)
        with np.errstate(invalid="ignore"):  # inf - inf
            err = np.abs(g - v)
        err[g == v] = 0.0  # equal infinities (the causal mask)
        err[np.isnan(err)] = np.inf  # an infinity on one side only
        worst = max(worst, float(err.max(initial=0.0)))
        differing += int(np.count_nonzero(err))
        bad += int(np.count_nonzero(err > (tol(v) if callable(tol) else tol)))
    assert bad == 0, f"{bad} of {want.size} values differ from fastpe beyond the tolerance (up to {worst:.3g})"
    return {"max_abs_diff": worst, "values_differing": differing, "values": int(want.size)}


@pytest.mark.parametrize(
    "workload_key, impl_key", [(w.key, im.key) for w, im in CASES], ids=[f"{w.key}-{im.key}" for w, im in CASES]
)
def test_speed(benchmark, workload_key: str, impl_key: str):
    workload, impl = WORKLOADS[workload_key], IMPLEMENTATIONS[impl_key]
    benchmark.group = workload.title
    try:
        fn = impl.make(workload)
    except Unavailable as exc:
        pytest.skip(f"{impl.label}: {exc}")
    if workload.key == CHECKED and impl.role in ("fastpe", "peer"):
        check_agrees(fn(), workload)
    if workload.kind == "table" and workload.dtype == "float16" and impl.role in ("fastpe", "peer"):
        check_table_f16_agrees(fn(), workload, impl.role)
    if workload.is_rope and impl.role in ("fastpe", "peer"):
        check_rope_agrees(fn(), workload)  # the first call: q and k rotated once
    setup = getattr(fn, "setup", None)
    agreement = {}
    if workload.is_family and impl.role != "yardstick":
        if setup:
            setup()
        agreement = {"agreement": check_family_agrees(fn(), workload, impl)}
    per_call = warm_up(fn)
    iterations = iterations_for(fn, per_call)
    rounds = rounds_for(impl, per_call * iterations)
    benchmark.extra_info.update(info(workload, impl, rounds_planned=rounds, iterations=iterations, **agreement))
    paired = getattr(fn, "paired", None)  # the torch bridge's pair, alternated round by round (peers.Alternated)
    if paired:
        fn.other_times.clear()  # the warm-up's calls are not the rounds'
    # a batched round is microseconds of work: one uncounted round more settles the caches
    benchmark.pedantic(fn, setup=setup, rounds=rounds, iterations=iterations, warmup_rounds=int(iterations > 1))
    if paired and benchmark.stats:  # no stats under --benchmark-disable
        benchmark.extra_info["paired"] = paired(list(benchmark.stats.stats.data))


# ------------------------------------------------------------------------ the goals' pairs

#: the pairs the goals compare (bench/report.py): (workload, the other row's implementation);
#: fastpe's side is the default backend's row.  Each pair is timed again in the same rounds,
#: alternating which call runs first: on a shared machine the load drifts between rows timed
#: seconds apart (one run's apply_qk_ row had a median 34% above its best while its
#: yardstick, timed before it, did not), and a per-round ratio does not drift with it.
#: Only calls of milliseconds are paired.  Under a millisecond a row's rounds take a second
#: or two and drift little, while alternating would measure something else: a thread pool
#: that goes idle during the other side's call pays its wake-up on this VM (fastpe's table
#: 2048x512 took 257-290 us between numba fills against 139 us back to back, a 2 ms idle
#: gap before each call made it 587 us), which calls back to back do not
GOAL_PAIRS = (
    ("table-131072x1024", "torch-tutorial"),
    ("table-131072x1024", "yardstick-fill"),
    ("table-131072x1024", "yardstick-numba"),
    ("rope-apply-qk-1x32x4096x128", "hf-torch-rope"),
    ("rope-apply-qk-1x32x4096x128", "yardstick-inplace"),
)
#: seconds of paired rounds per pair, and the fewest rounds (the slow peers' large table)
PAIR_BUDGET_S, MIN_PAIR_ROUNDS = 3.0 * SCALE, 8


def _timed(fn, setup, n: int) -> float:
    """Seconds per call of ``n`` calls (``setup`` restores an in-place input first, untimed)."""
    setup()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


@pytest.mark.parametrize("workload_key, other_key", GOAL_PAIRS, ids=[f"{w}-{o}" for w, o in GOAL_PAIRS])
def test_goal_pair(benchmark, workload_key: str, other_key: str):
    from statistics import median

    from fastpe import _backends

    w = WORKLOADS[workload_key]
    ours_key = _backends.resolve(None)[0]
    sides = (IMPLEMENTATIONS[ours_key], IMPLEMENTATIONS[other_key])
    benchmark.group = f"paired rounds: {w.title}"
    try:
        fns = [im.make(w) for im in sides]
    except Unavailable as exc:
        pytest.skip(f"{workload_key} / {other_key}: {exc}")
    plan = []
    for fn in fns:
        per_call = warm_up(fn)
        plan.append((fn, getattr(fn, "setup", None) or (lambda: None), iterations_for(fn, per_call), per_call))
    per_round = sum(n * per_call for _, _, n, per_call in plan)
    rounds = int(min(MAX_ROUNDS, max(MIN_PAIR_ROUNDS, math.ceil(PAIR_BUDGET_S / max(per_round, 1e-9)))))
    times: tuple[list[float], list[float]] = ([], [])

    def one_round():
        first = len(times[0]) % 2  # which side runs first alternates round by round
        for i in (first, 1 - first):
            fn, setup, n, _ = plan[i]
            times[i].append(_timed(fn, setup, n))

    benchmark.pedantic(one_round, rounds=rounds, iterations=1)
    ours, other = times
    benchmark.extra_info["goal_pair"] = {
        "workload": workload_key,
        "ours": ours_key,
        "ours_label": sides[0].label_for(w),
        "other": other_key,
        "other_label": sides[1].label_for(w),
        "rounds": len(ours),
        "ours_median": median(ours),
        "other_median": median(other),
        "ratio_median": median(a / b for a, b in zip(ours, other)),
    }


# ------------------------------------------------------------------------- the CLI goal

CLI_GROUP = "cli: one process writes a 2048x512 float32 table to .npy"
CLI_SHAPE = (2048, 512)


def _fastpe_command() -> list[str]:
    """The installed ``fastpe`` command beside this interpreter (what a user types), else
    ``python -m fastpe`` (a checkout run without installing)."""
    script = os.path.join(os.path.dirname(sys.executable), "fastpe")
    return [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "fastpe"]


def _cli_commands(path: str) -> dict[str, list[str]]:
    rows, cols = CLI_SHAPE
    return {
        "fastpe-cli": [
            *_fastpe_command(), "table",
            "--d-model", str(cols), "--max-len", str(rows), "-o", path,
        ],
        "numpy-save": [
            sys.executable, "-c",
            f"import numpy as np; np.save({path!r}, np.zeros(({rows}, {cols}), dtype=np.float32))",
        ],
    }


CLI_LABELS = {
    "fastpe-cli": f"{' '.join(os.path.basename(a) for a in _fastpe_command())} table "
    f"--d-model {CLI_SHAPE[1]} --max-len {CLI_SHAPE[0]} -o tmp.npy",
    "numpy-save": "python -c \"import numpy as np; np.save('tmp.npy', np.zeros((2048, 512), np.float32))\"",
}


@pytest.mark.parametrize("impl", ["fastpe-cli", "numpy-save"])
def test_cli_process(benchmark, tmp_path, impl):
    benchmark.group = CLI_GROUP
    path = str(tmp_path / "tmp.npy")
    cmd = _cli_commands(path)[impl]
    env = child_env()

    def run():
        done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode:
            pytest.fail(f"{' '.join(cmd)} failed (exit status {done.returncode}):\n{done.stderr}")

    if impl == "fastpe-cli":
        # fastpe's bytecode, as an installed wheel has it (and numpy's wheel has its own): an
        # editable install under PYTHONDONTWRITEBYTECODE=1 would recompile fastpe every run
        import compileall

        compileall.compile_dir(os.path.dirname(fastpe.__file__), quiet=1)
    run()  # numba's on-disk cache is filled by now: later processes only load it
    benchmark.extra_info.update(
        {
            "workload": "cli-2048x512",
            "workload_title": CLI_GROUP,
            "kind": "process",
            "implementation": impl,
            "label": CLI_LABELS[impl],
            "role": "fastpe" if impl == "fastpe-cli" else "peer",
            "rows": CLI_SHAPE[0],
            "d_model": CLI_SHAPE[1],
            "bytes_written": CLI_SHAPE[0] * CLI_SHAPE[1] * 4,
            "note": "whole process: interpreter start, imports, compute, write",
        }
    )
    benchmark.pedantic(run, rounds=7, iterations=1, warmup_rounds=1)
    saved = np.load(path)
    assert saved.shape == CLI_SHAPE and saved.dtype == np.float32


# ------------------------------------------------------------------------ peak memory

MEM_GROUP = "peak memory: fastpe.table(1024, 131072) in a fresh process"
MEM_SLACK = 64 * MiB

_MEM_PROBE = textwrap.dedent(
    """
    import json, os, resource, sys

    # A process started by exec() inherits the exec-ing process's peak RSS in ru_maxrss
    # (Linux keeps the larger of the two across exec): started from pytest, that would be
    # pytest's peak.  A child forked now, while this interpreter is small, starts afresh.
    pid = os.fork()
    if pid:
        sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))

    import fastpe
    from fastpe import _backends

    def status(field):
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024

    def maxrss():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    # warm-up: load the backend, its cached kernels (serial and parallel), the thread pool
    fastpe.table(1024, 8)
    fastpe.table(1024, 64)
    baseline = status("VmRSS")
    peak_before = maxrss()
    out = fastpe.table(1024, 131072)
    print(json.dumps({
        "backend": _backends.resolve(None)[0], "baseline_rss": baseline,
        "peak_rss_before_call": peak_before, "peak_rss": maxrss(), "vm_hwm": status("VmHWM"),
        "output_bytes": int(out.nbytes),
    }))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_peak_memory(benchmark):
    """Peak RSS of one large table call, above the warmed-up process's RSS (one process)."""
    benchmark.group = MEM_GROUP
    env = child_env()
    found = {}

    def probe():
        done = subprocess.run([sys.executable, "-c", _MEM_PROBE], env=env, capture_output=True, text=True)
        if done.returncode:
            pytest.fail(f"memory probe failed (exit status {done.returncode}):\n{done.stderr}")
        found.update(json.loads(done.stdout.strip().splitlines()[-1]))

    # timed only so the figures land in the saved run; the time is of no interest
    benchmark.pedantic(probe, rounds=1, iterations=1, warmup_rounds=1)
    extra = found["peak_rss"] - found["baseline_rss"]
    limit = found["output_bytes"] + MEM_SLACK
    benchmark.extra_info.update(
        {
            "workload": "memory-131072x1024",
            "workload_title": MEM_GROUP,
            "kind": "memory",
            "implementation": f"fastpe {found['backend']}",
            "label": f"fastpe.table(1024, 131072), backend {found['backend']}",
            "role": "memory",
            "rows": 131072,
            "d_model": 1024,
            "bytes_written": found["output_bytes"],
            "peak_extra_bytes": extra,
            "limit_bytes": limit,
            "note": "peak RSS (getrusage ru_maxrss) minus VmRSS after imports and warm-up",
            **found,
        }
    )
    assert found["peak_rss"] > found["peak_rss_before_call"], "the call did not raise the peak: no measurement"
    assert extra <= limit, (
        f"peak RSS rose {extra / MiB:.1f} MiB for a {found['output_bytes'] / MiB:.0f} MiB table "
        f"(limit: output + {MEM_SLACK // MiB} MiB)"
    )
