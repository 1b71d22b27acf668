"""What the commands that write arrays share (``fastpe table``, ``grid``, ``timestep``,
``alibi``, ``t5-buckets``, ``rope``): the ``-o`` option and its check (the formats of
:data:`fastpe._io.writers.WRITERS`, chosen by the suffix), the ``--dtype`` option, a default
path, :func:`entry` (an array the file will hold), :func:`check_size` (memory and disk,
before anything is allocated), :func:`write_arrays`, which computes the arrays and writes
them through the format's writer, atomically, and the one-line summary.

Every file records a spec (:func:`fastpe._io.writers.make_spec`): the library function that
computed it and its keyword arguments, the backend aside (every backend computes the same
bits).  Each command calls the library with exactly the keywords it records, so the two
cannot differ; positions the command makes itself are recorded as ``{"arange": N}``.

bfloat16 in ``.npy`` and ``.npz``.  NumPy has no bfloat16: ``numpy.save`` of an
``ml_dtypes.bfloat16`` array writes the anonymous type ``'<V2'``, which ``numpy.load``
returns as raw void records that neither arithmetic nor ``torch.from_numpy`` accept.  The
writers therefore store a bfloat16 array as its 16-bit patterns, dtype ``uint16``, which
every reader can load; ``numpy.load(path).view(ml_dtypes.bfloat16)`` (or
``torch.from_numpy(...).view(torch.bfloat16)``) gives the values back, bit for bit.  In
``.safetensors`` it is ``BF16``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import click

from .._dtypes import DTYPES
from .._io.writers import WRITERS, formats_text
from . import options

__all__ = [
    "BFLOAT16_NOTE", "dtype_opt", "check_output", "output_opt", "default_path", "entry", "check_size", "write_arrays",
    "dtype_text", "summary",
]

#: the note every command writing bfloat16 shows in its help
BFLOAT16_NOTE = (
    "In .npy and .npz bfloat16 is stored as its raw bits, dtype uint16 (NumPy has no bfloat16 type): "
    "read it back with numpy.load(PATH).view(ml_dtypes.bfloat16); in .safetensors it is BF16."
)

dtype_opt = click.option(
    "--dtype",
    type=click.Choice(DTYPES, case_sensitive=False),
    default=DTYPES[0],
    show_default=True,
    help="Output format; float16/bfloat16 are the correctly rounded exact values. " + BFLOAT16_NOTE,
)


def check_output(path: str, writer: str) -> str:
    """:func:`options.check_output_path` for the formats the writers write (``writer`` names
    the command in the message); a ``.npy`` file's sidecar ``PATH.json`` must be writable
    too, and ``.safetensors`` needs its package."""
    suffix = next((s for s in WRITERS if path and path.lower().endswith(s)), "")
    if path and not suffix and not (os.path.isdir(path) or path.endswith(("/", os.sep))):
        raise click.BadParameter(f"{path!r} does not end in {formats_text()} ({writer} writes those)")
    # (no suffix left: an empty path or a directory, which check_output_path names)
    path = options.check_output_path(path, suffix=suffix or next(iter(WRITERS)), writer=writer)
    format_writer = WRITERS[suffix]
    sidecar = format_writer.sidecar_path(path)
    if sidecar is not None and os.path.lexists(sidecar) and not os.path.isfile(sidecar):
        raise click.BadParameter(f"{sidecar!r}, where the spec of {path!r} goes, exists and is not a regular file")
    try:
        format_writer.require()
    except ImportError as exc:
        raise click.BadParameter(str(exc)) from None
    return path


def _formats_help() -> str:
    """The formats, in the words of ``-o``'s help."""
    beside = tuple(s for s, w in WRITERS.items() if w.sidecar)
    inside = tuple(s for s, w in WRITERS.items() if not w.sidecar)
    return (f"{formats_text(tuple(WRITERS))}, by its suffix; the spec that made it goes in PATH.json beside "
            f"a {formats_text(beside)}, inside a {formats_text(inside)}")


def output_opt(writer: str, default: str, *, holds: str = ""):
    """The ``-o/--output`` option of an array command: checked by :func:`check_output`, its
    help naming the formats, what the files hold if they differ by format (``holds``) and
    the ``default`` file name."""

    def callback(ctx, param, value):
        return None if value is None else check_output(value, writer)

    return click.option(
        "-o", "--output", type=click.Path(), default=None, callback=callback,
        help=f"Output file: {_formats_help()}. {holds + ' ' if holds else ''}Its directory must exist; an existing "
        f"file is replaced atomically. Default: {default} in the current directory.",
    )


