"""Peak memory of fastpe.save_table writing a table far larger than its chunk budget.

Usage::

    python bench/stream_rss.py --gb 4 --chunk-mb 64 --dir /tmp [--d-model 4096]
        [--format npy|npz|safetensors] [--dtype float32] [--backend NAME] [--slack-mb 16]

Three child interpreters run one after another, each reporting its own peak resident set
(``ru_maxrss``, the kernel's high-water mark, cross-checked by polling with psutil when it
is installed):

* ``import``: imports fastpe and does nothing -- the interpreter's baseline;
* ``warm``: also writes a one-row table with the same backend, format and dtype -- the
  baseline plus the fixed cost of loading the backend (numba's JIT runtime, the compiled
  extension, ml_dtypes, safetensors), which does not grow with the table;
* ``write``: writes the table of ``--gb`` GiB with ``--chunk-mb`` as its budget.

The verdict (one line, exit status 0 if it passes, 1 if not) is
``peak(write) <= peak(warm) + budget + slack``: what the table's size may add to the
process is the budget.  The free space of ``--dir`` is checked first (the table, plus a
margin, must fit), the written size is compared with ``fastpe._io.save.output_size`` (the
figure the free-space check uses), and the file is deleted at the end.  Not a test: it
writes gigabytes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1 << 20
GiB = 1 << 30


def _maxrss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024  # bytes on macOS, KiB elsewhere


def _child(mode: str, path: str, d_model: int, max_len: int, dtype: str, chunk_bytes: int, backend: str) -> None:
    """Run in a child interpreter: do ``mode``'s work, print a JSON record."""
    import fastpe

    seconds = 0.0
    used = None
    if mode != "import":
        rows = 1 if mode == "warm" else max_len
        start = time.perf_counter()
        saved = fastpe.save_table(path, d_model, rows, dtype=dtype, chunk_bytes=chunk_bytes,
                                  backend=backend or None)
        seconds = time.perf_counter() - start
        used = saved.backend
    print(json.dumps({"maxrss": _maxrss_bytes(), "seconds": seconds, "backend": used}), flush=True)


def _poll(pid: int, peaks: list[int], stop: threading.Event) -> None:
    try:
        import psutil
    except ImportError:
        return
    try:
        process = psutil.Process(pid)
        while not stop.is_set():
            peaks.append(process.memory_info().rss)
            stop.wait(0.02)
    except psutil.Error:  # the child has exited
        pass


def run_child(mode: str, args, path: str, max_len: int) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, path, str(args.d_model), str(max_len),
           args.dtype, str(args.chunk_mb * MiB), args.backend or ""]
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    polled: list[int] = []
    stop = threading.Event()
    poller = threading.Thread(target=_poll, args=(child.pid, polled, stop), daemon=True)
    poller.start()
    out, err = child.communicate()
    stop.set()
    poller.join()
    if child.returncode != 0:
        raise SystemExit(f"the {mode} child failed (exit status {child.returncode}):\n{err}")
    record = json.loads(out.strip().splitlines()[-1])
    record["polled"] = max(polled) if polled else None
    return record


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        mode, path, d_model, max_len, dtype, chunk, backend = sys.argv[2:9]
        _child(mode, path, int(d_model), int(max_len), dtype, int(chunk), backend)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=4.0, help="table size in GiB (default 4)")
    parser.add_argument("--chunk-mb", type=int, default=64, help="save_table's chunk budget in MiB (default 64)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where to write (default: the temp dir)")
    parser.add_argument("--d-model", type=int, default=4096, help="columns (default 4096)")
    parser.add_argument("--format", choices=("npy", "npz", "safetensors"), default="npy")
    parser.add_argument("--dtype", choices=("float32", "float64", "float16", "bfloat16"), default="float32")
    parser.add_argument("--backend", default=None, help="fastpe backend (default: the automatic choice)")
    parser.add_argument("--slack-mb", type=int, default=16, help="allowed growth beyond the budget (default 16)")
    args = parser.parse_args(argv)

    sys.path.insert(0, ROOT)
    from fastpe import _dtypes
    from fastpe._io import save as _save

    itemsize = _dtypes.resolve(args.dtype).itemsize
    max_len = max(1, int(args.gb * GiB) // (args.d_model * itemsize))
    path = os.path.join(args.dir, f"stream_rss_{os.getpid()}.{args.format}")
    warm_path = os.path.join(args.dir, f"stream_rss_{os.getpid()}_warm.{args.format}")
    size = _save.output_size(path, args.d_model, max_len, dtype=args.dtype)
    free = shutil.disk_usage(args.dir).free
    if size + GiB > free:
        print(f"SKIP: {args.dir} has {free / GiB:.1f} GiB free; the table needs {size / GiB:.2f} GiB plus 1 GiB margin")
        return 2
    print(f"table: {max_len} x {args.d_model} {args.dtype} .{args.format}, {size / GiB:.2f} GiB in {args.dir} "
          f"({free / GiB:.1f} GiB free); budget {args.chunk_mb} MiB")

    try:
        base = run_child("import", args, path, max_len)
        warm = run_child("warm", args, warm_path, 1)
        write = run_child("write", args, path, max_len)
        written = os.path.getsize(path) + (os.path.getsize(path + ".json") if args.format == "npy" else 0)
    finally:
        for p in (path, path + ".json", warm_path, warm_path + ".json"):
            if os.path.exists(p):
                os.unlink(p)

    for name, rec in (("import fastpe", base), ("+ backend warm", warm), ("write table", write)):
        polled = f", polled {rec['polled'] / MiB:.1f} MiB" if rec["polled"] else ""
        print(f"  {name:15s} peak RSS {rec['maxrss'] / MiB:7.1f} MiB{polled}")
    if written != size:
        print(f"FAIL: wrote {written} bytes, output_size predicted {size}")
        return 1
    growth = write["maxrss"] - warm["maxrss"]
    limit = warm["maxrss"] + (args.chunk_mb + args.slack_mb) * MiB
    ok = write["maxrss"] <= limit
    print(
        f"{'PASS' if ok else 'FAIL'}: peak RSS {write['maxrss'] / MiB:.1f} MiB = warm baseline "
        f"{warm['maxrss'] / MiB:.1f} MiB + {growth / MiB:.1f} MiB "
        f"({'<=' if ok else '>'} budget {args.chunk_mb} + slack {args.slack_mb} MiB; "
        f"{(write['maxrss'] - base['maxrss']) / MiB:.1f} MiB over bare import) while writing "
        f"{size / GiB:.2f} GiB in {write['seconds']:.1f} s ({size / GiB / write['seconds']:.2f} GiB/s, "
        f"backend {write['backend']}); size exact"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
