"""Options shared by fastpe's commands, and their validating callbacks.

The callbacks reuse the library's own checks (:mod:`fastpe._validate`), so the CLI accepts
exactly what the API accepts; they only turn a ``ValueError``/``TypeError`` into a
:class:`click.BadParameter` that names the option.  Bad input therefore stops the command
before any work is done, with exit status 2 and a one-line message.

--d-model     columns, 1 .. 65536 (required by ``table``)
--max-len     rows, 1 .. 2**32 (default 2048)
--base        frequency base, finite and > 1 (default 10000)
--backend     numba | cython | python; default: $FASTPE_BACKEND, else the fastest available
-o, --output  a ``.npy`` path in an existing, writable directory; replaced if it exists
--layout, --denominator, --min-timescale, --max-timescale
              the sinusoid conventions of :class:`fastpe.PosEncConfig`
--dtype       float32 | float64 | float16 | bfloat16 (bfloat16 needs ml_dtypes)

Only light modules are imported here: ``fastpe --help`` must not load numba.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator

import click

from ..sinusoid import DEFAULT_BASE, DEFAULT_MAX_LEN, DENOMINATORS, TABLE_LAYOUTS
from .._dtypes import DTYPES
from .._backends.registry import BACKENDS
from .._plans.layouts import TABLE_LAYOUT_HELP

__all__ = [
    "InputError",
    "library_errors",
    "check_output_path",
    "open_npy",
    "check_regular_file",
    "human_size",
    "milliseconds",
    "d_model_handler",
    "library_check",
    "max_len_handler",
    "base_handler",
    "backend_handler",
    "output_handler",
    "d_model_opt",
    "max_len_opt",
    "base_opt",
    "backend_opt",
    "output_opt",
    "timescale_handler",
    "dtype_handler",
    "layout_opt",
    "denominator_opt",
    "min_timescale_opt",
    "max_timescale_opt",
    "dtype_opt",
    "VERBOSE_HELP",
    "QUIET_HELP",
    "verbosity_options",
]

#: the help of -v and -q, the group's and every command's: one text each
VERBOSE_HELP = "More output (repeatable); tracebacks on failure. Before or after the command."
QUIET_HELP = "Less output: only errors (and results asked for). Before or after the command."


class InputError(click.ClickException):
    """Bad input found by the library while a command ran: one line, exit status 2."""

    exit_code = 2


@contextlib.contextmanager
def library_errors() -> Iterator[None]:
    """Turn the library's ``ValueError``/``TypeError`` (bad input) into :class:`InputError`.

    Wrap only calls into the library (which validates its input), so that a bug elsewhere
    still surfaces as an unexpected failure (exit status 1) rather than as the user's fault.
    """
    try:
        yield
    except (ValueError, TypeError) as exc:
        raise InputError(str(exc)) from exc


def _bad(exc: Exception, name: str) -> click.BadParameter:
    # the library's message starts with the argument's name; click adds the option's own
    message = str(exc)
    if message.startswith(name + " "):
        message = message[len(name) + 1 :]
    return click.BadParameter(message)


def library_check(name: str, check):
    """A click callback running the library's check of argument ``name`` (exit status 2)."""

    def callback(ctx, param, value):
        if value is None:
            return None
        try:
            return check(value)
        except (TypeError, ValueError) as exc:
            message = str(exc)
            if message.startswith(name + " "):
                message = message[len(name) + 1:]
            raise click.BadParameter(message) from None

    return callback


def _add_verbosity(sign: int):
    def callback(ctx, param, value):
        # the group's own -v/-q have set the count already (its callback runs before the
        # command's options are parsed); a command run on its own starts from 0
        obj = ctx.ensure_object(dict)
        obj["verbosity"] = obj.get("verbosity", 0) + sign * value
        return value

    return callback


def verbosity_options() -> list[click.Option]:
    """``-v/--verbose`` and ``-q/--quiet`` for a command: counted into the same verbosity as
    the group's, so ``fastpe -q grid ...`` and ``fastpe grid ... -q`` are the same."""
    return [
        click.Option(["-v", "--verbose"], count=True, expose_value=False, callback=_add_verbosity(+1),
                     help=VERBOSE_HELP),
        click.Option(["-q", "--quiet"], count=True, expose_value=False, callback=_add_verbosity(-1),
                     help=QUIET_HELP),
    ]


