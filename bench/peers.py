"""The benchmark's one table: workloads x implementations (fastpe backends, peers, yardstick).

Each implementation's ``make(workload)`` returns a zero-argument callable that does the whole
piece of work once, or raises :class:`Unavailable` saying why it cannot run here.  The test
suite (``test_bench.py``) and the report (``report.py``) both read these tables, so a row
is named the same everywhere.

Rules every row follows, so the numbers compare:

* ``table`` workloads return a fresh ``(n, d)`` float32 array or tensor: allocating it is
  part of the work, for fastpe as for the peers and the yardstick.
* ``forward`` workloads write into an output allocated once, before timing, for everyone
  (the yardstick too); the peers start from the same ``uint32`` positions and cast them to
  float32 first, as a user would.
* Every implementation runs on this machine's default thread count: numba's pool (TBB) for
  fastpe and the numba yardstick, torch's intra-op pool; NumPy's ufuncs are single-threaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

import numpy as np

import fastpe
from fastpe._registry import BACKENDS

__all__ = [
    "Unavailable",
    "Workload",
    "Implementation",
    "WORKLOADS",
    "IMPLEMENTATIONS",
    "CASES",
    "REFERENCE_ROWS",
    "SEED",
]

#: seed of the random positions (forward workloads)
SEED = 20240601
#: rows of the smallest table the ``python`` reference computes (it is ~5 ms a row at d=512)
REFERENCE_ROWS = 64


class Unavailable(Exception):
    """This implementation cannot run here (missing package, unsupported workload)."""


# --------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class Workload:
    key: str  #: pytest id and JSON key
    kind: str  #: "table" or "forward"
    rows: int
    d_model: int
    title: str  #: the pytest-benchmark group and the report's heading
    positions_kind: str = "arange"  #: "arange", "random_u32" or "near_2p32"

    @property
    def nbytes(self) -> int:
        return self.rows * self.d_model * 4

    @cached_property
    def positions(self) -> np.ndarray:
        """The ``uint32`` positions of a forward workload (fixed seed)."""
        rng = np.random.default_rng(SEED)
        if self.positions_kind == "random_u32":
            return rng.integers(0, 1 << 32, size=self.rows, dtype=np.uint32)
        if self.positions_kind == "near_2p32":
            # the top 2**20 positions below 2**32: the largest arguments fastpe accepts
            return ((1 << 32) - 1 - rng.integers(0, 1 << 20, size=self.rows, dtype=np.uint64)).astype(
                np.uint32
            )
        return np.arange(self.rows, dtype=np.uint32)


WORKLOADS: dict[str, Workload] = {
    w.key: w
    for w in (
        Workload(
            "table-2048x512", "table", 2048, 512,
            "table 2048x512 (the python reference: first 64 rows, scaled in the report)",
        ),
        Workload("table-8192x1024", "table", 8192, 1024, "table 8192x1024"),
        Workload("table-131072x1024", "table", 131072, 1024, "table 131072x1024"),
        Workload(
            "forward-1Mx64", "forward", 1_000_000, 64,
            "forward 1,000,000 random u32 positions x 64", "random_u32",
        ),
        Workload(
            "forward-4096x512-near2p32", "forward", 4096, 512,
            "forward 4096 positions in [2^32-2^20, 2^32) x 512", "near_2p32",
        ),
    )
}

SMALLEST = "table-2048x512"


# --------------------------------------------------------------------- implementations


@dataclass(frozen=True)
class Implementation:
    key: str  #: pytest id
    label: str  #: the report's row name
    role: str  #: "fastpe", "reference", "peer" or "yardstick"
    make: Callable[[Workload], Callable[[], object]]
    workloads: tuple[str, ...] = tuple(WORKLOADS)
    note: str = ""
    backend: str | None = None  #: the fastpe backend, for the fastpe and reference rows


def _fastpe(backend: str):
    def make(w: Workload):
        if backend not in fastpe.available_backends():
            from fastpe._backends import unavailable_reason

            raise Unavailable(f"fastpe backend {backend!r} not available: {unavailable_reason(backend)}")
        if w.kind == "table":
            rows = REFERENCE_ROWS if backend == "python" else w.rows
            return lambda: fastpe.table(w.d_model, rows, backend=backend)
        config = fastpe.PosEncConfig(w.d_model)
        positions = w.positions
        out = np.empty((w.rows, w.d_model), dtype=np.float32)
        return lambda: fastpe.forward(positions, config, out, backend=backend)

    return make


# -- the PyTorch tutorial module ("Sequence-to-Sequence Modeling with nn.Transformer")


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise Unavailable(f"torch not installed ({exc})") from None
    return torch


def torch_tutorial(position, d_model: int, pe):
    """The tutorial's ``PositionalEncoding.__init__`` body, float32, 2-D.

    Kept as the tutorial writes it: ``position * div_term`` is formed twice, and a fresh
    table starts from ``torch.zeros``.  ``position`` is the ``(n, 1)`` float32 column.
    """
    import torch

    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    if pe is None:
        pe = torch.zeros(position.shape[0], d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def _make_torch(w: Workload):
    torch = _torch()
    if w.kind == "table":
        return lambda: torch_tutorial(torch.arange(w.rows, dtype=torch.float32).unsqueeze(1), w.d_model, None)
    positions = w.positions
    out = torch.from_numpy(np.empty((w.rows, w.d_model), dtype=np.float32))

    def run():
        position = torch.from_numpy(positions.astype(np.float32)).unsqueeze(1)
        return torch_tutorial(position, w.d_model, out)

    return run


# -- the same computation in NumPy float32


def numpy_tutorial(position, d_model: int, pe):
    """The tutorial's computation in NumPy, float32 throughout (``position``: ``(n, 1)`` f32)."""
    div_term = np.exp(np.arange(0, d_model, 2, dtype=np.float32) * np.float32(-math.log(10000.0) / d_model))
    if pe is None:
        pe = np.zeros((position.shape[0], d_model), dtype=np.float32)
    pe[:, 0::2] = np.sin(position * div_term)
    pe[:, 1::2] = np.cos(position * div_term)
    return pe


