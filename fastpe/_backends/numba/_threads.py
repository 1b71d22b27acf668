"""Choosing numba's threading layer so fastpe is safe under threads *and* fork.

Measured with numba 0.68.1 on Linux:

* ``workqueue`` (numba's default when TBB is not found) aborts the whole process when two
  Python threads enter a parallel kernel at once;
* ``omp`` (GNU OpenMP) leaves a child made by ``fork()`` hanging or killed once OpenMP ran
  in the parent -- also when it was torch that ran it;
* ``tbb`` passed every case.

TBB comes from the ``tbb`` wheel, which puts ``libtbb.so.12`` into ``<prefix>/lib``: a
directory the dynamic loader does not search, so numba's ``tbbpool`` extension fails to load
and numba silently falls back.  Loading the library first, by absolute path and with
``RTLD_GLOBAL``, satisfies that dependency.

When TBB cannot be had (or the host process already started numba's threads with another
layer) fastpe keeps working: :mod:`fastpe._backends.numba.backend` then lets only one thread at a time run a
parallel kernel and runs the others' calls serially -- same code, bit-identical results.

What fastpe cannot repair is a pool the host process already started on GNU OpenMP: the
layer is fixed for the life of the process, and a ``fork()`` after a parallel kernel ran
leaves the child hanging or killed ("fork() called from a process already using GNU
OpenMP").  :func:`configure` then emits a :class:`RuntimeWarning` naming the layer and the
ways out, once, when fastpe's numba backend loads.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import warnings

__all__ = ["configure", "ThreadingState"]


class ThreadingState:
    """What :func:`configure` found: the layer in use and whether callers may overlap;
    ``openmp_vendor`` is numba's OpenMP (``"GNU"``, ``"Intel"``, ...) on the ``omp`` layer."""

    def __init__(self, layer: str, tbb_library: str | None, note: str, openmp_vendor: str | None = None):
        self.layer = layer
        self.tbb_library = tbb_library
        self.note = note
        self.openmp_vendor = openmp_vendor

    @property
    def thread_safe(self) -> bool:
        # tbb and omp accept concurrent callers; workqueue aborts the process
        return self.layer in ("tbb", "omp")

    @property
    def fork_safe(self) -> bool:
        # GNU OpenMP hangs forked children; tbb, workqueue and Intel's OpenMP do not
        return self.layer in ("tbb", "workqueue") or (self.layer == "omp" and self.openmp_vendor == "Intel")


def _openmp_vendor() -> str | None:
    try:
        from numba.np.ufunc import omppool
    except ImportError:  # pragma: no cover - the omp layer runs, so its module loads
        return None
    return getattr(omppool, "openmp_vendor", None)


def _outside_stacklevel() -> int:
    """The ``stacklevel`` of the first caller outside fastpe and the import machinery, for
    the caller of this function: the line that made fastpe load its numba backend."""
    package = os.path.abspath(__file__).rsplit(os.sep + "_backends" + os.sep, 1)[0] + os.sep  # fastpe/

    def bootstrap(frame) -> bool:  # frames that warnings.warn skips without counting them
        name = frame.f_code.co_filename
        return "importlib" in name and "_bootstrap" in name

    frame, level = sys._getframe(1), 1
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(package) or "importlib" in name):
            return level
        frame, level = frame.f_back, level + 1
        while frame is not None and bootstrap(frame):
            frame = frame.f_back
    return 1


def fork_warning(state: ThreadingState) -> str:
    """What the :class:`RuntimeWarning` about a fork-unsafe layer says."""
    vendor = f" ({state.openmp_vendor} OpenMP)" if state.openmp_vendor else " (OpenMP)"
    return (
        f"numba's thread pool was already running on the {state.layer!r} threading layer{vendor} when "
        "fastpe loaded, and the layer cannot change in this process: a child made by fork() after a "
        "parallel kernel ran (os.fork, multiprocessing's 'fork' start method, the default on Linux before "
        "Python 3.14) can hang or be killed. Start such children with multiprocessing's 'spawn' or "
        "'forkserver' method, or have the pool start on a fork-safe layer: call fastpe.available_backends() "
        "before other numba code runs (fastpe then picks TBB where the tbb package is installed), or set "
        "NUMBA_THREADING_LAYER=workqueue."
    )


def _tbb_candidates() -> list[str]:
    found: list[str] = []
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        try:
            dist = distribution("tbb")
            for f in dist.files or ():
                name = os.path.basename(str(f))
                if name.startswith("libtbb.so.12"):
                    found.append(str(dist.locate_file(f)))
        except PackageNotFoundError:
            pass
    except ImportError:  # pragma: no cover - importlib.metadata is stdlib on 3.8+
        pass
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        found.extend(sorted(glob.glob(os.path.join(prefix, "lib", "libtbb.so.12*"))))
    # the shortest name is the soname link; prefer it over the fully versioned file
    return sorted(dict.fromkeys(p for p in found if os.path.exists(p)), key=len)


def _preload_tbb() -> str | None:
    for path in _tbb_candidates():
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        return path
    try:  # a system-wide TBB the loader can find by itself
        ctypes.CDLL("libtbb.so.12", mode=ctypes.RTLD_GLOBAL)
        return "libtbb.so.12"
    except OSError:
        return None


def _start_pool() -> str:
    from numba.np.ufunc import parallel as _parallel

    _parallel._launch_threads()
    return _parallel._threading_layer


def configure() -> ThreadingState:
    """Select TBB and start numba's pool now, so the layer in use is known and reported.

    Starting the pool eagerly costs a few milliseconds and turns a TBB that numba cannot use
    into a clean fall-back here instead of an error inside the first parallel call.
    """
    import numba
    from numba.np.ufunc import parallel as _parallel

    if getattr(_parallel, "_is_initialized", False):
        # The host process started numba's pool first; its layer is fixed for this process.
        layer = _parallel._threading_layer
        state = ThreadingState(
            layer,
            None,
            "numba's thread pool was started before fastpe loaded; layer left as found",
            _openmp_vendor() if layer == "omp" else None,
        )
        if not state.fork_safe:
            state.note += "; forked children may hang (use the 'spawn' or 'forkserver' start method)"
            warnings.warn(fork_warning(state), RuntimeWarning, stacklevel=_outside_stacklevel())
        return state
    lib = _preload_tbb()
    if lib is not None:
        numba.config.THREADING_LAYER = "tbb"
        try:
            return ThreadingState(_start_pool(), lib, "TBB loaded from " + lib)
        except (ValueError, ImportError, OSError) as exc:
            reason = f"TBB at {lib} unusable by numba ({exc})"
    else:
        reason = "TBB not found (pip install tbb)"
    numba.config.THREADING_LAYER = "workqueue"
    layer = _start_pool()
    return ThreadingState(
        layer, None, reason + ": one caller at a time runs in parallel, others run serially"
    )