def d_model_handler(ctx, param, value):
    """``--d-model``: an int in ``[1, 65536]`` (or a tuple of them, for ``multiple=True``)."""
    if value is None:
        return None
    if isinstance(value, tuple):
        return tuple(d_model_handler(ctx, param, v) for v in value)
    from .._validate import check_d_model

    try:
        return check_d_model(value)
    except (TypeError, ValueError) as exc:
        raise _bad(exc, "d_model") from None


def max_len_handler(ctx, param, value):
    """``--max-len``: an int in ``[1, 2**32]``."""
    if value is None:
        return None
    from .._validate import check_max_len

    try:
        return check_max_len(value)
    except (TypeError, ValueError) as exc:
        raise _bad(exc, "max_len") from None


def base_handler(ctx, param, value):
    """``--base``: a finite float greater than 1 (click's FLOAT accepts ``nan`` and ``inf``)."""
    if value is None:
        return None
    from .._validate import check_base

    try:
        return check_base(value)
    except (TypeError, ValueError) as exc:
        raise _bad(exc, "base") from None


def backend_handler(ctx, param, value):
    """``--backend``: a known backend (``click.Choice`` checks that) that loads here.

    Finding out loads the backend (so imports numba for ``numba``); this runs only when a
    command is invoked with ``--backend``, never for ``--help``.  ``None`` (the default)
    passes through: the library then applies ``$FASTPE_BACKEND`` or its automatic choice.
    Accepts a single name or, for ``multiple=True`` options, a tuple of names.
    """
    if value is None:
        return None
    if isinstance(value, tuple):
        return tuple(backend_handler(ctx, param, v) for v in value)
    from .. import _backends

    name = value.strip().lower()
    if name not in BACKENDS:
        raise click.BadParameter(f"{value!r} is not a fastpe backend; choose one of {', '.join(BACKENDS)}")
    reason = _backends.unavailable_reason(name)
    if reason is not None:
        raise click.BadParameter(f"{name!r} is not available here: {reason}")
    return name


def human_size(nbytes: int) -> str:
    """``4.0 MiB``-style sizes for the commands' summary lines."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def milliseconds(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def check_output_path(path: str, suffix: str = ".npy", writer: str = "fastpe") -> str:
    """Return ``path`` if fastpe can write a ``suffix`` file there, else raise
    :class:`click.BadParameter` (``writer`` names the command in the message).

    Refused: an empty path, a directory, a name not ending in ``suffix``, a parent directory
    that does not exist or is not writable, and an existing file that is not a regular file
    (a device or a pipe: replacing it would be surprising).  An existing regular file is
    fine: it will be replaced, atomically.
    """
    if not path:
        raise click.BadParameter("the output path is empty")
    if os.path.isdir(path) or path.endswith(("/", os.sep)):
        raise click.BadParameter(f"{path!r} names a directory; give a file name ending in {suffix}")
    name = os.path.basename(path)
    if not name.lower().endswith(suffix):
        raise click.BadParameter(f"{path!r} does not end in {suffix} ({writer} writes {suffix} files)")
    if len(name) <= len(suffix):
        raise click.BadParameter(f"{path!r} has no file name before {suffix}")
    parent = os.path.dirname(path) or os.curdir
    if not os.path.isdir(parent):
        raise click.BadParameter(f"directory {parent!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise click.BadParameter(f"directory {parent!r} is not writable")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return path
    except OSError as exc:  # e.g. a dangling symlink loop
        raise click.BadParameter(f"{path!r} cannot be used: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise click.BadParameter(f"{path!r} exists and is not a regular file")
    return path


def check_regular_file(path: str) -> None:
    """A :class:`ValueError` unless ``path`` is a regular file: reading a pipe or a device
    would block or never end."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ValueError(f"cannot read {path!r}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise ValueError(f"{path!r} is not a regular file")


