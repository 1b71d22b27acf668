"""The scaling plot: time against rows for d_model 512 float32 tables, log-log.

Usage::

    python bench/scaling.py [-o docs/img/scaling.png] [--repeats 7] [--max-exp 20]

For 2**8 .. 2**20 rows (d_model 512, float32, a fresh table per call) it times, on 1 and on 2
threads: fastpe's default backend (``fastpe.table``), the PyTorch tutorial module's
computation (``torch_tutorial`` of ``bench/peers.py``, torch's intra-op pool of that many
threads) and the fresh write of the same bytes (``np.empty`` then a fill: NumPy's
``fill(0)`` or numba's ``prange`` fill, whichever is faster at that size: the yardstick of
the benchmark suite).  Each thread count runs in its own child process, started with
``NUMBA_NUM_THREADS`` (and ``OMP_NUM_THREADS``) set and confined to that many CPUs
(``os.sched_setaffinity``, which fastpe's cython backend sizes its threads by) before
anything is imported; torch gets ``torch.set_num_threads``.  Every size is timed at least
``repeats`` times (a fast row more, until its timings last about 0.2 s), the implementations
taking turns so load on a shared machine falls on all of them alike; the
plot shows medians, and the JSON written beside it (same name, ``.json``) every timing.

Writes the PNG and the JSON; reads nothing else.  Needs matplotlib, torch and numba.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(ROOT, "docs", "img", "scaling.png")
D_MODEL = 512
#: a size's timings (per implementation) should last about this long: small sizes repeat more
TARGET_S = 0.2
MAX_REPEATS = 200


def _usable_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux: no pinning
        return list(range(os.cpu_count() or 1))


# ------------------------------------------------------------------------------ the child


def child(threads: int, exps: list[int], repeats: int) -> dict:
    """Time every implementation at every size on ``threads`` threads (this process was
    started confined to that many CPUs, with NUMBA_NUM_THREADS set)."""
    import numpy as np
    import torch

    sys.path.insert(0, HERE)
    import fastpe
    from fastpe import _backends
    from peers import numba_fill, torch_tutorial

    torch.set_num_threads(threads)
    fill = numba_fill()
    backend = _backends.resolve(None)[0]
    info = fastpe.info()

    def fastpe_call(n):
        return lambda: fastpe.table(D_MODEL, n)

    def torch_call(n):
        return lambda: torch_tutorial(torch.arange(n, dtype=torch.float32).unsqueeze(1), D_MODEL, None)

    def numpy_fill_call(n):
        def run():
            a = np.empty((n, D_MODEL), dtype=np.float32)
            a.fill(0)
            return a

        return run

    def numba_fill_call(n):
        def run():
            a = np.empty((n, D_MODEL), dtype=np.float32)
            fill(a.reshape(-1))
            return a

        return run

    makers = {"fastpe": fastpe_call, "torch": torch_call, "fill-numpy": numpy_fill_call, "fill-numba": numba_fill_call}
    # checked once, small: the rows time the same table
    want = fastpe.table(D_MODEL, 256)
    got = torch_call(256)().numpy()
    assert float(np.max(np.abs(got - want))) < 4 * 256 * 2.0**-24, "the torch row computes another table"

    times: dict[str, list[list[float]]] = {name: [] for name in makers}
    for e in exps:
        n = 1 << e
        calls = {name: make(n) for name, make in makers.items()}
        first = {}
        for name, call in calls.items():  # warm-up: compile or load, start pools, prime the allocator
            call()
            t0 = time.perf_counter()
            call()
            first[name] = time.perf_counter() - t0
        # each its own count (a fast row repeats more); turns taken while any still needs one
        reps = {name: max(repeats, min(MAX_REPEATS, math.ceil(TARGET_S / max(t, 1e-9)))) for name, t in first.items()}
        per = {name: [] for name in calls}
        for i in range(max(reps.values())):
            for name, call in calls.items():
                if i >= reps[name]:
                    continue
                t0 = time.perf_counter()
                out = call()
                per[name].append(time.perf_counter() - t0)
                del out
        for name in calls:
            times[name].append(per[name])
        print(
            f"  {threads} thread(s), 2^{e} rows: "
            + ", ".join(f"{name} {statistics.median(v) * 1e3:.3g} ms" for name, v in per.items()),
            file=sys.stderr, flush=True,
        )
    return {
        "threads": threads,
        "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "fastpe_backend": backend,
        "numba_threads": info.get("threads"),
        "cython_threads": info.get("cython_threads"),
        "torch_threads": torch.get_num_threads(),
        "times_s": times,
    }


# ----------------------------------------------------------------------------- the parent


def measure(exps: list[int], repeats: int, thread_counts: list[int]) -> dict:
    cpus = _usable_cpus()
    runs = []
    for threads in thread_counts:
        env = dict(os.environ)
        for var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = str(threads)
        env.pop("FASTPE_BACKEND", None)  # the default backend, as a user gets it
        env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
        code = (
            "import os, sys, json; "
            f"os.sched_setaffinity(0, {cpus[:threads]!r}) if hasattr(os, 'sched_setaffinity') else None; "
            f"sys.path.insert(0, {HERE!r}); import scaling; "
            f"print(json.dumps(scaling.child({threads}, {exps!r}, {repeats})))"
        )
        print(f"scaling: {threads} thread(s) on cpus {cpus[:threads]}", file=sys.stderr, flush=True)
        done = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        if done.returncode:
            raise SystemExit(f"scaling: the {threads}-thread child failed (exit status {done.returncode})")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return runs


def stamp() -> dict:
    sys.path.insert(0, HERE)
    from conftest import stamp as bench_stamp

    s = bench_stamp()
    s.pop("argv", None)
    return s


def summarise(runs: list[dict], exps: list[int], repeats: int, started: tuple | None) -> dict:
    series = []
    for run in runs:
        t = run["threads"]
        medians = {name: [statistics.median(v) for v in per_size] for name, per_size in run["times_s"].items()}
        fill = [min(a, b) for a, b in zip(medians["fill-numpy"], medians["fill-numba"])]
        series += [
            {"name": f"fastpe {run['fastpe_backend']}", "threads": t, "median_s": medians["fastpe"]},
            {"name": "torch tutorial module", "threads": t, "median_s": medians["torch"]},
            {"name": "fresh write (np.empty + fill)", "threads": t, "median_s": fill,
             "note": "the faster of NumPy's fill(0) (one thread) and numba's prange fill, per size"},
        ]
    return {
        "what": f"time of one fresh (rows, {D_MODEL}) float32 table, median of repeats, per thread count",
        "d_model": D_MODEL,
        "dtype": "float32",
        "rows": [1 << e for e in exps],
        "min_repeats": repeats,
        "series": series,
        "runs": runs,
        "loadavg_at_start": started,
        "loadavg_at_end": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "stamp": stamp(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    colors = {"fastpe": "tab:blue", "torch": "tab:red", "fresh": "tab:gray"}
    styles = {1: "--", 2: "-"}
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    for s in result["series"]:
        color = next(c for k, c in colors.items() if s["name"].startswith(k))
        ax.loglog(
            rows, s["median_s"], styles.get(s["threads"], ":"), color=color, marker="o", markersize=3,
            label=f"{s['name']}, {s['threads']} thread{'s' if s['threads'] > 1 else ''}",
        )
    st = result["stamp"]
    load = result.get("loadavg_at_start")
    ax.set_xscale("log", base=2)
    ax.set_xticks(rows)
    ax.set_xticklabels([f"$2^{{{r.bit_length() - 1}}}$" for r in rows])
    ax.set_xlabel(f"rows (d_model {result['d_model']}, {result['dtype']}, a fresh table per call)")
    ax.set_ylabel("seconds per table (median)")
    where = f"{st.get('cpu_model', '?')}, {st.get('cpus_usable', '?')} CPUs"
    end = result.get("loadavg_at_end")
    if load:
        where += f", load average {load[0]:.1f} at start" + (f", {end[0]:.1f} at the end" if end else "")
    ax.set_title(f"fastpe.table vs the torch tutorial module vs writing the bytes\n{where}, "
                 f"{result['date'][:10]}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="fastpe's scaling plot (time against rows, log-log).")
    parser.add_argument("-o", "--output", default=DEFAULT_OUT, help="the PNG (the JSON goes beside it)")
    parser.add_argument("--repeats", type=int, default=5, help="timings per size at least (default 5)")
    parser.add_argument("--min-exp", type=int, default=8, help="smallest size 2**MIN_EXP rows (default 8)")
    parser.add_argument("--max-exp", type=int, default=20, help="largest size 2**MAX_EXP rows (default 20)")
    parser.add_argument("--threads", default="1,2", help="thread counts (default 1,2; capped at the usable CPUs)")
    parser.add_argument("--from-json", metavar="PATH", help="redraw the plot from a saved JSON, measuring nothing")
    args = parser.parse_args(argv)
    json_path = os.path.splitext(args.output)[0] + ".json"
    if args.from_json:
        with open(args.from_json) as fh:
            result = json.load(fh)
    else:
        usable = len(_usable_cpus())
        counts = sorted({min(int(t), usable) for t in args.threads.split(",")})
        exps = list(range(args.min_exp, args.max_exp + 1))
        started = os.getloadavg() if hasattr(os, "getloadavg") else None
        result = summarise(measure(exps, args.repeats, counts), exps, args.repeats, started)
        os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
        with open(json_path, "w") as fh:
            json.dump(result, fh, indent=1)
            fh.write("\n")
        print(f"wrote {json_path}", file=sys.stderr)
    plot(result, args.output)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
