"""Benchmark-suite setup: report header, and the machine/version stamp saved with every run.

Run explicitly (``bench/`` is outside the default test paths)::

    python -m pytest bench/ --benchmark-json=.benchmarks/last.json
"""

from __future__ import annotations

import datetime
import os
import platform
import sys
from importlib import metadata

import fastpe

#: loads every backend now: numba's threading layer (TBB) is fixed before anything runs in parallel
AVAILABLE = fastpe.available_backends()
#: the machine is shared: the load when the suite started, kept with the results
LOAD_AT_START = os.getloadavg() if hasattr(os, "getloadavg") else None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def stamp() -> dict:
    """CPU, cores, threads and versions: what a benchmark number depends on."""
    info = fastpe.info()
    torch_threads = None
    try:
        import torch

        torch_threads = torch.get_num_threads()
    except ImportError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count()
    return {
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "fastpe": fastpe.__version__,
        "fastpe_backends": info["available"],
        "fastpe_default": info["default"],
        "numba_threading_layer": info["threading_layer"],
        "numba_threads": info["threads"],
        "torch_threads": torch_threads,
        "versions": {
            name: _version(name)
            for name in (
                "numpy", "numba", "tbb", "torch", "positional-encodings", "transformers", "diffusers",
                "pytest-benchmark",
            )
        },
        "loadavg_at_start": LOAD_AT_START,
        "loadavg_now": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "argv": sys.argv,
    }


def pytest_report_header(config):
    s = stamp()
    return [
        f"fastpe bench: {s['cpu_model']}, {s['cpus_usable']}/{s['cpu_count']} cpus; "
        f"backends {s['fastpe_backends']}; numba {s['numba_threading_layer']} x{s['numba_threads']}; "
        f"torch threads {s['torch_threads']}",
        "versions: " + ", ".join(f"{k} {v}" for k, v in s["versions"].items()),
    ]


def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info["fastpe_bench"] = stamp()