def open_npy(path: str):
    """The array in the ``.npy`` file ``path``, memory-mapped: only its header is read, so
    its shape and dtype can be checked before its data are.

    Anything else is a :class:`ValueError` with a one-line message: not a regular file (a
    pipe would block the command forever), an unreadable file, an ``.npz`` archive, a file
    that is not ``.npy`` at all (NumPy itself would blame pickled data, which is
    misleading), a truncated header, an object array.
    """
    import numpy as np
    from numpy.lib import format as npy_format

    check_regular_file(path)
    try:
        with open(path, "rb") as f:
            magic = f.read(len(npy_format.MAGIC_PREFIX))
    except OSError as exc:
        raise ValueError(f"cannot read {path!r}: {exc.strerror or exc}") from None
    if magic != npy_format.MAGIC_PREFIX:
        if magic.startswith(b"PK"):
            raise ValueError(f"{path!r} is not a .npy file: it is an .npz archive (a ZIP file)")
        raise ValueError(f"{path!r} is not a .npy file: it does not start with NumPy's magic string")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise ValueError(f"cannot read {path!r} as a .npy file: {' '.join(str(exc).split())}") from None


def output_handler(ctx, param, value):
    """``-o/--output``: see :func:`check_output_path`; ``None`` (use the default) passes."""
    if value is None:
        return None
    return check_output_path(value)


d_model_opt = click.option(
    "--d-model",
    "d_model",
    type=int,
    required=True,
    callback=d_model_handler,
    metavar="N",
    help="Number of columns (model width), 1 to 65536; odd is allowed.",
)

max_len_opt = click.option(
    "--max-len",
    "max_len",
    type=int,
    default=DEFAULT_MAX_LEN,
    show_default=True,
    callback=max_len_handler,
    metavar="N",
    help="Number of rows: positions 0 to N-1.",
)

base_opt = click.option(
    "--base",
    type=float,
    default=DEFAULT_BASE,
    show_default=True,
    callback=base_handler,
    metavar="B",
    help="Frequency base, a finite number greater than 1.",
)

backend_opt = click.option(
    "--backend",
    type=click.Choice(BACKENDS, case_sensitive=False),
    default=None,
    callback=backend_handler,
    help="Backend to compute with. Default: $FASTPE_BACKEND, else the fastest available.",
)

output_opt = click.option(
    "-o",
    "--output",
    type=click.Path(),
    default=None,
    callback=output_handler,
    help="Output .npy file; its directory must exist. An existing file is replaced "
    "atomically. Default: pe_<MAX_LEN>x<D_MODEL>.npy in the current directory.",
)


def timescale_handler(ctx, param, value):
    """``--min-timescale`` / ``--max-timescale``: a finite float > 0 (how the two relate to
    each other and to ``--base`` is checked with the whole configuration)."""
    if value is None:
        return None
    from .._validate import check_positive

    try:
        return check_positive(param.name, value)
    except (TypeError, ValueError) as exc:
        raise _bad(exc, param.name) from None


def dtype_handler(ctx, param, value):
    """``--dtype``: one of the output formats (``click.Choice`` checks the name), usable here
    (bfloat16 needs ml_dtypes); returned as its lower-case name."""
    if value is None:
        return None
    from .._dtypes import resolve

    try:
        return resolve(value).name
    except (TypeError, ValueError) as exc:
        raise _bad(exc, "dtype") from None


layout_opt = click.option(
    "--layout",
    type=click.Choice(TABLE_LAYOUTS, case_sensitive=False),
    default=TABLE_LAYOUTS[0],
    show_default=True,
    help="Column layout: " + " or ".join(f"{name} {line}" for name, line in TABLE_LAYOUT_HELP.items()) + ".",
)

denominator_opt = click.option(
    "--denominator",
    type=click.Choice(DENOMINATORS, case_sensitive=False),
    default=DENOMINATORS[0],
    show_default=True,
    help="Frequencies base**(-2i/d) (d, the spec) or base**(-k/(d//2-1)) (half-1: fairseq, tensor2tensor).",
)

min_timescale_opt = click.option(
    "--min-timescale",
    "min_timescale",
    type=float,
    default=1.0,
    show_default=True,
    callback=timescale_handler,
    metavar="T",
    help="tensor2tensor's min_timescale: the highest frequency is 1/T (T >= 1/1024).",
)

max_timescale_opt = click.option(
    "--max-timescale",
    "max_timescale",
    type=float,
    default=None,
    callback=timescale_handler,
    metavar="T",
    help="tensor2tensor's max_timescale: the lowest frequency is 1/T. Default: --base.",
)

dtype_opt = click.option(
    "--dtype",
    type=click.Choice(DTYPES, case_sensitive=False),
    default=DTYPES[0],
    show_default=True,
    callback=dtype_handler,
    help="Output dtype; float16 and bfloat16 are correctly rounded (bfloat16 needs ml_dtypes).",
)
