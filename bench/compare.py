"""Compare a benchmark run with the saved baseline; fail on a fastpe median regression.

Usage::

    python bench/compare.py --run                  # run the suite now, compare with the baseline
    python bench/compare.py CURRENT.json           # compare an existing run
    python bench/compare.py --run --threshold 15   # percent; default 10
    python bench/compare.py --run -k 2048x512      # other options go to pytest

The baseline is ``.benchmarks/baseline.json``, written by ``make bench``.  Without one,
``--run`` records this run as the baseline and says so (exit 0); a comparison of a given file
without a baseline exits 2 with the same advice.

Only fastpe's own rows gate (every compiled backend on every workload, and the CLI
process): peers and the yardstick are printed for context, never failed on -- they are not
our code, and on a shared machine they move by more than 10% on their own.  A median
more than ``--threshold`` percent above the baseline's is re-measured once (only those
benchmarks, with ``--run``, for twice as many rounds); it fails only if the better of the two
medians still is.
If the yardstick slowed down as much, the machine was slower: the report says so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_BASELINE = os.path.join(ROOT, ".benchmarks", "baseline.json")
DEFAULT_CURRENT = os.path.join(ROOT, ".benchmarks", "current.json")
#: rows whose regression fails the comparison
GATED_ROLES = ("fastpe",)


def run_suite(json_path: str, *selection: str, extra=(), scale: float = 1.0) -> int:
    """Run the benchmark suite (or the given node ids) from the repository root."""
    os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
    cmd = [sys.executable, "-m", "pytest", *(selection or ("bench/",)), "-q", f"--benchmark-json={json_path}", *extra]
    env = dict(os.environ, FASTPE_BENCH_SCALE=str(scale)) if scale != 1.0 else None
    print("+", ("FASTPE_BENCH_SCALE=%g " % scale if env else "") + " ".join(cmd), flush=True)
    return subprocess.call(cmd, cwd=ROOT, env=env)


def load(path: str) -> dict[str, dict]:
    """``{fullname: benchmark}`` of the speed rows of a run (the memory probe is not timed work)."""
    with open(path) as fh:
        run = json.load(fh)
    return {
        b["fullname"]: b
        for b in run.get("benchmarks", [])
        if (b.get("extra_info") or {}).get("role") not in (None, "memory")
    }


def machine(path: str) -> str:
    with open(path) as fh:
        mi = json.load(fh).get("machine_info", {})
    fb = mi.get("fastpe_bench", {})
    return f"{fb.get('cpu_model', mi.get('cpu', {}).get('brand_raw', '?'))} x{fb.get('cpus_usable', '?')}"


def _show(path: str) -> str:
    rel = os.path.relpath(path, ROOT)
    return path if rel.startswith("..") else rel


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:10.3f} ms"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Fail on a fastpe median regression against the baseline.")
    parser.add_argument("current", nargs="?", help="a run's JSON (default with --run: .benchmarks/current.json)")
    parser.add_argument("--baseline", default=DEFAULT_BASELINE)
    parser.add_argument("--run", action="store_true", help="run the suite now (python -m pytest bench/)")
    parser.add_argument("--threshold", type=float, default=10.0, help="percent slower that fails (default 10)")
    parser.add_argument("--no-confirm", action="store_true", help="do not re-measure regressions before failing")
    args, pytest_args = parser.parse_known_args(argv)
    current = args.current or DEFAULT_CURRENT
    limit = 1.0 + args.threshold / 100.0

    if not os.path.exists(args.baseline):
        advice = (
            f"no benchmark baseline at {_show(args.baseline)}: `make bench` records one "
            "(run it on the commit you want to compare against)."
        )
        if not args.run:
            print(f"bench-compare: {advice}", file=sys.stderr)
            return 2
        print(f"bench-compare: {advice}\nbench-compare: recording this run as the baseline; nothing to compare yet.")
        status = run_suite(args.baseline, extra=pytest_args)
        if status == 0:
            print(f"bench-compare: baseline saved to {_show(args.baseline)}; run `make bench-compare` again after your change.")
        return status

    suite_status = 0
    if args.run:
        suite_status = run_suite(current, extra=pytest_args)
        if not os.path.exists(current):
            print(f"bench-compare: the suite wrote no results (pytest exit status {suite_status})", file=sys.stderr)
            return suite_status or 1
    base, cur = load(args.baseline), load(current)
    if machine(args.baseline) != machine(current):
        print(f"bench-compare: WARNING: baseline from {machine(args.baseline)}, this run on {machine(current)}")

    def ratio(name: str) -> float:
        return cur[name]["stats"]["median"] / base[name]["stats"]["median"]

    regressed = [
        n for n in cur
        if n in base and cur[n]["extra_info"].get("role") in GATED_ROLES and ratio(n) > limit
    ]
    confirmed: dict[str, float] = {}
    if regressed and args.run and not args.no_confirm:
        print(f"bench-compare: {len(regressed)} fastpe median(s) over +{args.threshold:g}%: measuring them again, twice as long")
        again_path = os.path.splitext(current)[0] + "-again.json"
        if os.path.exists(again_path):
            os.remove(again_path)
        run_suite(again_path, *regressed, scale=2.0)
        if os.path.exists(again_path):
            again = load(again_path)
            for n in regressed:
                if n in again:
                    confirmed[n] = min(cur[n]["stats"]["median"], again[n]["stats"]["median"])

    # the yardstick of each workload tells whether the machine itself got slower
    yard_ratio: dict[str, float] = {}
    for n, b in cur.items():
        info = b["extra_info"]
        if info.get("role") == "yardstick" and n in base:
            w = info["workload"]
            yard_ratio[w] = min(yard_ratio.get(w, float("inf")), ratio(n))

    failures = []
    print(f"\n{'benchmark':64} {'baseline':>13} {'now':>13} {'change':>8}")
    for n, b in cur.items():
        info = b["extra_info"]
        short = n.split("::", 1)[-1]
        if n not in base:
            print(f"{short:64} {'(new)':>13} {ms(b['stats']['median'])}")
            continue
        med = confirmed.get(n, b["stats"]["median"])
        r = med / base[n]["stats"]["median"]
        gated = info.get("role") in GATED_ROLES
        flag = ""
        if gated and r > limit:
            failures.append((short, r))
            flag = "  REGRESSION"
            y = yard_ratio.get(info["workload"])
            if y is not None and y > limit:
                flag += f" (the yardstick is {100 * (y - 1):+.0f}% too: the machine was slower)"
        elif not gated:
            flag = "  (context)"
        again = " (best of 2 runs)" if n in confirmed else ""
        print(f"{short:64} {ms(base[n]['stats']['median'])} {ms(med)} {100 * (r - 1):+7.1f}%{flag}{again}")
    missing = [n for n in base if n not in cur]
    if missing:
        print(f"({len(missing)} benchmark(s) of the baseline not in this run)")

    if failures:
        print(f"\nbench-compare: FAILED: {len(failures)} fastpe median(s) more than {args.threshold:g}% slower than the baseline:")
        for short, r in failures:
            print(f"  {short}: {100 * (r - 1):+.1f}%")
        return 1
    if suite_status:
        print(f"\nbench-compare: FAILED: the suite itself failed (pytest exit status {suite_status}); see above")
        return suite_status
    print(f"\nbench-compare: OK: no fastpe median more than {args.threshold:g}% slower than the baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