def dtype_text(dtype, path: str) -> str:
    """The dtype as every summary line names it: its name, and for bfloat16 in a format that
    stores it as its bit patterns (``.npy``, ``.npz``) ``bfloat16 (as uint16 bits)``, the
    dtype ``numpy.load`` will show."""
    from .._io.writers import writer_for

    name = getattr(dtype, "name", str(dtype))
    if name == "bfloat16" and writer_for(path).bfloat16_as_uint16:
        return "bfloat16 (as uint16 bits)"
    return name


def default_path(name: str, writer: str = "fastpe") -> str:
    """``name`` in the current directory, checked as ``-o`` would be (exit status 2 if not)."""
    try:
        return check_output(name, writer)
    except click.BadParameter as exc:
        raise options.InputError(f"default output path: {exc.message}; use -o") from None


def entry(name: str, shape: tuple[int, ...], dtype):
    """The :class:`fastpe._io.writers.Entry` of an array the command will write (``dtype`` a
    name or NumPy dtype; bfloat16 without ml_dtypes is bad input, exit status 2)."""
    import numpy as np

    from .._dtypes import resolve
    from .._io.writers import Entry

    with options.library_errors():
        dt = resolve(dtype) if str(dtype).lower() in DTYPES else np.dtype(dtype)
    return Entry(name, dt, tuple(shape))


def check_size(path: str, entries, spec: dict, *, held: tuple[tuple[int, ...], str] | None = None,
               transient: int = 0, advice: str = "", space: bool = True) -> None:
    """Refuse, before anything is allocated, arrays that cannot be held in memory or written
    to ``path``: ``entries`` are the :func:`entry` of each array the file will hold, ``spec``
    the spec it will record.

    The arrays (plus ``transient`` bytes the command allocates besides) larger than the
    machine's physical memory are bad input, exit status 2: allocating them would fail, or
    thrash the machine first.  The message names ``held`` (a shape and dtype name), by
    default the one entry, and how many bytes it would take, then ``advice``: what to ask
    for instead (the non-streaming commands hold their whole array).  A file larger than the
    free space of ``path``'s file system exits 1, as a disk that fills up while writing does;
    ``space=False`` leaves that to after the library's own checks (a request past its limits
    is bad input first).
    """
    from .._io import save as _save
    from .._io.writers import writer_for

    entries = list(entries)
    nbytes = sum(e.nbytes for e in entries)
    shape, dtype = held if held is not None else (entries[0].shape, entries[0].dtype.name)
    try:
        _save.check_memory(f"the {' x '.join(map(str, shape))} {dtype} array", nbytes + transient)
    except ValueError as exc:
        raise options.InputError(f"{exc}; {advice}" if advice else str(exc)) from None
    if not space:
        return
    try:
        _save.check_space(path, writer_for(path).size(entries, spec))
    except OSError as exc:
        raise click.ClickException(f"could not write {path}: {exc}") from exc


def write_arrays(path: str, entries, compute: Callable[[], dict], spec: dict):
    """Write the arrays ``compute()`` returns (a library call, ``{name: array}``) as
    ``entries`` (their :func:`entry`, in the file's order) and ``spec`` to ``path``
    atomically, through the writer of its format.

    The temporary file is created first and the arrays computed into it, so an interruption
    during the work leaves nothing either.  Returns ``(arrays, compute_seconds,
    write_seconds)``.  The library's ``ValueError`` / ``TypeError`` become exit status 2; on
    any failure, Ctrl-C, SIGTERM or SIGHUP nothing is left at ``path`` (a file already there
    is kept) and no temporary file remains.
    """
    from .._io import writers

    entries = list(entries)
    computed: dict = {}
    seconds = {"compute": 0.0}

    def blocks():
        start = time.perf_counter()
        with options.library_errors():
            computed.update(compute())
        seconds["compute"] = time.perf_counter() - start
        for e in entries:
            yield e.name, computed[e.name]

    start = time.perf_counter()
    try:
        writers.save(path, entries, spec, blocks())
    except OSError as exc:  # e.g. a full disk (exit status 1)
        raise click.ClickException(f"could not write {path}: {exc}") from exc
    return computed, seconds["compute"], time.perf_counter() - start - seconds["compute"]


def summary(path: str, array, what: str, backend: str, compute_s: float, write_s: float) -> str:
    """The one-line report of a written array, in the form ``fastpe table`` prints."""
    return (
        f"wrote {path}: {dtype_text(array.dtype, path)} {array.shape}, {what}, "
        f"{options.human_size(array.nbytes)}, backend {backend}, "
        f"{options.milliseconds(compute_s)} compute + {options.milliseconds(write_s)} write"
    )