def _make_numpy(w: Workload):
    if w.kind == "table":
        return lambda: numpy_tutorial(np.arange(w.rows, dtype=np.float32)[:, None], w.d_model, None)
    positions = w.positions
    out = np.empty((w.rows, w.d_model), dtype=np.float32)
    return lambda: numpy_tutorial(positions.astype(np.float32)[:, None], w.d_model, out)


# -- PyPI positional-encodings: PositionalEncoding1D (torch)


def _make_pe1d(w: Workload):
    _torch()
    if w.kind != "table":
        raise Unavailable("positional-encodings encodes only positions 0..n-1 (no arbitrary positions)")
    try:
        from positional_encodings.torch_encodings import PositionalEncoding1D
    except ImportError as exc:
        raise Unavailable(f"positional-encodings not installed ({exc})") from None
    import torch

    module = PositionalEncoding1D(w.d_model)
    # it reads only the input's shape, dtype and device: a broadcast view costs no memory
    x = torch.empty(1, 1, w.d_model).expand(1, w.rows, w.d_model)

    def run():
        module.cached_penc = None  # it caches by input shape; every call must compute
        return module(x)

    return run


# -- the yardstick: writing the same bytes, and nothing else


_numba_fill = None


def numba_fill():
    """The parallel fill kernel, compiled (and cached on disk) on first use.

    fastpe's numba backend is loaded first so numba's thread pool uses the same threading
    layer (TBB) as fastpe's kernels.
    """
    global _numba_fill
    if _numba_fill is None:
        fastpe.available_backends()
        import numba

        @numba.njit(parallel=True, cache=True, nogil=True, boundscheck=False)
        def fill_zero(flat):
            for i in numba.prange(flat.shape[0]):
                flat[i] = np.float32(0.0)

        _numba_fill = fill_zero
    return _numba_fill


def _make_fill(w: Workload):
    if w.kind == "table":
        def run():
            a = np.empty((w.rows, w.d_model), dtype=np.float32)
            a.fill(0)
            return a

        return run
    out = np.empty((w.rows, w.d_model), dtype=np.float32)
    return lambda: out.fill(0)


def _make_numba_fill(w: Workload):
    fill = numba_fill()
    if w.kind == "table":
        def run():
            a = np.empty((w.rows, w.d_model), dtype=np.float32)
            fill(a.reshape(-1))
            return a

        return run
    out = np.empty((w.rows, w.d_model), dtype=np.float32)
    flat = out.reshape(-1)
    return lambda: fill(flat)


def _fastpe_rows() -> list[Implementation]:
    rows = []
    for backend in BACKENDS:
        if backend == "python":
            rows.append(
                Implementation(
                    "python-64rows", f"fastpe python (reference): first {REFERENCE_ROWS} rows only",
                    "reference", _fastpe("python"), (SMALLEST,),
                    note=f"timed on rows 0..{REFERENCE_ROWS - 1} only; the report scales it to the "
                    f"full table (x{WORKLOADS[SMALLEST].rows // REFERENCE_ROWS}) and marks it 'est.'",
                    backend="python",
                )
            )
        else:
            rows.append(Implementation(backend, f"fastpe {backend}", "fastpe", _fastpe(backend), backend=backend))
    return rows


IMPLEMENTATIONS: dict[str, Implementation] = {
    im.key: im
    for im in (
        *_fastpe_rows(),
        Implementation(
            "torch-tutorial", "torch tutorial module (f32)", "peer", _make_torch,
            note="PyTorch tutorial PositionalEncoding computation; same column layout as fastpe",
        ),
        Implementation(
            "numpy-f32", "NumPy f32 (tutorial formula)", "peer", _make_numpy,
            note="the tutorial's computation in NumPy float32; same column layout as fastpe",
        ),
        Implementation(
            "positional-encodings", "positional-encodings PositionalEncoding1D", "peer", _make_pe1d,
            tuple(k for k, w in WORKLOADS.items() if w.kind == "table"),
            note="PyPI positional-encodings (torch); returns (1, n, d); sin/cos interleaved as in fastpe",
        ),
        Implementation(
            "yardstick-fill", "yardstick: np.empty + fill(0)", "yardstick", _make_fill,
            note="writes the same bytes and nothing else (forward: into the preallocated out)",
        ),
        Implementation(
            "yardstick-numba", "yardstick: np.empty + numba prange fill", "yardstick", _make_numba_fill,
            note="parallel fill of the same bytes (forward: into the preallocated out)",
        ),
    )
}

#: run order within a workload: the yardstick right next to fastpe (the goal compares the two,
#: and on a shared machine the load drifts over the seconds the slow peers take), then the peers
_ORDER = {"yardstick": 0, "fastpe": 1, "reference": 2, "peer": 3}

#: every (workload, implementation) pair the suite measures, in run order
CASES: list[tuple[Workload, Implementation]] = [
    (w, im)
    for w in WORKLOADS.values()
    for im in sorted(IMPLEMENTATIONS.values(), key=lambda im: _ORDER[im.role])
    if w.key in im.workloads
]
