"""The ``numba`` backend: parallel kernels compiled on first use and cached on disk.

Importing this module imports numba (~0.2 s) and fixes the threading layer (see
:mod:`fastpe._threading`); it compiles nothing.  Small inputs run the serial twin of each kernel
(thread start-up costs more than they do); large ones run the parallel twin.  Where the
threading layer is not safe for concurrent callers, only one thread at a time may enter a
parallel kernel and the others run the serial twin instead of waiting: same code, same bits.
"""

from __future__ import annotations

import functools
import threading

import numba
import numpy as np

from .._threading import configure

THREADING = configure()

from .._plan import sinusoid_turns  # noqa: E402
from . import kernels as _k  # noqa: E402

__all__ = ["sinusoid_forward", "sinusoid_range", "threading_layer", "num_threads"]

#: outputs below this many elements run serially
SERIAL_BELOW = 1 << 15

_parallel_gate = threading.Lock()


def threading_layer() -> str:
    """The layer numba's pool actually runs (``tbb`` unless TBB was unavailable)."""
    return THREADING.layer


def num_threads() -> int:
    return numba.get_num_threads()


def _run(parallel, serial, work: int, *args) -> None:
    if work < SERIAL_BELOW or numba.get_num_threads() == 1:
        serial(*args)
    elif THREADING.thread_safe:
        parallel(*args)
    elif _parallel_gate.acquire(blocking=False):
        try:
            parallel(*args)
        finally:
            _parallel_gate.release()
    else:
        serial(*args)


@functools.lru_cache(maxsize=16)
def _steps(d_model: int, base: float) -> np.ndarray:
    """The cached exact steps ``cos(m w_i), sin(m w_i)`` for ``m < STEPS``."""
    turns = sinusoid_turns(d_model, base)
    steps = np.empty((_k.STEPS, 2, turns.shape[1]), dtype=np.float64)
    _run(_k.sincos_steps_parallel, _k.sincos_steps_serial, steps.size * 4, turns, steps)
    steps.setflags(write=False)
    return steps


def sinusoid_forward(positions, d_model, base, out) -> None:
    turns = sinusoid_turns(d_model, base)
    steps = _steps(d_model, base)
    _run(_k.sinusoid_forward_parallel, _k.sinusoid_forward_serial, out.size * 4,
         positions, turns, steps, out)


def sinusoid_range(start, d_model, base, out) -> None:
    turns = sinusoid_turns(d_model, base)
    steps = _steps(d_model, base)
    _run(_k.sinusoid_range_parallel, _k.sinusoid_range_serial, out.size,
         int(start), turns, steps, out)
