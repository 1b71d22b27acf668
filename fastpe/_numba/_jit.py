"""The one place that decides how fastpe's numba kernels are compiled.

Policy (every kernel goes through :func:`kernel`):

* ``nopython``, ``error_model="numpy"`` (no zero-division checks in the hot loops),
  ``boundscheck=False``; **no** ``fastmath``: the exact reduction depends on IEEE rounding
  of every operation, and contraction into FMA would change results between machines.
* compiled lazily -- importing fastpe compiles nothing -- and cached on disk.  When no cache
  directory is writable (read-only install, no writable home) numba refuses ``cache=True``
  with a RuntimeError, or a save fails with OSError; either way the kernel is rebuilt without
  a cache and the call goes on.  Importing or calling fastpe must never fail for that.
* each kernel exists twice, ``parallel=True`` and ``parallel=False``, from the same source:
  the two agree bit for bit, and the serial one serves small inputs and contended calls.
"""

from __future__ import annotations

import threading
import types
import warnings

import numba

__all__ = ["kernel", "inline"]

_OPTIONS = dict(nogil=True, error_model="numpy", boundscheck=False, fastmath=False)


def inline(py_func):
    """A scalar helper inlined into kernels (compiled as part of its caller)."""
    return numba.njit(inline="always", **_OPTIONS)(py_func)


class _LazyKernel:
    """A kernel compiled on first call, with a fall-back to an uncached build."""

    def __init__(self, py_func, parallel: bool):
        self._py_func = py_func
        self._parallel = parallel
        self._dispatcher = None
        self._cached = True
        self._lock = threading.Lock()
        self.__name__ = py_func.__name__
        self.__doc__ = py_func.__doc__

    def _build(self, cache: bool):
        return numba.njit(parallel=self._parallel, cache=cache, **_OPTIONS)(self._py_func)

    def _get(self):
        disp = self._dispatcher
        if disp is None:
            with self._lock:
                if self._dispatcher is None:
                    try:
                        self._dispatcher = self._build(cache=True)
                    except RuntimeError:  # "cannot cache function ...: no locator available"
                        self._cached = False
                        self._dispatcher = self._build(cache=False)
                disp = self._dispatcher
        return disp

    @property
    def cached(self) -> bool:
        return self._cached

    def __call__(self, *args):
        disp = self._get()
        try:
            return disp(*args)
        except OSError as exc:  # the on-disk cache could not be written while saving
            with self._lock:
                if self._cached:
                    warnings.warn(
                        f"fastpe: numba cache not writable ({exc}); compiling without cache",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                    self._cached = False
                    self._dispatcher = self._build(cache=False)
            return self._dispatcher(*args)


def _renamed(py_func, suffix: str):
    """A copy of ``py_func`` under another name.

    numba names cache files after the function's qualified name and line, and its index
    does not record ``parallel``: two dispatchers of one function would load each other's
    machine code from disk.  (That happened: the "serial" twin ran the parallel code and
    crashed numba's workqueue layer.)  Distinct names give distinct cache entries.
    """
    clone = types.FunctionType(
        py_func.__code__, py_func.__globals__, py_func.__name__ + suffix,
        py_func.__defaults__, py_func.__closure__,
    )
    clone.__qualname__ = py_func.__qualname__ + suffix
    clone.__doc__ = py_func.__doc__
    clone.__module__ = py_func.__module__
    return clone


def kernel(py_func):
    """Return ``(parallel, serial)`` lazily compiled twins of ``py_func``."""
    return (
        _LazyKernel(_renamed(py_func, "_parallel"), parallel=True),
        _LazyKernel(_renamed(py_func, "_serial"), parallel=False),
    )
