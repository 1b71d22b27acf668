"""What the commands that write one array to ``.npy`` share (``fastpe grid``, ``timestep``,
``alibi``, ``t5-buckets``): the ``--dtype`` option, a default path, :func:`write_npy`, which
computes and saves an array atomically (after checking, when told the array's shape, that it
fits in memory and on disk), and the one-line summary.

bfloat16 in ``.npy``.  NumPy has no bfloat16: ``numpy.save`` of an ``ml_dtypes.bfloat16``
array writes the anonymous type ``'<V2'``, which ``numpy.load`` returns as raw void records
that neither arithmetic nor ``torch.from_numpy`` accept.  These commands therefore store a
bfloat16 array as its 16-bit patterns, dtype ``uint16``, which every reader can load;
``numpy.load(path).view(ml_dtypes.bfloat16)`` (or ``torch.from_numpy(...).view(torch.bfloat16)``)
gives the values back, bit for bit (``fastpe table`` does the same, see fastpe._io.save).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import click

from .._dtypes import DTYPES
from . import options

__all__ = ["BFLOAT16_NOTE", "dtype_opt", "npy_array", "default_path", "check_size", "write_npy", "summary"]

#: the note every command writing bfloat16 to .npy shows in its help
BFLOAT16_NOTE = (
    "bfloat16 is stored as its raw bits, dtype uint16 (NumPy has no bfloat16 type): "
    "read it back with numpy.load(PATH).view(ml_dtypes.bfloat16)."
)

dtype_opt = click.option(
    "--dtype",
    type=click.Choice(DTYPES, case_sensitive=False),
    default=DTYPES[0],
    show_default=True,
    help="Output format; float16/bfloat16 are the correctly rounded exact values. " + BFLOAT16_NOTE,
)


def npy_array(array):
    """``array`` as it goes into a ``.npy`` file: bfloat16 as its ``uint16`` bit patterns."""
    import numpy as np

    return array.view(np.uint16) if array.dtype.name == "bfloat16" else array


def _stored_as(array) -> str:
    """What the summary line adds after the shape: how bfloat16 was stored."""
    return " as uint16 bits" if array.dtype.name == "bfloat16" else ""


def default_path(name: str) -> str:
    """``name`` in the current directory, checked as ``-o`` would be (exit status 2 if not)."""
    try:
        return options.check_output_path(name)
    except click.BadParameter as exc:
        raise options.InputError(f"default output path: {exc.message}; use -o") from None


def check_size(path: str, shape: tuple[int, ...], dtype, *, transient: int = 0) -> None:
    """Refuse, before anything is allocated, an array of ``shape`` and ``dtype`` (a name or
    NumPy dtype) that cannot be held in memory or written to ``path``.

    The array (plus ``transient`` bytes the command allocates besides) larger than the
    machine's physical memory is bad input, exit status 2: allocating it would fail, or
    thrash the machine first.  A file larger than the free space of ``path``'s file system
    exits 1, as a disk that fills up while writing does.
    """
    import numpy as np

    from .._io import save as _save
    from .._io.writers import _npy_header
    from .._dtypes import resolve

    with options.library_errors():  # bfloat16 without ml_dtypes fails here too, before any work
        dt = resolve(dtype) if str(dtype).lower() in DTYPES else np.dtype(dtype)
        nbytes = math.prod(shape) * dt.itemsize
        _save.check_memory(f"the {' x '.join(map(str, shape))} {dt.name} array", nbytes + transient)
    try:
        _save.check_space(path, len(_npy_header(dt, tuple(shape))) + nbytes)
    except OSError as exc:
        raise click.ClickException(f"could not write {path}: {exc}") from exc


def write_npy(path: str, compute: Callable[[], object], *, shape: tuple[int, ...] | None = None, dtype=None,
              transient: int = 0):
    """Run ``compute()`` (a library call) and save its array to ``path`` atomically.

    Returns ``(array, compute_seconds, write_seconds)``.  Given the array's ``shape`` and
    ``dtype``, :func:`check_size` runs first.  The temporary file is created next, so an
    unwritable place fails before the work; the library's ``ValueError`` / ``TypeError``
    become exit status 2, and on any failure, Ctrl-C, SIGTERM or SIGHUP nothing is left at
    ``path`` (a file already there is kept).
    """
    import numpy as np

    from .._io.atomic import atomic_write

    if shape is not None:
        check_size(path, shape, dtype, transient=transient)
    try:
        with atomic_write(path) as f:
            start = time.perf_counter()
            with options.library_errors():
                array = compute()
            computed = time.perf_counter()
            np.save(f, npy_array(array), allow_pickle=False)
    except OSError as exc:  # e.g. a full disk (exit status 1)
        raise click.ClickException(f"could not write {path}: {exc}") from exc
    return array, computed - start, time.perf_counter() - computed


def summary(path: str, array, what: str, backend: str, compute_s: float, write_s: float) -> str:
    """The one-line report of a written array, in the form ``fastpe table`` prints."""
    return (
        f"wrote {path}: {array.dtype.name} {array.shape}{_stored_as(array)}, {what}, "
        f"{options.human_size(array.nbytes)}, backend {backend}, "
        f"{options.milliseconds(compute_s)} compute + {options.milliseconds(write_s)} write"
    )
