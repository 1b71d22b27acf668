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
from llvmlite import ir
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["kernel", "inline", "prefetch"]

_OPTIONS = dict(nogil=True, error_model="numpy", boundscheck=False, fastmath=False)


def inline(py_func):
    """A scalar helper inlined into kernels (compiled as part of its caller)."""
    return numba.njit(inline="always", **_OPTIONS)(py_func)


@intrinsic
def prefetch(typingctx, arr, index):
    """``prefetch(arr, index)``: ask the CPU to fetch the cache line of the 1-D ``arr[index]``
    for writing (``llvm.prefetch``, as C's ``__builtin_prefetch(p, 1, 3)``).  A hint only: it
    changes no value and never faults.  numba has no prefetch of its own; the in-place RoPE
    kernel uses it to start on the next head's block, far away in memory, a block ahead.
    """
    if not (isinstance(arr, numba.types.Array) and arr.ndim == 1 and isinstance(index, numba.types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        byte_ptr = ir.IntType(8).as_pointer()
        address = builder.bitcast(builder.gep(array.data, [args[1]]), byte_ptr)
        i32 = ir.IntType(32)
        # the intrinsic's name carries the pointer type: "p0" once LLVM pointers are opaque
        name = "llvm.prefetch.p0" if getattr(byte_ptr, "is_opaque", False) else "llvm.prefetch.p0i8"
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [byte_ptr, i32, i32, i32]), name)
        builder.call(fn, [address, i32(1), i32(3), i32(1)])  # write, keep in all caches, data
        return context.get_dummy_value()

    return numba.types.void(arr, index), codegen


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
